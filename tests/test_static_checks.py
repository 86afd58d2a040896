"""Lint (complexity included), format, types, import contracts and module size run as part of the
suite, so CI enforces them.

Each check runs the real tool over the real tree; a violation fails with the tool's own report.
"""

from __future__ import annotations

import ast
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


PRODUCT = ("proxy", "replay", "validator", "harness", "demo")
MAX_MODULE_LINES = 600
# Modules over the limit, each awaiting a split by responsibility (issue 11): empty since the
# splits of broker, session, capture writer, consumer coordinator and serve; keep it so.
OVER_LIMIT_AWAITING_SPLIT: frozenset[str] = frozenset()


def _product_modules() -> list[Path]:
    modules = [ROOT / "group_replay.py"]
    for package in PRODUCT:
        modules += (ROOT / package).rglob("*.py")
    return modules


def test_product_modules_under_600_lines() -> None:
    """Issue 11's measure: no product module over 600 lines (split by responsibility instead)."""
    sizes = {
        str(path.relative_to(ROOT)): len(path.read_text(encoding="utf-8").splitlines())
        for path in _product_modules()
    }
    over = {name: lines for name, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert set(over) <= OVER_LIMIT_AWAITING_SPLIT, (
        f"modules over {MAX_MODULE_LINES} lines: {dict(sorted(over.items()))}"
    )


def test_product_waits_with_asyncio_timeout_not_wait_for() -> None:
    """On Python 3.11 `asyncio.wait_for` loses a cancel that meets a result in the same loop
    iteration (CPython gh-86296): a loop stopped by cancelling it then runs on, which hung a
    differential run for 600 s (docs/ci.md). The product waits with `asyncio.timeout` instead."""
    calls = []
    for path in _product_modules():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "wait_for"
                and getattr(node.value, "id", "") == "asyncio"
            ):
                calls.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not calls, f"asyncio.wait_for in the product (use asyncio.timeout): {calls}"
