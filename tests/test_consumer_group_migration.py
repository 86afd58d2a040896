"""The online classic -> consumer group migration (KIP-848) in virtual time, through the
coordinator's dispatch: classic members (kio JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and
consumer-protocol members (ConsumerGroupHeartbeat) in one group, under each
group.consumer.migration.policy (GroupMetadataManager 4.3.1: convertToConsumerGroup,
classicGroup*ToConsumerGroup). tests/test_consumer_group_differential.py checks the same paths
against real Kafka 4.3.1 brokers."""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import replace
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire.consumer_protocol import (
    decode_assignment,
    encode_assignment,
    encode_subscription,
)
from proxy.wire.errors import ErrorCode
from replay.coordinator import CoordinatorConfig
from replay.coordinator import requests as Q
from replay.coordinator.consumer import ConsumerGroupConfig, HeartbeatRequest
from replay.coordinator.consumer.group import MigrationPolicy
from replay.coordinator.consumer.wire import heartbeat_to_kio
from tests.coordinator_sim import Sim
from tests.support.consumer_full_paths import classic_members_full_paths, consumer_group_outcome

V = 9  # JoinGroup v9 / SyncGroup v5 / Heartbeat v4 / LeaveGroup v5
SUB = encode_subscription(["t"], 1)


def _sim(policy: MigrationPolicy, **kw: Any) -> Sim:
    sim = Sim(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    sim.coordinator.consumer.coordinator.config = ConsumerGroupConfig(
        migration_policy=policy, assignment_interval_ms=0, **kw
    )
    sim.coordinator.consumer.use_topics({"t": 4})
    return sim


def _classic_group(sim: Sim, members: int = 2, user_data: bytes | None = None) -> tuple[list[str], int]:
    """A Stable classic group of `members` range members of topic t (member 1 leads)."""
    ids: list[str] = []
    for conn in range(1, members + 1):
        cid = sim.join(conn, V, protocols=(("range", SUB),))
        required = sim.answer(cid)
        assert int(required.error_code) == ErrorCode.member_id_required
        ids.append(str(required.member_id))
    pending = [sim.join(c, V, ids[c - 1], protocols=(("range", SUB),)) for c in range(1, members + 1)]
    sim.run_timers(sim.now_ms + 7_000)
    joins = [sim.answer(cid) for cid in pending]
    generation = int(joins[0].generation_id)
    leader = str(joins[0].leader)
    parts = {i: [p for p in range(4) if p % members == n] for n, i in enumerate(ids)}
    assignments = {}
    for member_id, ps in parts.items():
        blob = encode_assignment({"t": ps})
        if user_data is not None:
            blob = encode_assignment({"t": ps}, user_data=user_data)
        assignments[member_id] = blob
    for conn, member_id in enumerate(ids, start=1):
        kw = {"assignments": assignments} if member_id == leader else {}
        sim.sync(conn, 5, generation, member_id, **kw)
    assert sim.state() == "Stable"
    return ids, generation


def _beat(sim: Sim, member_id: str, epoch: int, owned: dict | None = None, **kw: Any) -> Any:
    request = HeartbeatRequest(
        "g",
        member_id,
        epoch,
        rebalance_timeout_ms=30_000 if epoch == 0 else -1,
        subscribed_topic_names=("t",) if epoch == 0 else None,
        owned={} if epoch == 0 else owned,
        **kw,
    )
    return sim.call(9, 1, heartbeat_to_kio(request))


def test_upgrade_converts_a_live_classic_group_and_classic_members_rejoin() -> None:
    sim = _sim(MigrationPolicy.UPGRADE)
    ids, generation = _classic_group(sim)
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    assert int(answer.error_code) == 0
    # fromClassicGroup: group epoch = generation; the join bumps it once
    assert int(answer.member_epoch) == generation + 1
    assert "g" not in sim.coordinator.groups and sim.coordinator.consumer.is_consumer_group("g")
    group = sim.coordinator.consumer.coordinator.groups["g"]
    assert all(group.members[i].uses_classic_protocol for i in ids)
    # the newcomer gets nothing yet: every partition is still owned by a classic member
    assert not answer.assignment.topic_partitions
    # classic members: REBALANCE_IN_PROGRESS on their heartbeat, then rejoin as followers
    for conn, member_id in enumerate(ids, start=1):
        assert (
            int(sim.heartbeat(conn, 4, generation, member_id).error_code) == ErrorCode.rebalance_in_progress
        )
    for conn, member_id in enumerate(ids, start=1):
        joined = sim.answer(sim.join(conn, V, member_id, protocols=(("range", SUB),)))
        assert int(joined.error_code) == 0 and str(joined.leader) == "" and not joined.members
        assert str(joined.protocol_name) == "range" and str(joined.protocol_type) == "consumer"
        synced = sim.answer(sim.sync(conn, 5, int(joined.generation_id), member_id))
        assert int(synced.error_code) == 0
    # eager classic members revoke everything at rejoin, so the target settles at once
    held = {}
    for member_id in ids:
        member = group.members[member_id]
        assert member.member_epoch == generation + 1
        held[member_id] = member.assigned
    answer = _beat(sim, str(answer.member_id), int(answer.member_epoch), owned={})
    assert int(answer.error_code) == 0
    owned = sum(len(ps) for ps in group.members[str(answer.member_id)].assigned.values())
    assert owned + sum(len(p) for a in held.values() for p in a.values()) == 4
    assert group.state.value == "Stable" and owned > 0
    described = sim.coordinator.consumer.coordinator.describe(["g"])[0]
    assert described.group_state == "Stable" and len(described.members) == 3
    # ConsumerGroup.validateOffsetCommit/Fetch: a classic member commits with any version and
    # its generation; a wrong one is ILLEGAL_GENERATION (STALE_MEMBER_EPOCH for the consumer protocol)
    service = sim.coordinator.consumer
    assert service.validate_offset_commit("g", ids[0], None, generation + 1, 8) == 0
    assert (
        service.validate_offset_commit("g", ids[0], None, generation + 2, 8) == ErrorCode.illegal_generation
    )
    assert service.validate_offset_fetch("g", ids[0], generation) == ErrorCode.illegal_generation
    consumer_id = str(answer.member_id)
    assert (
        service.validate_offset_commit("g", consumer_id, None, generation + 1, 8)
        == ErrorCode.unsupported_version
    )


@pytest.mark.parametrize("policy", [MigrationPolicy.DISABLED, MigrationPolicy.DOWNGRADE])
def test_upgrade_refused_unless_the_policy_allows_it(policy: MigrationPolicy) -> None:
    sim = _sim(policy)
    _classic_group(sim)
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    assert int(answer.error_code) == ErrorCode.group_id_not_found
    assert "online upgrade is disabled" in str(answer.error_message)
    assert sim.state() == "Stable"


def test_upgrade_refusals_custom_user_data_protocol_type_and_size() -> None:
    sim = _sim(MigrationPolicy.BIDIRECTIONAL)
    _classic_group(sim, user_data=b"sticky")
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    assert int(answer.error_code) == ErrorCode.group_id_not_found
    assert "custom assignor" in str(answer.error_message) and sim.state() == "Stable"

    sim = _sim(MigrationPolicy.BIDIRECTIONAL, max_size=1)
    _classic_group(sim)
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    assert "group size exceeds" in str(answer.error_message) and sim.state() == "Stable"

    sim = _sim(MigrationPolicy.BIDIRECTIONAL)
    joined = sim.answer(sim.join(1, V, protocol_type="connect", protocols=(("x", b"m"),)))
    member_id = str(joined.member_id)
    sim.join(1, V, member_id, protocol_type="connect", protocols=(("x", b"m"),))
    sim.run_timers(5_000)
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    assert int(answer.error_code) == ErrorCode.group_id_not_found
    assert "does not use the consumer embedded protocol" in str(answer.error_message)


def test_classic_join_on_a_consumer_group_follows_the_policy() -> None:
    for policy, code in (
        (MigrationPolicy.DISABLED, ErrorCode.inconsistent_group_protocol),
        (MigrationPolicy.UPGRADE, 0),
    ):
        sim = _sim(policy)
        answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
        assert int(answer.error_code) == 0
        joined = sim.answer(sim.join(1, V, protocols=(("range", SUB),)))
        if code:
            assert int(joined.error_code) == code
            continue
        assert int(joined.error_code) == ErrorCode.member_id_required
        joined = sim.answer(sim.join(1, V, str(joined.member_id), protocols=(("range", SUB),)))
        assert int(joined.error_code) == 0
        synced = sim.answer(sim.sync(1, 5, int(joined.generation_id), str(joined.member_id)))
        assert int(synced.error_code) == 0
        left = sim.call(1, 5, _leave(str(joined.member_id)))
        assert int(left.error_code) == 0 and int(left.members[0].error_code) == 0


def _leave(member_id: str) -> Any:
    from replay.coordinator import requests as Q

    return Q.leave_group(5, "g", [(member_id, None)])


def test_classic_member_session_expires_in_the_consumer_group() -> None:
    sim = _sim(MigrationPolicy.UPGRADE)
    ids, _ = _classic_group(sim)
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    group = sim.coordinator.consumer.coordinator.groups["g"]
    sim.run_timers(sim.now_ms + 10_001)  # the classic session timeout (10 s)
    assert set(group.members) == {str(answer.member_id)} or set(group.members) == set()
    assert not any(i in group.members for i in ids)
    assert decode_assignment(b"") == ()


def _converted(policy: MigrationPolicy) -> tuple[Sim, list[str], int, Any]:
    """A two-member classic group upgraded by one consumer-protocol member; the classic members
    rejoin and sync; the consumer member takes what they released."""
    sim = _sim(policy)
    ids, generation = _classic_group(sim)
    answer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    for conn, member_id in enumerate(ids, start=1):
        joined = sim.answer(sim.join(conn, V, member_id, protocols=(("range", SUB),)))
        sim.answer(sim.sync(conn, 5, int(joined.generation_id), member_id))
        generation = int(joined.generation_id)
    answer = _beat(sim, str(answer.member_id), int(answer.member_epoch), owned={})
    return sim, ids, generation, answer


def test_downgrade_when_the_last_consumer_protocol_member_leaves() -> None:
    sim, ids, generation, answer = _converted(MigrationPolicy.BIDIRECTIONAL)
    epoch = sim.coordinator.consumer.coordinator.groups["g"].group_epoch
    left = _beat(sim, str(answer.member_id), -1)
    assert int(left.error_code) == 0
    assert not sim.coordinator.consumer.is_consumer_group("g")
    group = sim.coordinator.groups["g"]  # convertToClassicGroup + prepareRebalance
    assert group.state.value == "PreparingRebalance" and group.generation_id == epoch
    assert group.protocol_type == "consumer" and group.protocol_name == "range"
    assert list(group.members) == ids and group.leader_id == ids[0]
    assert int(sim.heartbeat(1, 4, generation, ids[0]).error_code) == ErrorCode.rebalance_in_progress
    pending = [sim.join(c, V, ids[c - 1], protocols=(("range", SUB),)) for c in (1, 2)]
    joins = [sim.answer(cid) for cid in pending]
    assert [int(j.generation_id) for j in joins] == [epoch + 1] * 2
    assert str(joins[0].leader) == ids[0] and len(joins[0].members) == 2
    assert sim.coordinator.consumer.coordinator.describe(["g"])[0].error_code == ErrorCode.group_id_not_found


def test_downgrade_when_the_consumer_member_session_expires_and_not_under_upgrade() -> None:
    sim, ids, generation, answer = _converted(MigrationPolicy.BIDIRECTIONAL)
    start = sim.now_ms
    while sim.now_ms < start + 50_000:  # the classic members keep heartbeating, the consumer does not
        sim.tick(sim.now_ms + 5_000)
        for conn, member_id in enumerate(ids, start=1):
            sim.heartbeat(conn, 4, generation, member_id)
        if not sim.coordinator.consumer.is_consumer_group("g"):
            break
    assert sim.now_ms - start >= 45_000  # group.consumer.session.timeout.ms
    group = sim.coordinator.groups["g"]
    assert group.state.value == "PreparingRebalance" and list(group.members) == ids

    sim, ids, generation, answer = _converted(MigrationPolicy.UPGRADE)
    assert int(_beat(sim, str(answer.member_id), -1).error_code) == 0
    group = sim.coordinator.consumer.coordinator.groups["g"]
    assert set(group.members) == set(ids) and "g" not in sim.coordinator.groups
    # The target is recomputed only when a member joins or heartbeats with the consumer protocol
    # or rejoins (maybeUpdateTargetAssignment): a classic heartbeat alone learns nothing (checked
    # against Kafka 4.3.1 in the differential test); a rejoin brings the new target, then the
    # other classic member is told to rejoin.
    assert int(sim.heartbeat(1, 4, generation, ids[0]).error_code) == 0
    joined = sim.answer(sim.join(1, V, ids[0], protocols=(("range", SUB),)))
    assert int(joined.generation_id) == group.group_epoch == group.assignment_epoch
    assert int(sim.heartbeat(2, 4, generation, ids[1]).error_code) == ErrorCode.rebalance_in_progress
    joined = sim.answer(sim.join(2, V, ids[1], protocols=(("range", SUB),)))
    assert int(sim.answer(sim.sync(2, 5, int(joined.generation_id), ids[1])).error_code) == 0
    assert sum(len(p) for m in group.members.values() for p in m.assigned.values()) == 4


def test_downgrade_refused_over_the_classic_group_max_size() -> None:
    """validateOnlineDowngradeWithFencedMembers: more classic members than group.max.size keep
    the consumer group (the member is just removed)."""
    sim, ids, _, answer = _converted(MigrationPolicy.BIDIRECTIONAL)
    consumer = sim.coordinator.consumer.coordinator
    consumer.config = replace(consumer.config, classic_max_size=1)
    assert int(_beat(sim, str(answer.member_id), -1).error_code) == 0
    assert sim.coordinator.consumer.is_consumer_group("g") and "g" not in sim.coordinator.groups
    assert set(consumer.groups["g"].members) == set(ids)


def _classic_members_in_a_consumer_group(ops: list[tuple[str, int]]) -> list[Any]:
    """Three classic members of an upgraded group: heartbeats at their generation or a stale
    one, rejoins (JoinGroup + SyncGroup), the consumer member's heartbeats, silences; the
    answers, the events and every timer's deadline."""
    sim = _sim(MigrationPolicy.UPGRADE)
    ids, generation = _classic_group(sim, members=3)
    consumer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    generations = dict.fromkeys(ids, generation)
    seen: list[Any] = []
    for op, who in ops:
        sim.tick(sim.now_ms + (20_000 if op == "wait" else 1_000))
        member_id, conn = ids[who], who + 1
        if op in ("beat", "stale"):
            seen.append(sim.heartbeat(conn, 4, generations[member_id] - (op == "stale"), member_id))
        elif op == "rejoin":
            joined = sim.answer(sim.join(conn, V, member_id, protocols=(("range", SUB),)))
            seen.append(joined)
            if joined is not None and int(joined.error_code) == 0:
                generations[member_id] = int(joined.generation_id)
                seen.append(sim.answer(sim.sync(conn, 5, generations[member_id], member_id)))
        elif op == "consumer":
            consumer = _beat(sim, str(consumer.member_id), int(consumer.member_epoch), owned={})
            seen.append(consumer)
    timers = sim.coordinator.timers
    seen.append((sim.kinds(), sorted((key, timers.deadline(key)) for key in timers._live)))
    return seen


_CLASSIC_OPS = st.sampled_from(["beat", "beat", "stale", "rejoin", "consumer", "wait"])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["beat", "beat", "stale", "rejoin", "consumer", "wait"]), st.integers(0, 2)
        ),
        max_size=30,
    )
)
def test_steady_classic_heartbeats_in_a_consumer_group_are_the_full_path(ops: list[tuple[str, int]]) -> None:
    """steady.steady_classic_heartbeat (a classic member at its generation, reconciled) against
    service.classic_heartbeat's full sequence: same answers, events and timer deadlines."""
    ops = [("beat", w) for w in range(3)] + [("rejoin", w) for w in range(3)] + ops + [("beat", 0)]
    fast = _classic_members_in_a_consumer_group(ops)
    with mock.patch("replay.coordinator.consumer.classic_cycle.steady_classic_heartbeat", return_value=False):
        full = _classic_members_in_a_consumer_group(ops)
    assert fast == full


