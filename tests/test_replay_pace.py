"""A live replay faster than recorded stays faithful: the broker's timers run in real time.

No broker here: the reference coordinator plays the broker of a live run, in virtual time, but the
way a broker does it: it is handed *wall* time while the members (`replay.live.LiveRunner`, its
scaled clock and its pace) live in group time. The demo's real capture (recorded through the
proxy in front of Kafka 3.9.2: five members of five client kinds, session timeout 6 s, the three
static ones gone without LeaveGroup at the end) is replayed under the demo's two scenarios:

- compressing every gap 4 times (what `LiveRunner` did before `BrokerTimerPace`) replays another
  group: a member that stopped without LeaveGroup stays in it 4 x 6 s of group time, so a rolling
  bounce finds it still there and the run has another number of rebalances than the reference,
  as Kafka 3.9.2 had in the demo (Delta -1 and -2; at --speed 1 Kafka 3.9.2 matched it);
- with the pace (1x while a broker timer may be measuring) the run is the reference's, generation
  by generation, and still takes less wall time than the group's time.
"""

from __future__ import annotations

import dataclasses
import heapq
from pathlib import Path
from typing import Any

import pytest

from proxy.capture.reader import read_capture
from replay.brokers import group_settings
from replay.clock import ScaledClock
from replay.events import EventName
from replay.live import LiveRunner
from replay.plan import ReplayPlan, build_plan
from replay.run import CoordinatorTransport, InFlight, replay_reference
from replay.scenario import load_builtin

DEMO_CAPTURE = Path(__file__).resolve().parent.parent / "fixtures" / "replay" / "demo-kafka-3.9.2.pcapng"
SCENARIOS = ("mixed-static-dynamic-group", "dynamic-to-static-rolling-upgrade")


class WallClockBroker(CoordinatorTransport):
    """The reference coordinator as a live broker: its `now` is the wall clock, not group time."""

    def __init__(self, runner: LiveRunner, config: Any, wall: list[float]) -> None:
        super().__init__(runner, config)
        self.wall = wall

    def wall_ms(self) -> int:
        return int(self.wall[0] * 1000)

    def send(self, now_ms: int, flight: InFlight) -> None:
        super().send(self.wall_ms(), flight)

    def outputs(self, now_ms: int, outputs: list[Any]) -> None:
        super().outputs(self.runner.clock.now_ms(), outputs)  # answers arrive in group time


def simulated_live_run(
    plan: ReplayPlan, scenario_name: str, speed: float, *, paced: bool
) -> tuple[Any, float]:
    """`LiveRunner.run_live`'s loop with a virtual wall clock; returns (result, wall seconds)."""
    wall = [0.0]
    runner = LiveRunner(plan, load_builtin(scenario_name), "simulated", speed, paced=paced)
    runner.clock = ScaledClock(speed, monotonic=lambda: wall[0])  # type: ignore[assignment]
    clock = runner.clock
    clock.start()
    broker = WallClockBroker(runner, group_settings(plan.group_settings).config, wall)
    runner.transport = broker
    end_ms = runner.schedule()
    coordinator = broker.coordinator
    while True:
        now_ms = clock.now_ms()
        if now_ms >= end_ms:
            break
        if runner._heap and runner._heap[0][0] <= now_ms:
            _, _, action, arg = heapq.heappop(runner._heap)
            action(now_ms, arg)
            continue
        deadline = coordinator.next_deadline()
        if deadline is not None and deadline <= broker.wall_ms():
            broker.outputs(now_ms, coordinator.advance(broker.wall_ms()))
            continue
        ask_again_ms = runner.update_pace(now_ms)
        next_ms = min(runner._heap[0][0] if runner._heap else end_ms, end_ms, ask_again_ms or end_ms)
        step_s = max(clock.seconds_until(next_ms), 0.0005)
        if deadline is not None:
            step_s = min(step_s, max((deadline - broker.wall_ms()) / 1000, 0.0005))
        wall[0] += step_s
    return runner.result(end_ms), wall[0]


def generations(events: Any) -> list[tuple[int, str, tuple[str, ...]]]:
    """(generation, what, member keys) rows: who started each rebalance, who expired or was
    fenced in it, who completed it (timestamps may differ by the machine's jitter, not these)."""
    rows: dict[tuple[int, str], set[str]] = {}
    for e in events:
        if e.event in (EventName.REBALANCE_STARTED, EventName.MEMBER_EXPIRED, EventName.MEMBER_FENCED):
            rows.setdefault((e.generation_id, str(e.event)), set()).add(e.member_key)
        elif e.event == EventName.GENERATION_COMPLETED:
            rows.setdefault((e.generation_id, "members"), set()).add(e.member_key)
    return [(g, name, tuple(sorted(keys))) for (g, name), keys in sorted(rows.items())]


def rebalances(events: Any) -> int:
    return sum(e.event == EventName.REBALANCE_STARTED for e in events)


@pytest.fixture(scope="module")
def demo_plan() -> ReplayPlan:
    return build_plan(read_capture(DEMO_CAPTURE), "demo")


@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_compressing_every_gap_replays_another_group(demo_plan: ReplayPlan, scenario_name: str) -> None:
    """The demo's finding, reproduced without a broker: the unpaced 4x run has another number of
    rebalances than the reference (the departed members stay 24 s of group time, not 6)."""
    reference = replay_reference(demo_plan, load_builtin(scenario_name))
    unpaced, _ = simulated_live_run(demo_plan, scenario_name, 4.0, paced=False)
    assert rebalances(unpaced.events) != rebalances(reference.events)


