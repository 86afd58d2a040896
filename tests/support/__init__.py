"""The test kit: test-only code the product never imports (synthetic captures, scenario libraries)."""
