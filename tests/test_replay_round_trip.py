"""The reference run's heartbeat round trip (`CoordinatorTransport.round_trip`) against the
general path it shortcuts (submit -> send -> _handle -> outputs -> deliver): every built-in
scenario and random scenarios mixing both group protocols, rolling bounces, protocol switches,
migration policies, coordinator restarts and faults give the same events, request counts,
expectations, migration steps and coordinator records either way."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.capture.reader import read_capture
from replay import run
from replay.coordinator.consumer import target as consumer_target
from replay.coordinator.consumer.assignors import java_hash_order
from replay.plan import ReplayPlan, build_plan
from replay.run import CoordinatorTransport, RunResult, replay_reference
from replay.scenario import Scenario, builtin_names, load_builtin, parse_scenario
from tests.support.consumer_full_paths import classic_members_full_paths
from tests.support.synth import synthesize_capture

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
CAPTURE = CAPTURES / "kafka-4.3.1--java-4.3.1--static-bounce.pcapng"


@pytest.fixture(scope="module")
def recorded_plan() -> ReplayPlan:
    return build_plan(read_capture(CAPTURE), CAPTURE.stem)


class Synthetic:
    """The plan of a synthesized 4-member dynamic group (a short repr for hypothesis' reports)."""

    def __init__(self, plan: ReplayPlan) -> None:
        self.plan = plan

    def __repr__(self) -> str:
        return "Synthetic(4 dynamic members, 40 s)"


@pytest.fixture(scope="module")
def synthetic(tmp_path_factory: pytest.TempPathFactory) -> Synthetic:
    path = tmp_path_factory.mktemp("round-trip") / "group.pcapng"
    synthesize_capture(path, members=4, static=False, duration_ms=40_000)
    return Synthetic(build_plan(read_capture(path), "round-trip"))


class Taken:
    """Counts the round trips that answered a heartbeat without the general path."""

    def __init__(self) -> None:
        self.count = 0


def _replay(plan: ReplayPlan, scenario: Scenario | None, *, fast: bool, taken: Taken) -> tuple[Any, ...]:
    """The run's result and the coordinator's records, with or without the round trip."""
    transports: list[CoordinatorTransport] = []
    run_virtual = run.run_virtual
    original = CoordinatorTransport.round_trip

    def keep(runner: Any, transport: CoordinatorTransport, progress: Any) -> int:
        transports.append(transport)
        return run_virtual(runner, transport, progress)

    def counted(self: CoordinatorTransport, now_ms: int, seat: Any, send: Any) -> bool:
        with mock.patch.object(self, "outputs", wraps=self.outputs) as outputs:
            took = original(self, now_ms, seat, send)
        if took and not outputs.called:  # answered without the general path's outputs()
            taken.count += 1
        return took

    def never(self: CoordinatorTransport, now_ms: int, seat: Any, send: Any) -> bool:
        return False

    with (
        mock.patch.object(run, "run_virtual", keep),
        mock.patch.object(CoordinatorTransport, "round_trip", counted if fast else never),
    ):
        result: RunResult = replay_reference(plan) if scenario is None else replay_reference(plan, scenario)
    (transport,) = transports
    return result, transport.records, transport._correlation


def _same_both_ways(plan: ReplayPlan, scenario: Scenario | None, taken: Taken) -> None:
    fast = _replay(plan, scenario, fast=True, taken=taken)
    general = _replay(plan, scenario, fast=False, taken=Taken())
    assert fast == general


def _scenarios() -> Iterator[str | None]:
    yield None
    yield from builtin_names()


def test_every_builtin_scenario_replays_the_same_with_and_without_the_round_trip(
    recorded_plan: ReplayPlan,
) -> None:
    taken = Taken()
    for name in _scenarios():
        _same_both_ways(recorded_plan, None if name is None else load_builtin(name), taken)
    assert taken.count > 1_000, "the round trip never answered a heartbeat: nothing was compared"


@st.composite
def mixed_scenarios(draw: st.DrawFn) -> str:
    policy = draw(st.sampled_from(["bidirectional", "upgrade", "downgrade", "disabled"]))
    lines = [
        "name: random-round-trip",
        "description: generated",
        f"duration_ms: {draw(st.integers(1, 60_000))}",
        f"sessions: {draw(st.sampled_from(['as-recorded', 'keep-running']))}",
        f'broker: {{build: "{draw(st.sampled_from(["4.0", "4.3"]))}", migration_policy: {policy}}}',
        "members:",
    ]
    for ordinal in range(4):
        protocol = draw(st.sampled_from(["classic", "consumer"]))
        lines.append(f"  - match: {{ordinal: {ordinal}}}")
        lines.append(f"    membership: {draw(st.sampled_from(['static', 'dynamic']))}")
        lines.append(f"    protocol: {protocol}")
        if protocol == "consumer":
            lines.append(f"    server_assignor: {draw(st.sampled_from(['range', 'uniform']))}")
        else:
            lines.append(f"    assignors: [{draw(st.sampled_from(['range', 'cooperative-sticky']))}]")
    if draw(st.booleans()):
        after = draw(st.sampled_from(["classic", "consumer"]))
        lines += [
            "rolling:",
            f"  order: {draw(st.sampled_from(['ordinal', 'reverse', 'leader-first']))}",
            f"  start_ms: {draw(st.integers(0, 20_000))}",
            f"  interval_ms: {draw(st.integers(0, 12_000))}",
            f"  downtime_ms: {draw(st.integers(0, 8_000))}",
            f"  leave_on_shutdown: {draw(st.sampled_from(['dynamic', 'always', 'never']))}",
            f"  after: {{protocol: {after}}}",
        ]
    if draw(st.booleans()):
        lines += ["coordinator_restarts:", f"  - at_ms: {draw(st.integers(0, 30_000))}"]
    if draw(st.integers(0, 3)) == 0:  # faults turn the round trip off: still the same run
        api = draw(st.sampled_from(["Heartbeat", "ConsumerGroupHeartbeat", "JoinGroup"]))
        lines += [
            "faults:",
            f"  - {{match: {{ordinal: 1}}, api: {api}, kind: error, error_code: 27, count: 2}}",
        ]
    return "\n".join(lines) + "\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mixed_scenarios())
def test_random_mixed_protocol_runs_are_the_same_with_and_without_the_round_trip(
    synthetic: Synthetic, text: str
) -> None:
    _same_both_ways(synthetic.plan, parse_scenario(text, "generated.yaml"), Taken())


def test_the_round_trip_answers_both_protocols_heartbeats(synthetic: Synthetic) -> None:
    """Not only classic Heartbeats: steady ConsumerGroupHeartbeats take it too."""
    scenario = load_builtin("mixed-protocols-steady-state")
    taken = Taken()
    with mock.patch.object(run, "_uneventful", wraps=run._uneventful) as uneventful:
        _replay(synthetic.plan, scenario, fast=True, taken=taken)
    consumer_checks = [c for c in uneventful.call_args_list if c.args[0].api_key != run.HEARTBEAT]
    assert taken.count > 100 and consumer_checks


def _java_hash_order(group: Any, member_ids: list[str]) -> list[str]:
    return java_hash_order(member_ids)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=mixed_scenarios())
