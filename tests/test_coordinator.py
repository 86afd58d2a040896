"""The reference coordinator against the behaviour of Kafka's GroupCoordinator.scala /
GroupMetadataManager.java (each test names the rule it checks)."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from proxy.wire import response_schema
from replay.coordinator import CoordinatorConfig, GroupState, IllegalStateTransition, KafkaBehaviour
from replay.coordinator import requests as Q
from replay.coordinator.group import ClassicGroup
from tests.coordinator_sim import Sim

E = ErrorCode


def form_group(sim: Sim, specs: list[tuple[int, str | None]], api_version: int = 5) -> dict[int, str]:
    """Members (conn, instance id) join and sync; returns conn -> member id. Group ends Stable."""
    member_ids: dict[int, str] = {}
    pending: dict[int, int] = {}
    for conn, instance in specs:
        cid = sim.join(conn, api_version, group_instance_id=instance)
        answer = sim.answer(cid)
        if answer is not None and answer.error_code == E.member_id_required:
            cid = sim.join(conn, api_version, answer.member_id, group_instance_id=instance)
        pending[conn] = cid
    sim.run_timers(sim.now_ms)
    # Everybody that got REBALANCE_IN_PROGRESS-free answers rejoins until one generation holds all.
    for _ in range(5):
        answers = {conn: sim.answer(cid) for conn, cid in pending.items()}
        if (
            all(a is not None and a.error_code == E.none for a in answers.values())
            and len({a.generation_id for a in answers.values()}) == 1
        ):
            break
        for conn, a in answers.items():
            if a is not None and a.error_code == E.none:
                pending[conn] = sim.join(conn, api_version, a.member_id, group_instance_id=dict(specs)[conn])
        sim.run_timers(sim.now_ms)
    answers = {conn: sim.answer(cid) for conn, cid in pending.items()}
    generation = next(iter(answers.values())).generation_id
    leader = next(iter(answers.values())).leader
    syncs = {}
    for conn, a in answers.items():
        assert a.error_code == E.none
        member_ids[conn] = a.member_id
        assignments = {m.member_id: f"assign-{m.member_id[:1]}".encode() for m in a.members}
        syncs[conn] = sim.sync(
            conn,
            min(api_version, 5),
            generation,
            a.member_id,
            group_instance_id=dict(specs)[conn],
            assignments=assignments,
        )
        assert (a.member_id == leader) == bool(a.members)
    for cid in syncs.values():
        assert sim.answer(cid).error_code == E.none
    assert sim.state() == "Stable"
    return member_ids


def test_member_id_required_round_trip_v4_plus() -> None:
    """KIP-394: a dynamic member joining with v4+ and no member id gets one with MEMBER_ID_REQUIRED."""
    sim = Sim()
    first = sim.answer(sim.join(1, 4))
    assert first.error_code == E.member_id_required
    assert first.member_id.startswith("c1-")
    assert sim.state() == "Empty"
    assert sim.coordinator.groups["g"].pending_members == {first.member_id}
    cid = sim.join(1, 4, first.member_id)
    sim.run_timers(0)
    second = sim.answer(cid)
    assert second.error_code == E.none
    assert (second.member_id, second.leader, second.generation_id) == (first.member_id, first.member_id, 1)


def test_pre_v4_dynamic_member_is_added_at_once() -> None:
    sim = Sim()
    cid = sim.join(1, 3)
    sim.run_timers(0)
    answer = sim.answer(cid)
    assert answer.error_code == E.none and answer.generation_id == 1


def test_pending_member_expires_after_session_timeout() -> None:
    sim = Sim()
    first = sim.answer(sim.join(1, 4, session_timeout_ms=6000))
    sim.run_timers(6000)
    assert sim.coordinator.groups["g"].pending_members == set()
    later = sim.answer(sim.join(1, 4, first.member_id))
    assert later.error_code == E.unknown_member_id


@pytest.mark.parametrize("api_version", range(10))
def test_every_join_version_gets_its_own_response_class(api_version: int) -> None:
    sim = Sim()
    kw: dict[str, Any] = {"group_instance_id": "i"} if api_version >= 5 else {}
    cid = sim.join(1, api_version, **kw)
    first = sim.answer(cid)
    if first is not None and first.error_code == E.member_id_required:
        cid = sim.join(1, api_version, first.member_id)
    sim.run_timers(0)
    answer = sim.answer(cid)
    assert type(answer) is response_schema(11, api_version)
    assert answer.error_code == E.none and answer.generation_id == 1


def test_leader_gets_members_followers_do_not_and_sync_delivers_assignments() -> None:
    sim = Sim()
    ids = form_group(sim, [(1, None), (2, None), (3, None)])
    group = sim.coordinator.groups["g"]
    assert group.leader_id == ids[1]
    assert {m.assignment for m in group.members.values()} == {b"assign-c"}
    completed = [e for e in sim.events if e.event == "generation_completed"]
    assert {e.member_id for e in completed[-3:]} == set(ids.values())


def test_static_follower_rejoin_in_stable_keeps_generation_and_fences_old_id() -> None:
    """updateStaticMemberAndRebalance: unknown member id + known instance id in Stable with the same
    protocol -> new member id, old assignment, no rebalance; the old id is fenced."""
    sim = Sim()
    ids = form_group(sim, [(1, "a"), (2, "b")])
    group = sim.coordinator.groups["g"]
    generation = group.generation_id
    before = len([e for e in sim.events if e.event == "rebalance_started"])
    rejoin = sim.answer(sim.join(3, 5, group_instance_id="b"))
    assert rejoin.error_code == E.none
    assert rejoin.member_id != ids[2] and rejoin.generation_id == generation
    assert rejoin.leader == ids[1] and rejoin.members == ()
    assert sim.state() == "Stable"
    assert len([e for e in sim.events if e.event == "rebalance_started"]) == before
    sync = sim.answer(sim.sync(3, 5, generation, rejoin.member_id, group_instance_id="b"))
    assert sync.error_code == E.none and sync.assignment == b"assign-b"
    # The old member id is fenced everywhere.
    assert sim.heartbeat(2, 4, generation, ids[2], group_instance_id="b").error_code == E.fenced_instance_id
    assert (
        sim.answer(sim.sync(2, 5, generation, ids[2], group_instance_id="b")).error_code
        == E.fenced_instance_id
    )
    assert sim.answer(sim.join(2, 5, ids[2], group_instance_id="b")).error_code == E.fenced_instance_id
    commit = sim.call(2, 7, Q.offset_commit(7, "g", generation, ids[2], {("t", 0): 5}, group_instance_id="b"))
    assert commit.topics[0].partitions[0].error_code == E.fenced_instance_id
    assert "member_fenced" in sim.kinds()


def test_static_leader_rejoin_v9_skips_assignment_with_members() -> None:
    """KIP-814: the rejoining static leader on JoinGroup v9 is told it leads, gets all members, and
    SkipAssignment=true."""
    sim = Sim()
    form_group(sim, [(1, "a"), (2, "b")], api_version=9)
    generation = sim.coordinator.groups["g"].generation_id
    rejoin = sim.answer(sim.join(3, 9, group_instance_id="a"))
    assert rejoin.error_code == E.none and rejoin.skip_assignment is True
    assert rejoin.leader == rejoin.member_id
    assert {m.group_instance_id for m in rejoin.members} == {"a", "b"}
    assert rejoin.generation_id == generation and sim.state() == "Stable"


def test_static_leader_rejoin_v5_gets_old_leader_id_and_no_members() -> None:
    """Below v9 Kafka returns the previous leader id so that the rejoined leader does not assign."""
    sim = Sim()
    ids = form_group(sim, [(1, "a"), (2, "b")], api_version=5)
    rejoin = sim.answer(sim.join(3, 5, group_instance_id="a"))
    assert rejoin.error_code == E.none
    assert rejoin.leader == ids[1] != rejoin.member_id
    assert rejoin.members == ()
    assert sim.coordinator.groups["g"].leader_id == rejoin.member_id
    assert sim.state() == "Stable"


def test_static_rejoin_with_changed_protocol_rebalances() -> None:
    sim = Sim()
    form_group(sim, [(1, "a"), (2, "b")])
    cid = sim.join(3, 5, group_instance_id="b", protocols=(("roundrobin", b""), ("range", b"")))
    # range is still the only protocol everybody supports: the selection stays, no rebalance.
    assert sim.answer(cid).error_code == E.none and sim.state() == "Stable"
    cid = sim.join(4, 5, group_instance_id="a", protocols=(("roundrobin", b""), ("range", b"")))
    # Both now prefer roundrobin: the selected protocol would change, so the group rebalances.
    assert sim.answer(cid) is None
    assert sim.state() == "PreparingRebalance"


def test_static_members_survive_join_timeout_dynamic_do_not() -> None:
    """onCompleteJoin removes only dynamic members that did not rejoin (KIP-345)."""
    sim = Sim()
    ids = form_group(sim, [(1, "a"), (2, "b"), (3, None)])
    generation = sim.coordinator.groups["g"].generation_id
    # The leader rejoins -> rebalance; b and the dynamic member keep heartbeating but never rejoin.
    cid = sim.join(1, 5, ids[1], group_instance_id="a")
    for t in range(3000, 30_000, 3000):
        sim.run_timers(t)
        assert (
            sim.heartbeat(2, 3, generation, ids[2], group_instance_id="b").error_code
            == E.rebalance_in_progress
        )
        assert sim.heartbeat(3, 3, generation, ids[3]).error_code == E.rebalance_in_progress
    sim.run_timers(30_000)
    answer = sim.answer(cid)
    assert answer.error_code == E.none and answer.generation_id == generation + 1
    assert set(sim.coordinator.groups["g"].members) == {ids[1], ids[2]}
    assert [e.member_id for e in sim.events if e.event == "member_expired"] == [ids[3]]


def test_static_member_removed_by_session_timeout() -> None:
    sim = Sim()
    ids = form_group(sim, [(1, "a"), (2, "b")])
    generation = sim.coordinator.groups["g"].generation_id
    # Only a keeps heartbeating.
    for t in range(3000, 12_000, 3000):
        sim.run_timers(t)
        sim.heartbeat(1, 3, generation, ids[1], group_instance_id="a")
    sim.run_timers(12_000)
    expired = [e for e in sim.events if e.event == "member_expired"]
    assert [(e.member_id, e.group_instance_id) for e in expired] == [(ids[2], "b")]
    assert sim.state() == "PreparingRebalance"
    assert "b" not in sim.coordinator.groups["g"].static_members


def test_batch_leave_by_instance_id_removes_static_members() -> None:
    """LeaveGroup v3+: administrative removal by group.instance.id with empty member ids; unknown
    instance ids get a per-member UNKNOWN_MEMBER_ID."""
    sim = Sim()
    form_group(sim, [(1, "a"), (2, "b"), (3, "c")])
    response = sim.call(9, 3, Q.leave_group(3, "g", [("", "b"), ("", "c"), ("", "zz")]))
    assert response.error_code == E.none
    assert [(m.group_instance_id, m.error_code) for m in response.members] == [
        ("b", E.none),
        ("c", E.none),
        ("zz", E.unknown_member_id),
    ]
    group = sim.coordinator.groups["g"]
    assert set(group.static_members) == {"a"}
    assert sim.state() == "PreparingRebalance"
    assert len([e for e in sim.events if e.event == "member_left"]) == 2


def test_leave_v0_reports_the_member_error() -> None:
    sim = Sim()
    form_group(sim, [(1, None)])
    assert sim.call(1, 0, Q.leave_group(0, "g", [("nobody", None)])).error_code == E.unknown_member_id


@pytest.mark.parametrize("behaviour", list(KafkaBehaviour))
def test_leave_unknown_group_answers_per_member(behaviour: KafkaBehaviour) -> None:
    """Scala handleLeaveGroup, and GroupCoordinatorService.leaveGroup mapping the new
    coordinator's UnknownMemberIdException: per-member UNKNOWN_MEMBER_ID, top level NONE."""
    sim = Sim(config=CoordinatorConfig(kafka_behaviour=behaviour))
    response = sim.call(1, 3, Q.leave_group(3, "nope", [("m", None), ("", "i")]))
    assert response.error_code == E.none
    assert [m.error_code for m in response.members] == [E.unknown_member_id] * 2


