"""Random scenarios against the reference coordinator: the engine never wedges, stays deterministic,
and only duplicate instance ids fence anybody."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.capture.reader import read_capture
from replay.plan import ReplayPlan, build_plan
from replay.run import replay_reference
from replay.scenario import parse_scenario
from tests.support.synth import synthesize_capture


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> ReplayPlan:
    path = tmp_path_factory.mktemp("prop") / "group.pcapng"
    synthesize_capture(path, members=4, static=False, duration_ms=40_000)
    return build_plan(read_capture(path), "prop")


MEMBERSHIP = st.sampled_from(["static", "dynamic", "as-recorded"])
JOIN_VERSION = st.sampled_from([None, 4, 5, 7, 9])


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[str, bool]:
    lines = ["name: random", "description: generated", "duration_ms: 20000", "members:"]
    instance_ids = []
    for ordinal in range(4):
        membership = draw(MEMBERSHIP)
        version = draw(JOIN_VERSION)
        lines.append(f"  - match: {{ordinal: {ordinal}}}")
        lines.append(f"    membership: {membership}")
        if membership == "static":
            instance = draw(st.sampled_from([f"i-{ordinal}", "shared"]))
            instance_ids.append(instance if version is None or version >= 5 else None)
            lines.append(f"    instance_id: {instance}")
        if version is not None:
            lines.append(f"    api_versions: {{JoinGroup: {version}}}")
    order = draw(st.sampled_from(["ordinal", "reverse", "leader-first", "leader-last"]))
    leave = draw(st.sampled_from(["dynamic", "always", "never"]))
    after = draw(MEMBERSHIP)
    lines += [
        "rolling:",
        f"  order: {order}",
        f"  start_ms: {draw(st.integers(1000, 20000))}",
        f"  interval_ms: {draw(st.integers(500, 10000))}",
        f"  downtime_ms: {draw(st.integers(0, 5000))}",
        f"  leave_on_shutdown: {leave}",
        "  after:",
        f"    membership: {after}",
    ]
    if draw(st.booleans()):
        code = draw(st.sampled_from([25, 27, 22]))
        api = draw(st.sampled_from(["Heartbeat", "SyncGroup", "JoinGroup"]))
        kind = draw(st.sampled_from(["error", "drop", "delay"]))
        lines += [
            "faults:",
            f"  - {{match: {{ordinal: 1}}, api: {api}, kind: {kind}, error_code: {code}, delay_ms: 700}}",
        ]
    present = [i for i in instance_ids if i is not None]
    duplicates = len(present) != len(set(present))
    return "\n".join(lines) + "\n", duplicates


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(generated=scenarios())
def test_random_scenarios_replay_deterministically(plan: ReplayPlan, generated: tuple[str, bool]) -> None:
    text, duplicates = generated
    scenario = parse_scenario(text, "generated.yaml")
    first = replay_reference(plan, scenario)
    second = replay_reference(plan, scenario)
    assert first.events == second.events
    assert first.events, "nobody joined"
    seqs = [e.seq for e in first.events]
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)
    times = [e.ts_ms for e in first.events]
    assert times == sorted(times)
    fenced = [e for e in first.events if e.event == "member_fenced"]
    if not duplicates:
        assert fenced == [], text
