"""A scenario's `coordinator_restarts` (issue 15): the in-process reference coordinator moves
mid-session and loads the group from the records it wrote, as kafkatest's
test_static_consumer_persisted_after_rejoin rolls the brokers after a static member rejoined."""

from __future__ import annotations

import pytest

from proxy.capture.reader import read_capture
from replay.plan import ReplayPlan, build_plan
from replay.run import CoordinatorTransport, Runner, RunResult, replay_reference, run_virtual
from replay.scenario import CoordinatorRestart, ScenarioError, load_builtin, parse_scenario
from tests.support.synth import synthesize_capture

BUILTIN = "static-member-persisted-after-broker-roll"


@pytest.fixture(scope="module")
def plan(tmp_path_factory: pytest.TempPathFactory) -> ReplayPlan:
    path = tmp_path_factory.mktemp("captures") / "dynamic-group.pcapng"
    synthesize_capture(path, members=3, static=False, duration_ms=60_000)
    return build_plan(read_capture(path), "dyn")


def run(plan: ReplayPlan, name: str = BUILTIN) -> tuple[RunResult, CoordinatorTransport]:
    """replay_reference's run, keeping the transport to look at the coordinator it ends with."""
    from replay.brokers import group_settings

    runner = Runner(plan, load_builtin(name), "reference")
    transport = CoordinatorTransport(runner, group_settings(plan.group_settings).config)
    end_ms = run_virtual(runner, transport, None)
    return runner.result(end_ms), transport


def test_the_field_parses_and_bad_values_name_their_line() -> None:
    text = "name: x\ndescription: y\ncoordinator_restarts:\n  - at_ms: 5000\n  - {at_ms: 9000}\n"
    assert parse_scenario(text, "s.yaml").coordinator_restarts == (
        CoordinatorRestart(5000),
        CoordinatorRestart(9000),
    )
    for bad, where in (
        ("coordinator_restarts:\n  - at_ms: -1\n", "s.yaml:4: coordinator_restarts[0].at_ms"),
        ("coordinator_restarts:\n  - {}\n", "s.yaml:4: coordinator_restarts[0].at_ms: required"),
        ("coordinator_restarts: 5\n", "s.yaml:3: coordinator_restarts"),
        ("coordinator_restarts:\n  - {at_ms: 1, when: 2}\n", "s.yaml:4: coordinator_restarts[0]"),
    ):
        with pytest.raises(ScenarioError) as caught:
            parse_scenario("name: x\ndescription: y\n" + bad, "s.yaml")
        assert str(caught.value).startswith(where), str(caught.value)


def test_the_coordinator_moves_and_the_rejoined_static_member_is_not_fenced(plan: ReplayPlan) -> None:
    result, transport = run(plan)
    assert result.failures == (), result.failures
    assert transport.coordinator.classic.epoch == 1  # one move: the coordinator was loaded once
    group = transport.coordinator.groups["replay-group"]
    assert group.state.value == "Stable" and len(group.members) == 3
    # The leader's rejoin gave it a new member id; the loaded group knows that one.
    rejoined = [e for e in result.events if e.event == "member_joined"]
    leader_ids = {e.member_key: e.member_id for e in rejoined if e.is_leader}
    assert set(leader_ids.values()) <= set(group.members), (leader_ids, list(group.members))
    assert not [e for e in result.events if e.event == "member_fenced"]


def test_a_coordinator_that_did_not_persist_the_new_member_id_fences_it(
    plan: ReplayPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The control: without the record a static replacement writes (storeGroup in
    updateStaticMemberAndRebalance), the moved coordinator knows the old id and fences the
    member, and the scenario fails on it."""
    import replay.coordinator.join as join

    monkeypatch.setattr(join, "store_group", lambda out, group: None)
    result, _ = run(plan)
    assert any(f.startswith("fenced:") for f in result.failures), result.failures


def test_the_builtin_meets_its_expectations_through_replay_reference(plan: ReplayPlan) -> None:
    assert replay_reference(plan, load_builtin(BUILTIN)).failures == ()


def test_unload_answers_held_requests_not_coordinator() -> None:
    from kio.schema.errors import ErrorCode

    from replay.coordinator import CoordinatorConfig
    from replay.coordinator import requests as Q
    from tests.coordinator_sim import Sim

    sim = Sim(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    held = [sim.join(1, 3), sim.send(2, 3, Q.join_group(3, "h"))]  # both wait for the initial delay
    assert [sim.answer(cid) for cid in held] == [None, None]
    outputs = sim.coordinator.unload(sim.now_ms)
    answers = [o.response for o in outputs if hasattr(o, "response")]
    assert {a.error_code for a in answers} == {ErrorCode.not_coordinator} and len(answers) == 2
    assert {g.state.value for g in sim.coordinator.groups.values()} == {"Dead"}
    assert sim.coordinator.next_deadline() is None and not any(hasattr(o, "record") for o in outputs)


def test_a_restart_lengthens_the_run_to_it(plan: ReplayPlan) -> None:
    scenario = parse_scenario(
        "name: roll\ndescription: y\ncoordinator_restarts:\n  - at_ms: 40000\n", "roll.yaml"
    )
    result = replay_reference(plan, scenario)
    assert result.simulated_ms >= 40_000 + scenario.duration_ms