def test_validation_errors() -> None:
    sim = Sim()
    assert sim.answer(sim.join(1, 5, session_timeout_ms=100)).error_code == E.invalid_session_timeout
    assert sim.answer(sim.join(1, 5, session_timeout_ms=3_600_000)).error_code == E.invalid_session_timeout
    assert sim.call(1, 5, Q.join_group(5, "", "")).error_code == E.invalid_group_id
    assert sim.answer(sim.join(1, 5, "someone")).error_code == E.unknown_member_id
    assert "g" not in sim.coordinator.groups
    assert sim.heartbeat(1, 0, 1, "x").error_code == E.unknown_member_id
    assert sim.answer(sim.sync(1, 0, 1, "x")).error_code == E.unknown_member_id


def test_inconsistent_protocol_and_illegal_generation() -> None:
    sim = Sim()
    ids = form_group(sim, [(1, None)])
    generation = sim.coordinator.groups["g"].generation_id
    other = sim.answer(sim.join(2, 3, protocols=(("sticky", b""),)))
    assert other.error_code == E.inconsistent_group_protocol
    other = sim.answer(sim.join(2, 3, protocol_type="connect"))
    assert other.error_code == E.inconsistent_group_protocol
    assert sim.heartbeat(1, 0, generation + 5, ids[1]).error_code == E.illegal_generation
    bad = sim.answer(sim.sync(1, 5, generation, ids[1], protocol_name="roundrobin"))
    assert bad.error_code == E.inconsistent_group_protocol


