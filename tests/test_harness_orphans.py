"""No orphans: brokers and consumers die with the interpreter that started them.

Each case runs a real Python process that starts a broker (and a consumer), then ends it the way
a test run can end: normal exit (atexit stops them) or SIGKILL (PR_SET_PDEATHSIG stops them).
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.broker import pid_alive
from harness.lines import KAFKA_39
from harness.maven import missing_tools

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}"),
]

SCRIPT = f"""
import json, sys, time
from harness.broker import BrokerSpec, start_broker
from demo.clients import ClientKind, ConsumerSpec, start_consumer
broker = start_broker(BrokerSpec({KAFKA_39!r}))
consumer = start_consumer(ConsumerSpec(ClientKind.CONFLUENT, broker.bootstrap, "g", ("t",)))
info = {{"broker": broker.pid, "consumer": consumer.pid, "dir": str(broker.plan.work_dir)}}
print(json.dumps(info), flush=True)
if sys.argv[1] == "hang":
    time.sleep(600)
"""


def _wait_dead(pids: list[int], timeout_s: float = 60) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if pid_alive(pid)]
        if not alive:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if pid_alive(pid)]


def _launch(mode: str) -> tuple[subprocess.Popen[str], dict[str, object]]:
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, mode], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, f"child printed nothing (exit {proc.wait()})"
    return proc, json.loads(line)


def test_normal_exit_stops_broker_and_consumer_via_atexit() -> None:
    proc, info = _launch("exit")
    assert proc.wait(timeout=120) == 0
    leftover = _wait_dead([int(info["broker"]), int(info["consumer"])], timeout_s=10)  # type: ignore[call-overload]
    assert leftover == []
    assert not Path(str(info["dir"])).exists()


def test_sigkill_of_the_parent_still_ends_broker_and_consumer() -> None:
    proc, info = _launch("hang")
    pids = [int(info["broker"]), int(info["consumer"])]  # type: ignore[call-overload]
    assert all(pid_alive(pid) for pid in pids)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    try:
        assert _wait_dead(pids) == []
    finally:
        for pid in pids:  # never leave what this test started, even when it fails
            if pid_alive(pid):
                subprocess.run(["kill", "-9", str(pid)], check=False)
        shutil.rmtree(str(info["dir"]), ignore_errors=True)


def test_a_killed_test_process_still_runs_the_detached_clusters_stop(tmp_path: Path) -> None:
    """`broker start` detaches its brokers (no PR_SET_PDEATHSIG), so a SIGKILLed pytest left a
    CLI-started cluster running; tests/support/detached.py's watchdog runs the stop command when
    the process that set it up dies (here the command writes a file instead of stopping brokers)."""
    marker = tmp_path / "stopped"
    script = (
        "import sys, time\n"
        "from tests.support.detached import run_when_killed\n"
        f"with run_when_killed(['touch', {str(marker)!r}]):\n"
        "    print('ready', flush=True)\n"
        "    time.sleep(600)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    assert not marker.exists()
    child.send_signal(signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 30
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists()
    # A block left normally ends the watchdog without running the command.
    from tests.support.detached import run_when_killed

    quiet = tmp_path / "not-run"
    with run_when_killed(["touch", str(quiet)]):
        pass
    time.sleep(2)
    assert not quiet.exists()