# -- the classic members' remembered work against the full path ------------------------------------

_COOPERATIVE = encode_subscription(["t"], 1, owned_partitions=(("t", 0), ("t", 3)))
_JOINS: list[tuple[str, dict[str, Any]]] = [  # (client id, JoinGroup fields) a classic member rejoins with
    ("", {"protocols": (("range", SUB),)}),  # as it was (the upgrade's case)
    ("", {"protocols": (("range", encode_subscription(["t", "u"], 1)),)}),  # another subscription
    ("", {"protocols": (("range", SUB),), "session_timeout_ms": 20_000}),
    ("", {"protocols": (("range", SUB),), "rebalance_timeout_ms": 40_000}),
    ("", {"protocols": (("range", _COOPERATIVE),)}),  # owns partitions
    ("", {"protocols": (("range", SUB), ("roundrobin", SUB))}),
    ("", {"protocols": (("roundrobin", SUB), ("range", SUB))}),  # answers "roundrobin"
    ("other-client", {"protocols": (("range", SUB),)}),
    ("", {"protocols": (("range", b"\x00"),)}),  # malformed: INCONSISTENT_GROUP_PROTOCOL
]


def _classic_rejoins(ops: list[tuple[str, int, int]]) -> list[Any]:
    """Three classic members of an upgraded group rejoin with the JoinGroup they sent before or a
    changed one (`_JOINS`), heartbeat, sync; the consumer member heartbeats; topic t grows. The
    answers, the events, every timer's deadline and the members at the end."""
    sim = _sim(MigrationPolicy.UPGRADE)
    ids, generation = _classic_group(sim, members=3)
    consumer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    generations = dict.fromkeys(ids, generation)
    seen: list[Any] = []
    for op, who, variant in ops:
        sim.tick(sim.now_ms + (20_000 if op == "wait" else 1_000))
        member_id, conn = ids[who], who + 1
        if op == "beat":
            seen.append(sim.heartbeat(conn, 4, generations[member_id], member_id))
        elif op == "rejoin":
            client_id, fields = _JOINS[variant]
            request = Q.join_group(V, "g", member_id, **fields)
            joined = sim.answer(sim.send(conn, V, request, client_id=client_id or f"c{conn}"))
            seen.append(joined)
            if joined is not None and int(joined.error_code) == 0:
                generations[member_id] = int(joined.generation_id)
                name = str(joined.protocol_name)
                seen.append(
                    sim.answer(sim.sync(conn, 5, generations[member_id], member_id, protocol_name=name))
                )
                seen.append(sim.answer(sim.sync(conn, 3, generations[member_id], member_id)))
        elif op == "consumer":
            consumer = _beat(sim, str(consumer.member_id), int(consumer.member_epoch), owned={})
            seen.append(consumer)
        elif op == "grow":
            sim.coordinator.consumer.coordinator.topic_partitions["t"] += 1
    return seen + consumer_group_outcome(sim)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["beat", "rejoin", "rejoin", "rejoin", "consumer", "wait", "grow", "grow"]),
            st.integers(0, 2),
            st.integers(0, len(_JOINS) - 1),
        ),
        max_size=30,
    )
)
def test_classic_rejoins_in_a_consumer_group_are_the_full_path(ops: list[tuple[str, int, int]]) -> None:
    """classic_members.classic_join and the SyncGroup answers with what they remember (the
    decoded subscription by its bytes, the stored member when the JoinGroup changes nothing of
    it, the metadata check from the group's counts, the topic ids per subscription, the SyncGroup
    answer per assignment, the timers' keys and actions per member) against the same steps done
    anew each time: same answers, events, timer deadlines, group and members."""
    ops = [("rejoin", w, 0) for w in range(3)] + ops + [("beat", 0, 0)]
    fast = _classic_rejoins(ops)
    with contextlib.ExitStack() as full:
        for patch in classic_members_full_paths():
            full.enter_context(patch)
        slow = _classic_rejoins(ops)
    assert fast == slow