def test_group_max_size() -> None:
    sim = Sim(config=CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2))
    form_group(sim, [(1, None), (2, None)], api_version=3)
    assert sim.answer(sim.join(3, 3)).error_code == E.group_max_size_reached


def test_initial_rebalance_delay_waits_for_more_members() -> None:
    """InitialDelayedJoin: the first rebalance waits group.initial.rebalance.delay.ms and again
    while new members keep arriving."""
    sim = Sim(config=CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    a = sim.join(1, 3, rebalance_timeout_ms=10_000)
    sim.run_timers(2000)
    b = sim.join(2, 3, rebalance_timeout_ms=10_000)
    sim.run_timers(3000)
    assert sim.answer(a) is None and sim.state() == "PreparingRebalance"  # b extended the delay
    sim.run_timers(6000)
    assert sim.answer(a).generation_id == sim.answer(b).generation_id == 1
    assert len(sim.answer(a).members) == 2


def test_sync_timeout_removes_members_that_never_synced() -> None:
    """onExpirePendingSync: members that got their JoinGroup answer but never sent SyncGroup are
    removed after the rebalance timeout, and the group rebalances."""
    sim = Sim(config=CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    a = sim.join(1, 3, rebalance_timeout_ms=10_000)
    b = sim.join(2, 3, rebalance_timeout_ms=10_000)
    sim.run_timers(3000)
    assert sim.answer(a) is None  # b arrived during the delay: InitialDelayedJoin waits once more
    sim.run_timers(6000)
    ja, jb = sim.answer(a), sim.answer(b)
    assert ja.generation_id == jb.generation_id == 1
    leader, follower = (ja, jb) if ja.members else (jb, ja)
    sim.sync(1 if leader is ja else 2, 3, 1, leader.member_id, assignments={})
    assert sim.state() == "Stable"
    sim.run_timers(12_000)
    assert sim.heartbeat(1 if leader is ja else 2, 3, 1, leader.member_id).error_code == E.none
    sim.run_timers(6000 + 10_000)
    assert [e.member_id for e in sim.events if e.event == "member_expired"] == [follower.member_id]
    assert follower.member_id not in sim.coordinator.groups["g"].members
    assert sim.state() == "PreparingRebalance"


def test_offsets_commit_and_fetch() -> None:
    sim = Sim()
    ids = form_group(sim, [(1, None)])
    generation = sim.coordinator.groups["g"].generation_id
    ok = sim.call(1, 8, Q.offset_commit(8, "g", generation, ids[1], {("t", 0): 42, ("t", 1): 7}))
    assert [p.error_code for p in ok.topics[0].partitions] == [E.none, E.none]
    stale = sim.call(1, 2, Q.offset_commit(2, "g", generation - 1, ids[1], {("t", 0): 1}))
    assert stale.topics[0].partitions[0].error_code == E.illegal_generation
    from kio.schema.offset_fetch.v5.request import OffsetFetchRequest, OffsetFetchRequestTopic

    fetched = sim.call(
        1,
        5,
        OffsetFetchRequest(
            group_id="g", topics=(OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1, 2)),)
        ),
    )
    assert [p.committed_offset for p in fetched.topics[0].partitions] == [42, 7, -1]
    # A simple (non-member) commit to an unknown group creates it Empty.
    simple = sim.call(1, 2, Q.offset_commit(2, "solo", -1, "", {("t", 0): 3}))
    assert simple.topics[0].partitions[0].error_code == E.none
    assert sim.coordinator.groups["solo"].state is GroupState.EMPTY


