"""`group-replay broker start|status|stop` on a real, detached broker."""

from __future__ import annotations

import json

import pytest

from group_replay import main as group_replay_main
from harness import paths
from harness.broker import find_running, pid_alive
from harness.lines import KAFKA_4X, KAFKA_39
from harness.maven import missing_tools
from harness.probe import api_versions, split_bootstrap


@pytest.fixture
def run_dir(tmp_path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(paths.RUN_DIR_ENV, str(tmp_path / "run"))
    yield tmp_path / "run"
    for state in find_running():  # never leave a detached broker behind, even on failure
        from harness.broker import stop_detached

        stop_detached(state)


def test_usage_errors_exit_2(run_dir, capsys) -> None:
    assert group_replay_main(["broker"]) == 2
    assert group_replay_main(["broker", "start", "--version", "nine"]) == 2
    assert "must look like" in capsys.readouterr().err
    assert group_replay_main(["broker", "start", "--version", KAFKA_4X, "--no-new-coordinator"]) == 2
    assert "only the new group coordinator" in capsys.readouterr().err
    assert group_replay_main(["broker", "start", "--set", "novalue", "--progress", "off"]) == 2


def test_status_with_nothing_running(run_dir, capsys) -> None:
    assert group_replay_main(["broker", "status", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert group_replay_main(["broker", "stop"]) == 0


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}")
def test_start_status_stop_round_trip(run_dir, capsys) -> None:
    assert group_replay_main(["broker", "start", "--version", KAFKA_39, "--progress", "off"]) == 0
    bootstrap = capsys.readouterr().out.strip().splitlines()[-1]
    [state] = find_running(KAFKA_39)
    assert state.bootstrap == bootstrap and pid_alive(state.pid)
    assert api_versions(*split_bootstrap(bootstrap))[11].max_version == 9

    # A second start finds the first instead of starting another JVM.
    assert group_replay_main(["broker", "start", "--version", KAFKA_39, "--progress", "off"]) == 0
    assert "already running" in capsys.readouterr().out
    assert group_replay_main(["broker", "status"]) == 0
    table = capsys.readouterr().out
    assert bootstrap in table and str(state.pid) in table

    assert group_replay_main(["broker", "stop", "--version", KAFKA_39]) == 0
    assert not pid_alive(state.pid)
    assert find_running() == []
    assert not (run_dir / f"broker-{KAFKA_39}.json").exists()