def test_random_mixed_protocol_runs_are_the_same_without_the_consumer_coordinators_fast_paths(
    synthetic: Synthetic, text: str
) -> None:
    """replay.coordinator.consumer's fast paths (steady ConsumerGroupHeartbeats read from the kio
    request and their kio answers kept, classic Heartbeats of members in a consumer group, the
    target's member order from kept hashes and zipped specs, classic members' JoinGroup and
    SyncGroup steps remembered) against its full path, in random
    mixed-protocol runs through the whole coordinator: same events, counts and records."""
    scenario = parse_scenario(text, "generated.yaml")
    fast = _replay(synthetic.plan, scenario, fast=True, taken=Taken())
    consumer = "replay.coordinator.consumer"
    patches = [
        mock.patch(f"{consumer}.service.steady_from_kio", return_value=None),
        mock.patch(f"{consumer}.classic_cycle.steady_classic_heartbeat", return_value=False),
        mock.patch(f"{consumer}.coordinator.steady_heartbeat", return_value=None),
        mock.patch(f"{consumer}.target.member_hash_order", _java_hash_order),
        mock.patch(f"{consumer}.target._homogeneous_specs", consumer_target._specs),
        *classic_members_full_paths(),  # classic members' JoinGroup / SyncGroup
    ]
    with contextlib.ExitStack() as full_paths:
        for patch in patches:
            full_paths.enter_context(patch)
        full = _replay(synthetic.plan, scenario, fast=True, taken=Taken())
    assert fast == full
