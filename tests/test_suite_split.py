"""The suite's xdist split (tests/support/suite_split.py, docs/ci.md "keeping its budget"): a
small pytest run on two workers, with this suite's conftest hooks, where every test writes which
process ran it. It fails if the split silently stops grouping (as xdist's own loadgroup did under
pytest 9.2, pytest-dev/pytest-xdist#1386) or puts a module's tests on two workers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # a pytest run with two workers: 10-20 s

ROOT = Path(__file__).resolve().parents[1]

CONFTEST = """
import os
from pathlib import Path

import pytest

from tests.conftest import (
    pytest_collection_modifyitems, pytest_configure, pytest_configure_node, pytest_runtest_logreport,
    pytest_sessionstart, pytest_terminal_summary, pytest_unconfigure, pytest_xdist_make_scheduler,
)

@pytest.fixture(scope="session")
def broker_factory():  # stands in for the shared brokers: only its name decides the group
    return None

@pytest.fixture
def ran(request):
    out = Path(os.environ["SPLIT_OUT"]) / request.node.nodeid.replace("/", "_").replace("::", "-")
    out.write_text(str(os.getpid()))
"""

MODULES = {
    # a module where one test of four uses a shared broker: the whole module is live
    "test_live_a.py": "def test_0(ran, broker_factory): pass\n"
    + "".join(f"def test_{i}(ran): pass\n" for i in range(1, 4)),
    "test_live_b.py": "".join(f"def test_{i}(ran, broker_factory): pass\n" for i in range(3)),
    "test_spark_a.py": "import pytest\n"
    + "".join(f"@pytest.mark.spark\ndef test_{i}(ran): pass\n" for i in range(2)),
    "test_spark_b.py": "import pytest\n@pytest.mark.spark\ndef test_0(ran): pass\ndef test_1(ran): pass\n",
    **{f"test_cpu_{m}.py": "".join(f"def test_{i}(ran): pass\n" for i in range(6)) for m in "abcd"},
}


def test_each_group_runs_on_one_worker_and_the_summary_says_so(tmp_path: Path) -> None:
    project = tmp_path / "project"
    out = tmp_path / "out"
    project.mkdir()
    out.mkdir()
    (project / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    for name, text in MODULES.items():
        (project / name).write_text(text, encoding="utf-8")
    (project / "pytest.ini").write_text("[pytest]\nmarkers =\n    spark: Spark\n", encoding="utf-8")
    env = {**os.environ, "SPLIT_OUT": str(out), "PYTHONPATH": str(ROOT)}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-q"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    pids = {path.name: path.read_text() for path in out.iterdir()}
    assert len(pids) == sum(text.count("def test_") for text in MODULES.values())

    def workers(prefix: str) -> set[str]:
        return {pid for name, pid in pids.items() if name.startswith(prefix)}

    assert len(workers("test_live_")) == 1  # both live modules, every test of them
    assert len(workers("test_spark_")) == 1
    for module in "abcd":
        assert len(workers(f"test_cpu_{module}")) == 1
    assert len(set(pids.values())) == 2, "both workers ran tests"
    assert "xdist workers: 2" in run.stdout
    assert "live" in run.stdout and "spark" in run.stdout
    assert "the split is broken" not in run.stdout
