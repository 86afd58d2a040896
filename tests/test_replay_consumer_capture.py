"""Plans of captures with KIP-848 consumer-protocol members, and how a scenario plays them: the
two recorded captures in fixtures/captures/consumer-protocol/ (real confluent-kafka and Java
4.3.1 clients against Kafka 4.3.1), no broker needed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from proxy.capture.reader import exchanges, read_capture
from proxy.wire.errors import ErrorCode
from replay.consumer_replay import RecordedConsumerMember
from replay.events import EventName
from replay.migration import GroupProtocol
from replay.plan import ReplayPlan, build_plan, recorded_events
from replay.run import Runner, replay_reference
from replay.scenario import AS_RECORDED, load_builtin
from tests.support.corpus import CORPUS_DIR

KIP848 = CORPUS_DIR / "consumer-protocol" / "kafka-4.3.1--confluent--consumer-protocol-restart.pcapng"
MIGRATION = (
    CORPUS_DIR
    / "consumer-protocol"
    / "kafka-4.3.1--java-4.3.1+confluent--classic-to-consumer-rolling-upgrade.pcapng"
)


def _plan(path: Path) -> ReplayPlan:
    return build_plan(read_capture(path), path.stem)


def test_a_migration_plans_each_session_in_the_protocol_it_spoke() -> None:
    plan = _plan(MIGRATION)
    by_key = {s.member_key: s for s in plan.scripts}
    # a, static: the same group.instance.id, classic then consumer (one member, two sessions)
    static = by_key["migration-rolling-upgrade-a"]
    assert [s.protocol for s in static.sessions] == [GroupProtocol.CLASSIC, GroupProtocol.CONSUMER]
    assert static.sessions[0].member_id is None and static.sessions[1].member_id
    assert static.heartbeat_template.instance_id == "migration-rolling-upgrade-a"
    # b and c, dynamic: a new member each time (a new client id ordinal), each in one protocol
    assert [[s.protocol.value for s in by_key[k].sessions] for k in ("java-b#0", "java-b#1")] == [
        ["classic"],
        ["consumer"],
    ]
    assert by_key["confluent-c#1"].join_template.protocols[0].name == "range"  # synthesized
    # the recorded topic id is named (Metadata), so the recorded run names its partitions
    assert set(plan.topic_ids) == {"corpus-migration"}
    received = {
        tp
        for e in recorded_events(plan)
        if e.event == EventName.ASSIGNMENT_RECEIVED
        for tp in e.assignment or ()
    }
    assert received == {f"corpus-migration-{p}" for p in range(3)}


def test_an_answer_from_a_broker_that_was_not_the_coordinator_is_not_a_group_event() -> None:
    """The KIP-848 capture's first heartbeat met a broker still loading the offsets topic
    (NOT_COORDINATOR); the group never saw it, so the session starts at the retry it answered."""
    capture = read_capture(KIP848)
    answers = [ex.decode()[1] for ex in exchanges(capture, "client") if ex.request.api_key == 68]
    assert int(ErrorCode.not_coordinator) in {int(a.error_code) for a in answers}
    plan = build_plan(capture, KIP848.stem)
    assert not [e for e in recorded_events(plan) if e.error_code]
    assert all(e.error_code == 0 for e in replay_reference(plan).events)


def test_recorded_consumer_members_send_their_recorded_member_ids() -> None:
    """KIP-1082: the client generates its member id once per process; the replayed process sends
    the id its recorded session used, so the reference keeps the recorded members' hash order."""
    plan = _plan(KIP848)
    runner = Runner(plan, AS_RECORDED, "reference")
    members = [seat.member for seat in runner.seats]
    assert all(isinstance(m, RecordedConsumerMember) for m in members)
    recorded_ids = {s.sessions[0].member_id for s in plan.scripts}
    replayed_ids = {e.member_id for e in replay_reference(plan).events}
    assert replayed_ids == recorded_ids
    # a process the recording does not have generates its own id
    member = members[0]
    member.start(plan.scripts[0].sessions[0].start_ms)
    first = member.member_id
    member.stop(0, leave=False)
    member.start(plan.scripts[0].sessions[0].start_ms)
    assert member.member_id != first


def test_a_scenario_protocol_overrides_the_recorded_one() -> None:
    """consumer-to-classic-rolling-downgrade on the KIP-848 capture: the members start as the
    scenario says and end classic, with the scenario's expectations met."""
    plan = _plan(KIP848)
    result = replay_reference(plan, load_builtin("consumer-to-classic-rolling-downgrade"))
    assert result.failures == ()
    last_protocol = {e.member_key: e.protocol for e in result.events if e.event == EventName.MEMBER_JOINED}
    assert set(last_protocol.values()) == {"classic"}


def test_without_recorded_heartbeat_times_a_consumer_member_beats_at_the_coordinator_interval() -> None:
    """The recorded times decide only where they exist: with none, the rhythm is the
    coordinator's heartbeat interval (5 s here), and the same rebalances happen."""
    plan = _plan(KIP848)
    timeless = dataclasses.replace(
        plan, scripts=tuple(dataclasses.replace(s, consumer_heartbeat_times_ms=()) for s in plan.scripts)
    )
    recorded = [e for e in recorded_events(plan) if e.event == EventName.REBALANCE_STARTED]
    replayed = [e for e in replay_reference(timeless).events if e.event == EventName.REBALANCE_STARTED]
    assert len(replayed) == len(recorded)