def test_describe_list_find() -> None:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.find_coordinator.v0.request import FindCoordinatorRequest as Find0
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest as Find4
    from kio.schema.list_groups.v4.request import ListGroupsRequest

    sim = Sim()
    form_group(sim, [(1, "a"), (2, None)])
    described = sim.call(
        1, 5, DescribeGroupsRequest(groups=("g", "missing"), include_authorized_operations=False)
    )
    g, missing = described.groups
    assert (g.group_state, g.protocol_data, missing.group_state) == ("Stable", "range", "Dead")
    assert {m.group_instance_id for m in g.members} == {"a", None}
    listed = sim.call(1, 4, ListGroupsRequest(states_filter=("stable",)))
    assert [x.group_id for x in listed.groups] == ["g"]
    assert sim.call(1, 0, Find0(key="g")).port == sim.config.port
    found = sim.call(1, 4, Find4(key_type=0, coordinator_keys=("g", "h")))
    assert [c.key for c in found.coordinators] == ["g", "h"]


def test_illegal_transition_is_an_assertion() -> None:
    group = ClassicGroup("g")
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE)
    group.transition_to(GroupState.PREPARING_REBALANCE)
    with pytest.raises(IllegalStateTransition):
        group.transition_to(GroupState.STABLE)


def test_duplicate_instance_parked_in_join_is_fenced() -> None:
    """replaceStaticMember fences the old member's parked JoinGroup with FENCED_INSTANCE_ID."""
    sim = Sim()
    ids = form_group(sim, [(1, "a"), (2, "b")])
    parked = sim.join(1, 5, ids[1], group_instance_id="a")  # leader rejoin: rebalance, a parked
    assert sim.answer(parked) is None
    sim.join(3, 5, group_instance_id="a")  # a second process with the same instance id
    assert sim.answer(parked).error_code == E.fenced_instance_id


