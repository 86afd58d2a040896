"""Replay: a capture written through the proxy's writer, replayed against the reference coordinator."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from group_replay import main as group_replay
from proxy.capture.reader import read_capture
from replay.events import read_jsonl
from replay.plan import build_plan, recorded_events
from replay.run import replay_reference
from replay.scenario import builtin_names, load_builtin, parse_scenario
from tests.support.synth import synthesize_capture


@pytest.fixture(scope="module")
def dynamic_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("captures") / "dynamic-group.pcapng"
    synthesize_capture(path, members=3, static=False, duration_ms=60_000)
    return path


@pytest.fixture(scope="module")
def static_capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("captures") / "static-group.pcapng"
    synthesize_capture(path, members=4, static=True, join_api_version=5, duration_ms=60_000)
    return path


def test_plan_reconstructs_members_from_the_capture(dynamic_capture: Path, static_capture: Path) -> None:
    plan = build_plan(read_capture(dynamic_capture), "dyn")
    assert [s.member_key for s in plan.scripts] == ["consumer-0#0", "consumer-1#0", "consumer-2#0"]
    assert all(s.api_versions[11] == 9 and s.heartbeat_interval_ms == 3000 for s in plan.scripts)
    assert plan.partitions["replay-group"][0] == {"orders": tuple(range(6))}
    static = build_plan(read_capture(static_capture), "static")
    assert [s.member_key for s in static.scripts] == [f"consumer-{i}" for i in range(4)]
    assert {s.api_versions[11] for s in static.scripts} == {5}


def test_recorded_run_comes_from_the_observer(dynamic_capture: Path) -> None:
    events = recorded_events(build_plan(read_capture(dynamic_capture), "dyn"))
    assert {e.run for e in events} == {"recorded"}
    assert sum(e.event == "rebalance_started" for e in events) == 1
    assert sum(e.event == "generation_completed" for e in events) == 3


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_scenario_meets_its_expectations_on_the_reference(
    name: str, dynamic_capture: Path
) -> None:
    result = replay_reference(build_plan(read_capture(dynamic_capture), "dyn"), load_builtin(name))
    assert result.failures == ()
    assert result.events and {e.run for e in result.events} == {"reference"}
    assert {e.scenario for e in result.events} == {name}


def test_reference_replay_is_deterministic(static_capture: Path) -> None:
    plan = build_plan(read_capture(static_capture), "static")
    scenario = load_builtin("client-joingroup-v5-to-v9-upgrade")
    first = replay_reference(plan, scenario)
    second = replay_reference(plan, scenario)
    assert first.events == second.events


def test_leader_rejoin_keeps_or_loses_skip_assignment(static_capture: Path) -> None:
    plan = build_plan(read_capture(static_capture), "static")
    up = replay_reference(plan, load_builtin("client-joingroup-v5-to-v9-upgrade"))
    leader_rejoins = [
        e for e in up.events if e.event == "member_joined" and e.is_leader and e.skip_assignment
    ]
    assert leader_rejoins and leader_rejoins[-1].join_api_version == 9
    down = replay_reference(plan, load_builtin("client-joingroup-v9-to-v5-downgrade"))
    assert not any(e.skip_assignment for e in down.events if e.join_api_version == 5)
    assert sum(e.event == "rebalance_started" for e in down.events) == 1  # the initial formation only


def test_a_wrong_expectation_fails_for_the_right_reason(dynamic_capture: Path) -> None:
    scenario = parse_scenario(
        """
name: dynamic-bounce-without-rebalances
description: wrong on purpose - dynamic members rebalance when they bounce
rolling: {start_ms: 10000, interval_ms: 15000, downtime_ms: 2000}
expect:
  rebalances: 0
  leader_skips_assignment: true
""",
        "wrong.yaml",
    )
    result = replay_reference(build_plan(read_capture(dynamic_capture), "dyn"), scenario)
    assert len(result.failures) == 2
    assert result.failures[0].startswith("rebalances: expected at most 0, saw ")
    assert result.failures[1] == "leader_skips_assignment: expected true, saw false"


def test_injected_error_fault_makes_the_member_rejoin(dynamic_capture: Path) -> None:
    scenario = parse_scenario(
        """
name: heartbeat-unknown-member
description: the coordinator forgets member 1 once
faults:
  - {match: {ordinal: 1}, api: Heartbeat, kind: error, error_code: 25, at_ms: 5000}
expect:
  errors: [25]
  rebalances: {min: 2}
