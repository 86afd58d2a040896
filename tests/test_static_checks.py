"""Lint, format, types and import contracts run as part of the suite, so CI enforces them.

Each check runs the real tool over the real tree; a violation fails with the tool's own report.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _run(tool: str, *args: str) -> None:
    exe = BIN / tool if (BIN / tool).exists() else shutil.which(tool)
    if exe is None:
        pytest.fail(f"{tool} is not installed: pip install -e '.[dev]'")
    proc = subprocess.run([str(exe), *args], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"{tool} {' '.join(args)} failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    )


def test_ruff_lint() -> None:
    _run("ruff", "check", ".")


def test_ruff_format() -> None:
    _run("ruff", "format", "--check", ".")


def test_mypy() -> None:
    """Strict on the sans-IO cores (proxy.wire, replay.coordinator), per pyproject."""
    _run("mypy")


def test_import_contracts() -> None:
    """proxy <- replay <- validator; harness is a leaf; the sans-IO cores import no IO or heavy deps."""
    _run("lint-imports", "--no-cache")