@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_a_paced_run_at_4x_is_the_reference_run(demo_plan: ReplayPlan, scenario_name: str) -> None:
    reference = replay_reference(demo_plan, load_builtin(scenario_name))
    at_1x, _ = simulated_live_run(demo_plan, scenario_name, 1.0, paced=True)
    paced, wall_s = simulated_live_run(demo_plan, scenario_name, 4.0, paced=True)
    assert generations(at_1x.events) == generations(reference.events)
    assert generations(paced.events) == generations(reference.events)
    assert paced.failures == ()
    assert wall_s < paced.simulated_ms / 1000  # the idle gaps were still compressed


def test_a_rolling_bounce_lasts_as_long_as_the_seats_it_bounces(demo_plan: ReplayPlan) -> None:
    """static-leader-bounce bounces the leader only: the run ends one interval after its bounce,
    not one interval per member (five members: a live run took 118 s of group time, not 58)."""
    scenario = load_builtin("static-leader-bounce")
    assert scenario.rolling is not None
    settle_ms = max(script.sessions[0].start_ms for script in demo_plan.scripts)
    result = replay_reference(demo_plan, scenario)
    rolling = scenario.rolling
    one_bounce = settle_ms + rolling.start_ms + rolling.interval_ms + rolling.downtime_ms
    assert result.simulated_ms == max(demo_plan.end_ms, one_bounce) + scenario.duration_ms
    everyone = replay_reference(demo_plan, load_builtin("mixed-static-dynamic-group"))
    assert everyone.simulated_ms == settle_ms + 10_000 + 5 * 15_000 + 2_000 + scenario.duration_ms


@pytest.fixture(scope="module")
def demo_plan_with_kafka_delay(demo_plan: ReplayPlan) -> ReplayPlan:
    """The demo's group as if its broker had Kafka's default 3 s initial rebalance delay."""
    settings = dataclasses.replace(demo_plan.group_settings, initial_rebalance_delay_ms=3_000)
    return dataclasses.replace(demo_plan, group_settings=settings)


def test_a_dead_static_member_is_not_fenced_in_the_reference(demo_plan_with_kafka_delay: ReplayPlan) -> None:
    """static-confluent restarts (3481 -> 3655 ms) while its first JoinGroup is still held by the
    3 s delay: Kafka answers the old member FENCED_INSTANCE_ID when the new one joins
    (replaceStaticMember), but the old process is gone and its connection closed, so no client
    and no capture sees it. The reference observed that answer and failed `fenced: 0`."""
    result = replay_reference(demo_plan_with_kafka_delay, load_builtin("mixed-static-dynamic-group"))
    assert [e for e in result.events if e.event == EventName.MEMBER_FENCED] == []
    assert result.failures == ()


@pytest.mark.parametrize("scenario_name", SCENARIOS)
def test_with_an_initial_rebalance_delay_a_paced_run_is_the_reference_run(
    demo_plan_with_kafka_delay: ReplayPlan, scenario_name: str
) -> None:
    """The broker holds the first JoinGroups 3 s of real time: unpaced at 2x the run is another
    group's (one rebalance fewer); paced at 4x it is the reference's."""
    plan = demo_plan_with_kafka_delay
    reference = replay_reference(plan, load_builtin(scenario_name))
    unpaced, _ = simulated_live_run(plan, scenario_name, 2.0, paced=False)
    paced, _ = simulated_live_run(plan, scenario_name, 4.0, paced=True)
    assert generations(unpaced.events) != generations(reference.events)
    assert generations(paced.events) == generations(reference.events)


def test_a_leave_behind_a_held_join_waits_for_its_answer(demo_plan: ReplayPlan) -> None:
    """One request at a time per connection, as a broker reads them. Under
    dynamic-to-static-rolling-upgrade dynamic-aiokafka's rejoin (3977 ms) is held until the dead
    first incarnation of static-confluent expires (9083 ms); its LeaveGroup at 5945 ms waits behind
    it on the same connection. Taken at once, it answered the held JoinGroup UNKNOWN_MEMBER_ID,
    which Kafka 3.9.2 never did (the demo's validate: 'saw other errors: unknown_member_id')."""
    result = replay_reference(demo_plan, load_builtin("dynamic-to-static-rolling-upgrade"))
    assert [e for e in result.events if e.error_code == 25] == []
    left = [e for e in result.events if e.event == EventName.MEMBER_LEFT]
    assert {e.member_key for e in left} >= {"dynamic-aiokafka#0", "dynamic-java-2.4#0"}
    assert min(e.ts_ms for e in left) >= 9_000  # answered after the held JoinGroup


def test_the_scaled_clock_changes_rate_without_a_jump() -> None:
    wall = [10.0]
    clock = ScaledClock(4.0, monotonic=lambda: wall[0])
    clock.start()
    wall[0] += 1.0
    assert clock.now_ms() == 4_000
    clock.set_rate(1.0)  # a broker timer measures from here: real time
    assert clock.now_ms() == 4_000
    wall[0] += 0.5
    assert clock.now_ms() == 4_500 and clock.seconds_until(5_500) == pytest.approx(1.0)
    clock.set_rate(4.0)
    wall[0] += 0.25
    assert clock.now_ms() == 5_500
    with pytest.raises(ValueError):
        clock.set_rate(0)