""",
        "fault.yaml",
    )
    result = replay_reference(build_plan(read_capture(dynamic_capture), "dyn"), scenario)
    assert result.failures == ()
    failed = [e for e in result.events if e.error_code == 25]
    assert [e.member_key for e in failed] == ["consumer-1#0"]


def test_cli_writes_events_and_exits_by_expectations(dynamic_capture: Path, tmp_path: Path) -> None:
    out = tmp_path / "events"
    code = group_replay(
        [
            "replay",
            str(dynamic_capture),
            "--scenario",
            "mixed-static-dynamic-group",
            "--out",
            str(out),
            "--progress",
            "off",
        ]
    )
    assert code == 0
    rows = list(read_jsonl(out / "events.jsonl"))
    assert {r.run for r in rows} == {"recorded", "reference"}
    assert {r.scenario for r in rows} == {"mixed-static-dynamic-group"}
    assert not (out / "events.parquet").exists()  # one file: the validator reads every event file

    pq = pytest.importorskip("pyarrow.parquet")
    parquet_out = tmp_path / "parquet"
    argv = ["replay", str(dynamic_capture), "--scenario", "mixed-static-dynamic-group", "--format", "parquet"]
    assert group_replay([*argv, "--out", str(parquet_out), "--progress", "off"]) == 0
    table = pq.read_table(parquet_out / "events.parquet")
    assert table.num_rows == len(rows)
    assert table.schema.field("ts_ms").type == "int64" and table.schema.field("seq").type == "int32"
    # every declared column, client_software and detail included (the writer derives from the declaration)
    from replay.events import EVENT_COLUMNS, OPTIONAL_EVENT_COLUMNS

    assert set(table.column_names) == set(EVENT_COLUMNS) | set(OPTIONAL_EVENT_COLUMNS)
    assert {"client_software", "detail"} <= set(table.column_names)

    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        "name: wrong\ndescription: d\nrolling: {start_ms: 1000}\nexpect: {rebalances: 0}\n", encoding="utf-8"
    )
    assert (
        group_replay(
            ["replay", str(dynamic_capture), "--scenario", str(wrong), "--out", str(out), "--progress", "off"]
        )
        == 1
    )

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndescription: d\nrolling: {order: sideways}\n", encoding="utf-8")
    assert group_replay(["replay", str(dynamic_capture), "--scenario", str(bad), "--out", str(out)]) == 2
    not_capture = tmp_path / "not.pcapng"
    not_capture.write_bytes(json.dumps({"x": 1}).encode())
    assert group_replay(["replay", str(not_capture), "--out", str(out)]) == 2
    assert group_replay(["replay", str(tmp_path / "missing.pcapng"), "--out", str(out)]) == 2


def test_as_recorded_replay_reproduces_a_recorded_static_bounce(tmp_path: Path) -> None:
    path = tmp_path / "bounced.pcapng"
    synthesize_capture(path, members=3, static=True, duration_ms=80_000, rolling_bounce=True)
    plan = build_plan(read_capture(path), "bounced")
    assert all(len(script.sessions) == 2 for script in plan.scripts)
    recorded = recorded_events(plan)
    replayed = replay_reference(plan).events

    def summary(events: object) -> tuple[int, list[str]]:
        rows = list(events)  # type: ignore[call-overload]
        joins = sorted(e.member_key for e in rows if e.event == "member_joined")
        return sum(e.event == "rebalance_started" for e in rows), joins

    assert summary(recorded) == summary(replayed)
    assert summary(replayed)[1].count("consumer-0") == 2


def test_cli_replays_many_captures_at_once(
    dynamic_capture: Path, static_capture: Path, tmp_path: Path
) -> None:
    out = tmp_path / "many"
    argv = ["replay", str(dynamic_capture), str(static_capture), "--scenario", "static-leader-bounce"]
    assert group_replay([*argv, "--out", str(out), "--progress", "off"]) == 0
    rows = list(read_jsonl(out / "events.jsonl"))
    assert {(r.session_id, r.run) for r in rows} == {
        (session, run) for session in ("dynamic-group", "static-group") for run in ("recorded", "reference")
    }


def test_client_software_from_api_versions_reaches_every_run(tmp_path) -> None:
    """KIP-511 names (ApiVersions v3+) label events, so the validator's matrix has a client axis."""
    from proxy.capture.reader import read_capture
    from replay.scenario import load_builtin

    path = tmp_path / "named.pcapng"
    synthesize_capture(path, members=2, static=True, duration_ms=20_000, client_software="librdkafka/2.6.1")
    plan = build_plan(read_capture(path), "named")
    assert {script.client_software for script in plan.scripts} == {"librdkafka/2.6.1"}
    recorded = recorded_events(plan)
    assert recorded and {e.client_software for e in recorded} == {"librdkafka/2.6.1"}
    result = replay_reference(plan, load_builtin("static-leader-bounce"))
    assert result.events and {e.client_software for e in result.events} == {"librdkafka/2.6.1"}
    row = recorded[0].to_json_dict()
    assert row["client_software"] == "librdkafka/2.6.1"
    del row["client_software"]  # files written before the column existed still read
    assert type(recorded[0]).from_json_dict(row).client_software is None


