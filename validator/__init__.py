"""PySpark validator: diffs expected and observed rebalances and writes the compatibility report."""