def test_remembered_assignment_bytes_follow_the_image_and_the_subscription() -> None:
    """classic_members.assignment_bytes (remembered per assignment, checked by the subscription
    object and the image's names) against a fresh encode after each change that moves them: a
    topic leaving and coming back in place, an id override for a name, another partition count
    (no change), a subscription of another version."""
    from replay.coordinator.consumer import classic_members
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
    from replay.coordinator.consumer.group import ClassicMemberMetadata, ConsumerGroupMember

    coordinator = ConsumerGroupCoordinator()
    coordinator.topic_partitions.update({"t": 4, "u": 4})
    t, u = coordinator.topic_id("t"), coordinator.topic_id("u")
    member = ConsumerGroupMember(
        "m",
        assigned={t: frozenset({0, 1}), u: frozenset({2})},
        classic=ClassicMemberMetadata(45_000, (("range", encode_subscription(["t", "u"], 1)),)),
    )

    def fresh(member: ConsumerGroupMember) -> bytes:
        assert member.classic is not None
        version = min(classic_members.subscription_of(member.classic.protocols[0][1])[0].blob_version, 3)
        names = {coordinator.topic_id(n): n for n in coordinator.topic_partitions}
        by_name = {names[i]: sorted(ps) for i, ps in member.assigned.items() if i in names}
        return encode_assignment(by_name, version)

    def check(member: ConsumerGroupMember) -> None:
        assert classic_members.assignment_bytes(coordinator, member) == fresh(member)
        assert classic_members.assignment_bytes(coordinator, member) == fresh(member)  # remembered

    check(member)
    del coordinator.topic_partitions["u"]
    check(member)
    coordinator.topic_partitions["u"] = 8
    check(member)
    coordinator.topic_partitions["t"] = 5
    check(member)
    coordinator.add_topic("u", 8, uuid.UUID(int=7))  # u's id is no longer the assigned one
    check(member)
    coordinator.topic_id_overrides.clear()
    check(member)
    old = ClassicMemberMetadata(45_000, (("range", encode_subscription(["t", "u"], 0)),))
    check(member._replace(classic=old))
    assert fresh(member._replace(classic=old)) != fresh(member)