def test_member_key_is_the_recorded_identity_in_every_run_and_scenario(
    dynamic_capture: Path, static_capture: Path
) -> None:
    """AGREED #3: one name per member; a scenario that gives a member a group.instance.id (or
    takes it away) changes what it sends, not what it is called."""
    for capture in (dynamic_capture, static_capture):
        plan = build_plan(read_capture(capture), capture.stem)
        keys = {script.member_key for script in plan.scripts}
        assert {e.member_key for e in recorded_events(plan)} == keys
        for name in builtin_names():
            events = replay_reference(plan, load_builtin(name)).events
            assert {e.member_key for e in events} == keys, (capture.stem, name)


@pytest.mark.parametrize(
    ("assignor", "expected"),
    [
        ("range", {"consumer-0#0": ("orders-0", "orders-1"), "consumer-1#0": ("orders-2", "orders-3")}),
        ("roundrobin", {"consumer-0#0": ("orders-0", "orders-2"), "consumer-1#0": ("orders-1", "orders-3")}),
        (
            "cooperative-sticky",
            {"consumer-0#0": ("orders-0", "orders-2"), "consumer-1#0": ("orders-1", "orders-3")},
        ),
    ],
)
def test_replayed_leader_assigns_with_the_recorded_clients_assignor(
    tmp_path: Path, assignor: str, expected: dict[str, tuple[str, ...]]
) -> None:
    path = tmp_path / f"{assignor}.pcapng"
    synthesize_capture(path, members=2, partitions=4, duration_ms=20_000, assignor=assignor)
    result = replay_reference(build_plan(read_capture(path), assignor))
    assert {e.protocol_name for e in result.events if e.event == "member_joined"} == {assignor}
    final = {e.member_key: e.assignment for e in result.events if e.event == "generation_completed"}
    assert final == expected


def test_as_recorded_replay_uses_the_recorded_brokers_group_settings(tmp_path: Path) -> None:
    """Issue 17: recorded against a broker with group.initial.rebalance.delay.ms=0, three members
    joining a second apart form the group in two rebalances (the first member alone, then the two
    others, who arrive before the first one's next heartbeat); the reference reproduces that from
    the capture header. With Kafka's 3 s default all three land in the initial delay: one."""
    from proxy.capture.header import GroupSettings

    path = tmp_path / "no-delay.pcapng"
    settings = GroupSettings(
        initial_rebalance_delay_ms=0, min_session_timeout_ms=1_000, broker_version="3.9+"
    )
    synthesize_capture(path, members=3, stagger_ms=1_000, duration_ms=20_000, group_settings=settings)
    plan = build_plan(read_capture(path), "no-delay")
    assert plan.group_settings == settings

    def rebalances(events: object) -> int:
        return sum(e.event == "rebalance_started" for e in events)  # type: ignore[attr-defined]

    recorded = rebalances(recorded_events(plan))
    assert recorded == 2
    assert rebalances(replay_reference(plan).events) == recorded
    assert rebalances(replay_reference(replace(plan, group_settings=None)).events) == 1


def test_progress_is_plain_lines_without_a_terminal_and_paths_are_the_callers(
    dynamic_capture: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under a pipe or in a CI log a run's progress is plain lines (one per tenth of its time),
    never silence and never a bar's control codes; relative paths are the caller's directory's."""
    caller = tmp_path / "caller"
    caller.mkdir()
    (caller / "cap.pcapng").write_bytes(dynamic_capture.read_bytes())
    monkeypatch.chdir(caller)
    assert group_replay(["replay", "cap.pcapng", "--out", "events", "--progress", "on"]) == 0
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if "of the group's time" in line]
    assert 2 <= len(lines) <= 11, err
    assert all(line.startswith("cap reference: ") for line in lines), lines
    assert "\x1b[" not in err
    assert (caller / "events" / "events.jsonl").stat().st_size > 0


def test_a_live_replay_faster_than_recorded_warns_when_the_broker_delays_rebalances(
    dynamic_capture: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The capture header says nothing, so Kafka's 3 s initial delay applies: at --speed 4 the
    broker's real-time timers and the compressed schedule disagree, and the user is told so."""
    argv = ["replay", str(dynamic_capture), "--against", "127.0.0.1:9", "--out", str(tmp_path), "--progress"]
    assert group_replay([*argv, "off", "--speed", "4"]) == 2  # nothing listens on port 9
    err = capsys.readouterr().err
    assert "--speed 4 compresses the recorded gaps" in err and "initial rebalance delay 3000 ms" in err
    assert group_replay([*argv, "off", "--speed", "1"]) == 2
    assert "compresses" not in capsys.readouterr().err
