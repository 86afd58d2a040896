"""The online classic <-> consumer group migration (KIP-848), under
`group.consumer.migration.policy` (ConsumerGroupConfig.migration_policy).

Kafka 4.3.1's GroupMetadataManager is the spec (sources jar
org.apache.kafka:kafka-group-coordinator:4.3.1):

- upgrade: getOrMaybeCreateConsumerGroup -> validateOnlineUpgrade (policy, protocol type
  "consumer", group.consumer.max.size) -> convertToConsumerGroup -> ConsumerGroup.fromClassicGroup
  (`from_classic_group`): the group epoch and the target assignment epoch become the classic
  generation; every classic member becomes a STABLE consumer-group member at that epoch with its
  last SyncGroup assignment as both its assignment and its target, and keeps its classic protocol
  metadata (ClassicMemberMetadata). An assignment carrying custom userData refuses the upgrade
  (UnsupportedVersionException -> GROUP_ID_NOT_FOUND), so does a malformed embedded protocol.
- classic members inside a consumer group: classicGroupJoinToConsumerGroup (`classic_join`),
  classicGroupSyncToConsumerGroup (`classic_sync`), classicGroupHeartbeatToConsumerGroup
  (`classic_heartbeat`) and classicGroupLeaveToConsumerGroup (the service fences them). A classic
  member is always a follower (JoinGroup answers no member list and an empty leader); its
  generation is its member epoch; it learns of a new target through REBALANCE_IN_PROGRESS on its
  heartbeat and rejoins.
- downgrade: consumerGroupFenceMembers -> validateOnlineDowngradeWithFencedMembers -> convertToClassicGroup
  (ClassicGroup.fromConsumerGroup) and a rebalance, done by the service, which owns both kinds
  of group.

Deviations: the member rack from the subscription is not kept; partition epochs are not
modelled (see group.py); Kafka reverts an upgrade whose triggering heartbeat then fails, the
reference keeps it.

Checked against Kafka 4.3.1 brokers (policy bidirectional and upgrade) by
tests/test_consumer_group_migration_differential.py: error codes, generations and member
epochs, assignments, DescribeGroups / ConsumerGroupDescribe group types and states.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import UUID

from proxy.wire.codec import CodecError
from proxy.wire.consumer_protocol import decode_assignment_detail, decode_subscription
from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer.classic_members import (
    CONSUMER_PROTOCOL_TYPE,
    assignment_bytes,
    join_error_response,
    sync_error_response,
    topic_partitions,
)
from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
from replay.coordinator.consumer.group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
)
from replay.coordinator.consumer.types import HeartbeatError
from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.records import MemberIdentity
from replay.coordinator.types import GroupState


def member_views(old: ClassicGroup, respond: Callable[[Any, Any], None]) -> list[Member]:
    """The classic group's members, which convertToConsumerGroup reads (fromClassicGroup reads
    the ClassicGroupMembers themselves); their parked JoinGroup and SyncGroup requests are
    answered REBALANCE_IN_PROGRESS (completeAllJoinFutures / completeAllSyncFutures)."""
    views = list(old.members.values())
    for m in views:
        parked = old.take_join(m)
        if parked is not None:
            respond(
                parked, join_error_response(parked.api_version, ErrorCode.rebalance_in_progress, m.member_id)
            )
        parked_sync = old.take_sync(m)
        if parked_sync is not None:
            respond(
                parked_sync, sync_error_response(parked_sync.api_version, ErrorCode.rebalance_in_progress)
            )
    return views


def _not_found(message: str) -> HeartbeatError:
    return HeartbeatError(ErrorCode.group_id_not_found, message)


def validate_online_upgrade(
    coordinator: ConsumerGroupCoordinator, group_id: str, protocol_type: str | None, members: int
) -> None:
    """GroupMetadataManager.validateOnlineUpgrade: GROUP_ID_NOT_FOUND with Kafka's messages."""
    if not coordinator.config.migration_policy.upgrade_enabled:
        raise _not_found(
            f"Cannot upgrade classic group {group_id} to consumer group because online upgrade is disabled."
        )
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        raise _not_found(
            f"Cannot upgrade classic group {group_id} to consumer group because the group does not use "
            "the consumer embedded protocol."
        )
    if members > coordinator.config.max_size:
        raise _not_found(
            f"Cannot upgrade classic group {group_id} to consumer group because the group size exceeds "
            "the consumer group maximum size."
        )


