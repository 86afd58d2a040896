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


def test_kafka_group_defaults_are_the_reference_coordinators() -> None:
    """A broker the product starts and the reference coordinator start from the same (Kafka's)
    group settings: one table pinned to the other."""
    from harness.cli import KAFKA_GROUP_DEFAULTS
    from replay.brokers import group_settings

    defaults = group_settings(None).broker_config()
    assert {key: defaults[key] for key in KAFKA_GROUP_DEFAULTS} == KAFKA_GROUP_DEFAULTS


def test_stop_names_an_unknown_id_and_exits_2(run_dir, capsys) -> None:
    assert group_replay_main(["broker", "stop", "12345678"]) == 2
    assert "no broker with id 12345678" in capsys.readouterr().err


def test_port_in_use_is_a_usage_error(run_dir, capsys) -> None:
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert group_replay_main(["broker", "start", "--port", str(port), "--progress", "off"]) == 2
    assert f"--port {port}: cannot listen there" in capsys.readouterr().err


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}")
def test_start_on_a_port_and_stop_only_by_id_or_state_dir(
    run_dir, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """`start --port P --state-dir D` (relative to the caller's directory); `stop` in another state
    dir leaves it running; `stop ID` in D stops it. It runs with Kafka's group defaults."""
    import socket

    from proxy.upstream import describe_upstream_sync

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.chdir(tmp_path)
    mine = ["--state-dir", "mine"]
    assert group_replay_main(["broker", "start", "--port", str(port), "--progress", "off", *mine]) == 0
    captured = capsys.readouterr()
    assert captured.out.strip().splitlines()[-1] == f"127.0.0.1:{port}"
    assert group_replay_main(["broker", "status", "--format", "json", *mine]) == 0
    [state] = json.loads(capsys.readouterr().out)
    assert state["port"] == port and (tmp_path / "mine" / f"broker-{KAFKA_39}.json").exists()
    assert f"broker stop {state['pid']}" in captured.err
    try:
        # A broker just started answers its first DescribeConfigs slowly under load (once > 5 s).
        settings = describe_upstream_sync("127.0.0.1", port, timeout_ms=30_000)
        assert settings.initial_rebalance_delay_ms == 3000  # Kafka's default, not the tests' 0
        assert settings.min_session_timeout_ms == 6000

        # Another state dir (and the default one) knows nothing of it: nothing is stopped.
        assert group_replay_main(["broker", "stop", "--state-dir", "other"]) == 0
        assert group_replay_main(["broker", "stop"]) == 0
        assert pid_alive(state["pid"])
        assert group_replay_main(["broker", "stop", str(state["pid"]), *mine]) == 0
        assert f"stopped Kafka {KAFKA_39} (id {state['pid']}" in capsys.readouterr().out
        assert not pid_alive(state["pid"])
    finally:
        if pid_alive(state["pid"]):
            group_replay_main(["broker", "stop", *mine])
