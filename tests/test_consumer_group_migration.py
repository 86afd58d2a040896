"""The online classic -> consumer group migration (KIP-848) in virtual time, through the
coordinator's dispatch: classic members (kio JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and
consumer-protocol members (ConsumerGroupHeartbeat) in one group, under each
group.consumer.migration.policy (GroupMetadataManager 4.3.1: convertToConsumerGroup,
classicGroup*ToConsumerGroup). tests/test_consumer_group_differential.py checks the same paths
against real Kafka 4.3.1 brokers."""

from __future__ import annotations

from typing import Any

import pytest

from proxy.wire.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from proxy.wire.errors import ErrorCode
from replay.coordinator import CoordinatorConfig
from replay.coordinator.consumer import ConsumerGroupConfig, HeartbeatRequest
from replay.coordinator.consumer.group import MigrationPolicy
from replay.coordinator.consumer.wire import heartbeat_to_kio
from tests.coordinator_sim import Sim

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
            blob = _with_user_data({"t": ps}, user_data)
        assignments[member_id] = blob
    for conn, member_id in enumerate(ids, start=1):
        kw = {"assignments": assignments} if member_id == leader else {}
        sim.sync(conn, 5, generation, member_id, **kw)
    assert sim.state() == "Stable"
    return ids, generation


def _with_user_data(partitions: dict[str, list[int]], user_data: bytes) -> bytes:
    import io
    import struct

    from kio.serial import entity_writer

    from proxy.wire import consumer_protocol as cp

    schema = cp._schema("consumer_protocol_assignment", 0)
    tp_cls = cp._tuple_element_type(schema, "assigned_partitions")
    from kio.static.primitive import i32

    entity = schema(
        assigned_partitions=tuple(
            tp_cls(topic=t, partitions=tuple(i32(p) for p in ps)) for t, ps in partitions.items()
        ),
        user_data=user_data,
    )
    buffer = io.BytesIO()
    buffer.write(struct.pack(">h", 0))
    entity_writer(schema)(buffer, entity)
    return buffer.getvalue()


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