def from_classic_group(
    coordinator: ConsumerGroupCoordinator,
    group_id: str,
    generation_id: int,
    protocol_name: str,
    members: list[Member],
) -> ConsumerGroup:
    """ConsumerGroup.fromClassicGroup (convertToConsumerGroup's error mapping included)."""
    group = ConsumerGroup(group_id, group_epoch=generation_id, assignment_epoch=generation_id)
    group.assignment_timestamp_ms = None  # setTargetAssignmentMetadata(generationId, 0L)
    for m in members:
        try:
            if not m.assignment:
                assigned: dict[UUID, frozenset[int]] = {}
            else:
                by_name, user_data = decode_assignment_detail(m.assignment)
                if user_data:
                    raise HeartbeatError(
                        ErrorCode.group_id_not_found,
                        f"Cannot upgrade classic group {group_id} to consumer group because an unsupported "
                        "custom assignor is in use. Please refer to the documentation or switch to a "
                        "default assignor before re-attempting the upgrade.",
                    )
                assigned = topic_partitions(coordinator, by_name)
            subscription = decode_subscription(_metadata(m.protocols, protocol_name))
        except CodecError as exc:
            raise _not_found(
                f"Cannot upgrade classic group {group_id} to consumer group because the embedded consumer "
                "protocol is malformed."
            ) from exc
        member = ConsumerGroupMember(
            m.member_id,
            member_epoch=generation_id,
            previous_member_epoch=generation_id,
            state=MemberState.STABLE,
            instance_id=m.identity.group_instance_id,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            client_id=m.identity.client_id,
            client_host=m.identity.client_host,
            subscribed_topic_names=frozenset(subscription.topics),
            assigned=assigned,
            classic=ClassicMemberMetadata(m.session_timeout_ms, m.protocols),
        )
        group.target[member.member_id] = assigned
        group.update_member(member)
    group.metadata_hash = coordinator._metadata_hash(coordinator._subscribed_names(group, None))
    return group


def _metadata(protocols: tuple[tuple[str, bytes], ...], name: str) -> bytes:
    for protocol, metadata in protocols:
        if protocol == name:
            return metadata
    raise CodecError(f"no metadata for protocol {name}")


def classic_group_from(
    coordinator: ConsumerGroupCoordinator,
    group: ConsumerGroup,
    members: list[ConsumerGroupMember],
    now_ms: int,
) -> ClassicGroup:
    """ClassicGroup.fromConsumerGroup: a Stable classic group at the group epoch, protocol type
    "consumer", the remaining members in the consumer group's order (the first is the leader),
    each with its target assignment serialised in its own subscription's version."""
    converted = ClassicGroup(
        group.group_id,
        state=GroupState.STABLE,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        generation_id=group.group_epoch,
        state_timestamp_ms=now_ms,
    )
    for m in members:
        assert m.classic is not None
        member = Member(
            m.member_id,
            MemberIdentity(m.instance_id, m.client_id, m.client_host),
            m.rebalance_timeout_ms,
            m.classic.session_timeout_ms,
            CONSUMER_PROTOCOL_TYPE,
            m.classic.protocols,
        )
        converted.add(member, None)
        target = m._replace(assigned=group.target.get(m.member_id, {}))
        member.assignment = assignment_bytes(coordinator, target)
    converted.protocol_name = converted.select_protocol()
    return converted


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "classic_group_from",
    "from_classic_group",
    "member_views",
    "validate_online_upgrade",
]
