"""`spark-submit --master spark://...` on a real Spark standalone cluster runs `spark_main.py`
unchanged, and its outputs equal local mode's (issue 16).

The fixture starts a master and two workers on 127.0.0.1 from pyspark's own launch classes
(`bin/spark-class org.apache.spark.deploy.master.Master` / `...worker.Worker`), waits until both
workers registered (the master's JSON status page), and stops exactly the processes it started.
Local mode's outputs for these inputs are the golden tables (`test_validator_golden.py` checks
that local mode reproduces them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.slow,
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
]

pyspark = pytest.importorskip("pyspark")

ROOT = Path(__file__).resolve().parents[1]
SPARK_BIN = Path(pyspark.__file__).parent / "bin"
WORKERS = 2


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _status(ui_port: int) -> dict[str, object]:
    with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as response:
        return json.loads(response.read())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def standalone_master(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://127.0.0.1:PORT of a master with two 1-core workers, all stopped afterwards."""
    work = tmp_path_factory.mktemp("spark-standalone")
    env = dict(os.environ, SPARK_LOCAL_IP="127.0.0.1", SPARK_NO_DAEMONIZE="1")
    port, ui_port = _free_port(), _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(SPARK_BIN / "spark-class")
    commands = [
        [spark_class, "org.apache.spark.deploy.master.Master",
         "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
        *[
            [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
             "--cores", "1", "--memory", "1g", "--webui-port", str(_free_port()),
             "--work-dir", str(work / f"worker-{i}"), url]
            for i in range(WORKERS)
        ],
    ]  # fmt: skip
    processes: list[subprocess.Popen[bytes]] = []
    try:
        for i, command in enumerate(commands):
            log = (work / f"daemon-{i}.log").open("wb")
            processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT))
            if i == 0:
                _wait(lambda: bool(_status(ui_port)), f"master {url}", work)
        _wait(lambda: int(str(_status(ui_port).get("aliveworkers", 0))) >= WORKERS, "two workers", work)
        yield url
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _wait(ready: Callable[[], bool], what: str, work: Path, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if ready():
                return
        except OSError:
            pass
        time.sleep(0.5)
    logs = "\n".join(p.read_text(errors="replace")[-1500:] for p in sorted(work.glob("daemon-*.log")))
    raise RuntimeError(f"{what} did not come up within {timeout_s} s:\n{logs}")


def test_spark_main_on_a_standalone_cluster_equals_local_mode(standalone_master: str, tmp_path: Path) -> None:
    from tests.support.spark import shared_test_session
    from tests.test_validator_golden import TABLES, assert_golden

    out = tmp_path / "tables"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    result = subprocess.run(
        [str(SPARK_BIN / "spark-submit"), "--master", standalone_master, "--deploy-mode", "client",
         "--driver-memory", "1g", "--executor-memory", "512m", "--total-executor-cores", str(WORKERS),
         str(ROOT / "validator" / "spark_main.py"),
         str(ROOT / "fixtures" / "events" / "synthetic"), "--out", str(out), "--progress", "off"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=900, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # the fixtures carry injected differences
    assert "compatibility matrix" in result.stdout
    spark = shared_test_session()
    assert_golden("fixtures", {t: spark.read.parquet(str(out / t)).toJSON().collect() for t in TABLES})