def test_a_classic_member_heartbeating_behind_without_rejoining_is_fenced_by_its_join_timer() -> None:
    """scheduleConsumerGroupJoinTimeoutIfAbsent: the first Heartbeat answered
    REBALANCE_IN_PROGRESS starts the member's consumer-join timer, later ones keep its deadline,
    and it fences the member a rebalance timeout later although its session, renewed by every
    heartbeat, has not expired. (Why the timer a JoinGroup usually cancels at once must still
    be scheduled: nothing at the Heartbeat tells whether a JoinGroup will follow.)"""
    sim = _sim(MigrationPolicy.UPGRADE)
    ids, generation = _classic_group(sim)
    consumer = _beat(sim, "c0000000-0000-4000-8000-000000000001", 0)
    stalled, rejoining = ids
    joined = sim.answer(sim.join(2, V, rejoining, protocols=(("range", SUB),)))
    sim.answer(sim.sync(2, 5, int(joined.generation_id), rejoining))
    first_ms = sim.now_ms
    join_key = f"consumer-join-g-{stalled}"
    timers = sim.coordinator.timers
    group = sim.coordinator.consumer.coordinator.groups["g"]
    while sim.now_ms < first_ms + 30_000:  # Q.join_group's rebalance timeout
        code = int(sim.heartbeat(1, 4, generation, stalled).error_code)
        assert code == ErrorCode.rebalance_in_progress and stalled in group.members
        assert timers.deadline(join_key) == first_ms + 30_000  # kept, not renewed
        sim.heartbeat(2, 4, int(joined.generation_id), rejoining)
        consumer = _beat(sim, str(consumer.member_id), int(consumer.member_epoch), owned={})
        sim.run_timers(sim.now_ms + 3_000)
    assert stalled not in group.members and rejoining in group.members
    assert sim.now_ms - 3_000 + 10_000 > first_ms + 30_000  # its session had not expired
    assert timers.deadline(f"session-timeout-g-{rejoining}") is not None