@pytest.mark.parametrize(
    ("behaviour", "completes_at_once"),
    [(KafkaBehaviour.SCALA_3_9, False), (KafkaBehaviour.NEW_COORDINATOR, True)],
)
def test_removal_during_initial_delay_per_behaviour(
    behaviour: KafkaBehaviour, completes_at_once: bool
) -> None:
    """A member removed while the first rebalance waits out group.initial.rebalance.delay.ms:
    Scala's InitialDelayedJoin never completes early (tryComplete = false); the new coordinator's
    removeMemberAndUpdateClassicGroup calls completeClassicGroupJoin as soon as everyone left has
    joined."""
    sim = Sim(config=CoordinatorConfig(group_initial_rebalance_delay_ms=3000, kafka_behaviour=behaviour))
    a = sim.join(1, 5, group_instance_id="a")
    b = sim.join(2, 5, group_instance_id="b")
    sim.run_timers(1000)
    leave = sim.call(9, 3, Q.leave_group(3, "g", [("", "b")]))
    assert [m.error_code for m in leave.members] == [E.none]
    assert sim.answer(b).error_code == E.unknown_member_id  # its parked JoinGroup is failed
    if completes_at_once:
        assert sim.answer(a).generation_id == 1
    else:
        assert sim.answer(a) is None
        sim.run_timers(6000)
        assert sim.answer(a).generation_id == 1


@pytest.mark.parametrize(
    ("behaviour", "api_version", "expected"),
    [
        (KafkaBehaviour.SCALA_3_9, 8, E.illegal_generation),
        (KafkaBehaviour.SCALA_3_9, 9, E.illegal_generation),
        (KafkaBehaviour.NEW_COORDINATOR, 8, E.illegal_generation),
        (KafkaBehaviour.NEW_COORDINATOR, 9, E.group_id_not_found),
    ],
)
def test_commit_with_generation_to_a_missing_group(
    behaviour: KafkaBehaviour, api_version: int, expected: ErrorCode
) -> None:
    """handleCommitOffsets: ILLEGAL_GENERATION; OffsetMetadataManager.validateOffsetCommit: v9+
    GROUP_ID_NOT_FOUND."""
    sim = Sim(config=CoordinatorConfig(kafka_behaviour=behaviour))
    response = sim.call(1, api_version, Q.offset_commit(api_version, "missing", 3, "m", {("t", 0): 1}))
    assert response.topics[0].partitions[0].error_code == expected
    assert "missing" not in sim.coordinator.groups


@pytest.mark.parametrize("behaviour", list(KafkaBehaviour))
def test_describe_outside_stable_per_behaviour(behaviour: KafkaBehaviour) -> None:
    """Outside Stable, Scala's summaryNoMetadata blanks the assignment; the new coordinator's
    describeNoMetadata keeps it. Metadata and protocol are blank on both."""
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    sim = Sim(config=CoordinatorConfig(group_initial_rebalance_delay_ms=0, kafka_behaviour=behaviour))
    form_group(sim, [(1, "a"), (2, "b")])
    sim.call(9, 3, Q.leave_group(3, "g", [("", "b")]))
    described = sim.call(9, 5, DescribeGroupsRequest(groups=("g",), include_authorized_operations=False))
    group = described.groups[0]
    assert (group.group_state, group.protocol_data) == ("PreparingRebalance", "")
    [member] = group.members
    assert member.member_metadata == b""
    kept = behaviour is KafkaBehaviour.NEW_COORDINATOR
    assert member.member_assignment == (b"assign-a" if kept else b"")
