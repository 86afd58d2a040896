"""Replay against a real Kafka 3.9 broker (Maven jars, started by the harness fixtures).

Every built-in scenario is replayed from a capture written through the proxy's capture writer;
each uses its own group, so the scenarios run concurrently against one broker without meeting.
Scaled real time (`speed`) shortens the scenario's gaps; the broker's own timeouts stay real, so
the captures use a short rebalance timeout.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from group_replay import main as group_replay
from harness.broker import Broker
from harness.lines import KAFKA_39
from proxy.capture.reader import read_capture
from replay.events import read_jsonl
from replay.live import replay_live
from replay.plan import build_plan
from replay.run import RunResult
from replay.scenario import builtin_names, load_builtin
from tests.support.synth import synthesize_capture

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SPEED = 6.0
# static-to-dynamic-rolling-downgrade runs 360 s of group time (its duration_ms), most of it
# after the abandoned static entries expired; while the broker may still count them the run holds
# 1x whatever the speed (replay.live.BrokerTimerPace), so the speed only compresses that idle
# tail. At 6x the run took 143 s, the next longest 65 s (the module waits on the longest); at
# 30x it takes 68 s (load 3-7), with the same broker timers measured at 1x.
SPEEDS = {"static-to-dynamic-rolling-downgrade": 30.0}


def _capture(tmp_path: Path, name: str, **options: object) -> Path:
    path = tmp_path / f"{name}.pcapng"
    synthesize_capture(
        path,
        members=3,
        group_id=f"{name}-{uuid.uuid4().hex[:8]}",
        duration_ms=20_000,
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        **options,  # type: ignore[arg-type]
    )
    return path


@pytest.fixture(scope="module")
def scenario_runs(broker_factory, tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunResult]:
    """Every built-in scenario, run concurrently (one group each) against one 3.9 broker."""
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    tmp_path = tmp_path_factory.mktemp("broker-scenarios")

    def run(name: str) -> RunResult:
        plan = build_plan(read_capture(_capture(tmp_path, name)), name)
        return replay_live(
            plan,
            load_builtin(name),
            address=broker.bootstrap,
            run="broker-3.9.2",
            speed=SPEEDS.get(name, SPEED),
        )

    names = CLASSIC_SCENARIOS
    with ThreadPoolExecutor(max_workers=len(names)) as pool:
        return dict(zip(names, pool.map(run, names), strict=True))


# Kafka 3.9's classic coordinator serves no KIP-848 group: the protocol-migration scenarios are
# for 4.x brokers (tests/test_migration_scenarios.py)
CLASSIC_SCENARIOS = [name for name in builtin_names() if not load_builtin(name).uses_consumer_protocol]


@pytest.mark.parametrize("name", CLASSIC_SCENARIOS)
def test_builtin_scenario_on_kafka_39(name: str, scenario_runs: dict[str, RunResult]) -> None:
    result = scenario_runs[name]
    assert result.failures == (), result.failures
    assert {e.run for e in result.events} == {"broker-3.9.2"}
    assert {e.scenario for e in result.events} == {name}
    assert any(e.event == "generation_completed" for e in result.events)


def test_cli_against_host_port_fails_a_wrong_expectation(kafka_39: Broker, tmp_path: Path) -> None:
    capture = _capture(tmp_path, "wrong")
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "name: dynamic-bounce-no-rebalance\ndescription: wrong on purpose\nduration_ms: 5000\n"
        "rolling: {start_ms: 5000, interval_ms: 5000, downtime_ms: 1000}\nexpect: {rebalances: 0}\n",
        encoding="utf-8",
    )
    out = tmp_path / "out"
    argv = ["replay", str(capture), "--scenario", str(wrong), "--against", kafka_39.bootstrap]
    code = group_replay([*argv, "--out", str(out), "--speed", str(SPEED), "--progress", "off"])
    assert code == 1
    rows = list(read_jsonl(out / "events.jsonl"))
    # AGREED #4: a HOST:PORT run is named by the version its ApiVersions imply, never the address
    assert {r.run for r in rows} == {"recorded", "broker-3.9"}  # Kafka 3.9.2's ApiVersions
    live_rebalances = [r for r in rows if r.run != "recorded" and r.event == "rebalance_started"]
    assert len(live_rebalances) > 1


def test_a_broker_replay_starts_has_the_recorded_or_kafka_default_group_settings(broker_factory) -> None:
    """`replay --against broker:V` passes `group_settings(...).broker_config()` to the broker it
    starts: Kafka's defaults for a capture without settings (not the harness's quick-test
    0 ms / 1000 ms), the recorded values otherwise. Read back from the broker with DescribeConfigs."""
    from proxy.capture.header import GroupSettings
    from proxy.upstream import describe_upstream_sync
    from replay.brokers import group_settings

    defaults = group_settings(None)
    kafka = defaults.config
    assert (kafka.group_initial_rebalance_delay_ms, kafka.group_min_session_timeout_ms) == (3_000, 6_000)
    recorded = group_settings(GroupSettings(initial_rebalance_delay_ms=0, max_size=50))
    assert recorded.source == "capture header + Kafka defaults"
    for wanted in (defaults, recorded):
        broker = broker_factory(KAFKA_39, new_coordinator=False, extra_config=wanted.broker_config())
        host, _, port = broker.bootstrap.rpartition(":")
        seen = describe_upstream_sync(host, int(port), timeout_ms=30_000)  # a fresh broker, under load
        assert seen.initial_rebalance_delay_ms == wanted.config.group_initial_rebalance_delay_ms
        assert seen.min_session_timeout_ms == wanted.config.group_min_session_timeout_ms
        assert seen.max_size == wanted.config.group_max_size


def test_a_scenario_the_broker_cannot_run_is_a_not_run_row_and_exit_2(broker_factory, tmp_path: Path) -> None:
    """AGREED #1 / issue 17: a JoinGroup v9 scenario (KIP-814) against Kafka 2.8 (JoinGroup v0-v7)
    is one `not_run` row with the reason, named by the broker's version, and exit code 2."""
    broker = broker_factory("2.8.2")
    capture = _capture(tmp_path, "v9-on-2-8")
    out = tmp_path / "out"
    argv = [
        "replay",
        str(capture),
        "--scenario",
        "client-joingroup-v5-to-v9-upgrade",
        "--against",
        broker.bootstrap,
    ]
    assert group_replay([*argv, "--out", str(out), "--speed", str(SPEED), "--progress", "off"]) == 2
    rows = list(read_jsonl(out / "events.jsonl"))
    not_run = [r for r in rows if r.event == "not_run"]
    assert [(r.run, r.scenario) for r in not_run] == [("broker-2.8", "client-joingroup-v5-to-v9-upgrade")]
    assert not_run[0].detail is not None and "JoinGroup v9" in not_run[0].detail
    assert {r.run for r in rows} == {"recorded", "broker-2.8"}
