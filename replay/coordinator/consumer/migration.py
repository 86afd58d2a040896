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

from collections.abc import Mapping
from functools import lru_cache
from typing import Any
from uuid import UUID

from proxy.wire.codec import CodecError
from proxy.wire.consumer_protocol import decode_assignment_detail, decode_subscription, encode_assignment
from proxy.wire.errors import ErrorCode
from replay.coordinator import responses as R
from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
from replay.coordinator.consumer.group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    reconcile,
)
from replay.coordinator.consumer.regex import maybe_update_regexes
from replay.coordinator.consumer.types import ConsumerGroupEvent, HeartbeatError
from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.types import GroupState

CONSUMER_PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


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


def topic_partitions(
    coordinator: ConsumerGroupCoordinator, by_name: Mapping[str, frozenset[int]] | tuple[tuple[str, int], ...]
) -> dict[UUID, frozenset[int]]:
    """Utils.toTopicPartitionMap / toTopicPartitions: names -> ids; topics the image does not know
    are dropped."""
    out: dict[UUID, set[int]] = {}
    items = (
        ((t, p) for t, ps in by_name.items() for p in ps) if isinstance(by_name, Mapping) else iter(by_name)
    )
    for topic, partition in items:
        if topic in coordinator.topic_partitions:
            out.setdefault(coordinator.topic_id(topic), set()).add(partition)
    return {t: frozenset(ps) for t, ps in out.items()}


def from_classic_group(
    coordinator: ConsumerGroupCoordinator,
    group_id: str,
    generation_id: int,
    protocol_name: str,
    members: list[ClassicMemberView],
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
            instance_id=m.instance_id,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            client_id=m.client_id,
            client_host=m.client_host,
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


class ClassicMemberView:
    """What fromClassicGroup reads of a classic member (replay.coordinator.group.Member)."""

    __slots__ = (
        "assignment",
        "client_host",
        "client_id",
        "instance_id",
        "member_id",
        "protocols",
        "rebalance_timeout_ms",
        "session_timeout_ms",
    )

    def __init__(
        self,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocols: tuple[tuple[str, bytes], ...],
        assignment: bytes,
    ) -> None:
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.session_timeout_ms = session_timeout_ms
        self.protocols = protocols
        self.assignment = assignment


# -- classic members inside a consumer group -------------------------------------------------------


def supports_classic_protocols(group: ConsumerGroup, protocol_type: str, names: set[str]) -> bool:
    """ConsumerGroup.supportsClassicProtocols: a name every classic member supports, from the
    counts the group keeps (classicProtocolMembersSupportedProtocols), not a walk of its members."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return False
    if not group.members:
        return bool(names)
    counts, classic = group.classic_protocol_counts, group.classic_members
    return any(counts.get(name, 0) == classic for name in names)


def classic_join(  # noqa: C901 - follows Kafka's classicGroupJoinToConsumerGroup step by step
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    member_id: str,
    is_unknown_member: bool,
    instance_id: str | None,
    rebalance_timeout_ms: int,
    session_timeout_ms: int,
    protocols: tuple[tuple[str, bytes], ...],
    client_id: str,
    client_host: str,
    downgrade: bool = False,
) -> ConsumerGroupMember:
    """classicGroupJoinToConsumerGroup after its request checks (policy, size, protocols,
    MEMBER_ID_REQUIRED, done by the service): get or subscribe the member (no epoch check for
    the classic protocol; a static member replaces the one holding its instance id whatever
    protocol that one uses), update it from the embedded subscription, bump the group epoch on a
    subscription change, update the target and reconcile against the owned partitions the
    subscription reports. Returns the reconciled member (its epoch is the JoinGroup generation).
    With `downgrade` (the service converts the group afterwards) no new target is computed."""
    replaced: ConsumerGroupMember | None = None
    if instance_id is None:
        # getOrMaybeSubscribeDynamicConsumerGroupMember(..., createIfNotExists=true, classic): any id
        member = group.members.get(member_id) or ConsumerGroupMember(member_id)
    else:
        existing = group.static_member(instance_id)
        if is_unknown_member:
            if existing is None:
                member = group.members.get(member_id) or ConsumerGroupMember(member_id)
            else:
                member = existing._replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
                replaced = existing
        else:
            if existing is None:
                raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
            if existing.member_id != member_id:
                raise HeartbeatError(
                    ErrorCode.fenced_instance_id,
                    f"Static member {member_id} with instance id {instance_id} was fenced by member "
                    f"{existing.member_id}.",
                )
            member = existing
    is_new = member_id not in group.members and replaced is None
    try:
        subscription = decode_subscription(protocols[0][1])
    except (CodecError, IndexError) as exc:
        raise HeartbeatError(ErrorCode.inconsistent_group_protocol, f"Malformed subscription: {exc}") from exc
    updated = member._replace(
        instance_id=instance_id if instance_id is not None else member.instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms
        if rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        subscribed_topic_names=frozenset(subscription.topics),
        subscribed_topic_regex=None,  # setSubscribedTopicRegex(""): no regex for classic members
        client_id=client_id,
        client_host=client_host,
        classic=ClassicMemberMetadata(session_timeout_ms, protocols),
    )
    names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
    regex_changed = updated.subscribed_topic_regex != member.subscribed_topic_regex
    if regex_changed:
        maybe_update_regexes(coordinator, now_ms, group, member, updated)
    if replaced is not None:
        target = group.target.get(replaced.member_id)
        group.remove_member(replaced.member_id)
        coordinator.timers.cancel(f"session-timeout-{group.group_id}-{replaced.member_id}")
        group.update_member(member)
        if target:
            group.target[member.member_id] = target
    metadata_hash = coordinator._metadata_hash(coordinator._subscribed_names(group, updated))
    if names_changed or regex_changed or metadata_hash != group.metadata_hash:
        group.group_epoch += 1
        group.metadata_hash = metadata_hash
    if downgrade:
        # validateOnlineDowngradeWithReplacedMember held: no new target; reconciled against the
        # current one unless the group epoch moved on (then the classic group rebalances).
        target_epoch, target = group.assignment_epoch, group.target_of(updated)
        skip = group.assignment_epoch < group.group_epoch
    else:
        target_epoch, target = coordinator._maybe_update_target(
            now_ms, group, group.group_epoch, member, updated
        )
        skip = False
    owned: Partitions = topic_partitions(coordinator, subscription.owned_partitions)
    reconciled = updated
    if not skip and (names_changed or regex_changed or not updated.is_reconciled_to(target_epoch)):
        reconciled = reconcile(
            updated,
            target_epoch,
            target,
            coordinator.member_topic_ids(group, updated),
            group.owner_of,
            owned,
            names_changed or regex_changed,
        )
    group.update_member(reconciled)
    if is_new or replaced is not None:
        coordinator.events.append(
            ConsumerGroupEvent(
                now_ms, group.group_id, "member_joined", member_id, reconciled.member_epoch, "classic"
            )
        )
    return reconciled


def downgrade_by_replacement(config: Any, group: ConsumerGroup, instance_id: str | None) -> bool:
    """validateOnlineDowngradeWithReplacedMember: a classic static member takes the instance id
    of the only member using the consumer protocol, the policy allows the downgrade and the group
    fits group.max.size."""
    existing = None if instance_id is None else group.static_member(instance_id)
    return (
        existing is not None
        and existing.classic is None
        and all(m.classic is not None for m in group.members.values() if m is not existing)
        and config.migration_policy.downgrade_enabled
        and len(group.members) <= config.classic_max_size
    )


def leaving_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """classicGroupLeaveToConsumerGroup's identity checks for one MemberIdentity (an instance id
    with an unknown member id is an administrative removal)."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(ErrorCode.unknown_member_id, f"Member {member_id} is unknown.")
        return member
    found = group.static_member(instance_id)
    if found is None:
        raise HeartbeatError(ErrorCode.unknown_member_id, f"Instance id {instance_id} is unknown.")
    if member_id != "" and found.member_id != member_id:
        raise HeartbeatError(ErrorCode.fenced_instance_id, f"Static member {member_id} was fenced.")
    return found


def classic_member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerGroupMember:
    """validateConsumerGroupMember + throwIfMemberDoesNotUseClassicProtocol."""
    if instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id, f"Member {member_id} is not a member of group {group.group_id}."
            )
    else:
        found = group.static_member(instance_id)
        if found is None:
            raise HeartbeatError(
                ErrorCode.unknown_member_id,
                f"Member with instance id {instance_id} is not a member of group {group.group_id}.",
            )
        if found.member_id != member_id:
            raise HeartbeatError(
                ErrorCode.fenced_instance_id,
                f"Static member {member_id} with instance id {instance_id} was fenced by member "
                f"{found.member_id}.",
            )
        member = found
    if member.classic is None:
        raise HeartbeatError(
            ErrorCode.unknown_member_id, f"Member {member.member_id} does not use the classic protocol."
        )
    return member


def throw_if_generation_unmatched(member: ConsumerGroupMember, generation_id: int) -> None:
    """throwIfGenerationIdUnmatched."""
    if member.member_epoch != generation_id:
        raise HeartbeatError(
            ErrorCode.illegal_generation,
            f"The request generation id {generation_id} is not equal to the member epoch "
            f"{member.member_epoch} of member {member.member_id}.",
        )


def waiting_on_unreleased_partition(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """ConsumerGroup.waitingOnUnreleasedPartition."""
    if member.state is not MemberState.UNRELEASED_PARTITIONS:
        return False
    for topic_id, parts in group.target.get(member.member_id, {}).items():
        mine = member.assigned.get(topic_id, frozenset())
        for partition in parts:
            if partition not in mine and (topic_id, partition) in group.owner_of:
                return True
    return False


def must_rejoin(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """classicGroupHeartbeatToConsumerGroup's REBALANCE_IN_PROGRESS conditions."""
    return (
        member.member_epoch < group.assignment_epoch
        or member.state is MemberState.UNREVOKED_PARTITIONS
        or (
            member.state is MemberState.UNRELEASED_PARTITIONS
            and not waiting_on_unreleased_partition(group, member)
        )
    )


def rebalance_in_progress(group: ConsumerGroup, member: ConsumerGroupMember) -> bool:
    """throwIfRebalanceInProgress (SyncGroup)."""
    return (
        group.assignment_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS
    )


def assignment_bytes(coordinator: ConsumerGroupCoordinator, member: ConsumerGroupMember) -> bytes:
    """prepareAssignment: the assigned partitions as a ConsumerProtocolAssignment in the version
    of the member's first protocol's subscription."""
    version = 0
    if member.classic is not None and member.classic.protocols:
        version = _subscription_version(member.classic.protocols[0][1])
    return _encoded_assignment(coordinator, member.assigned, min(version, 3))


@lru_cache(maxsize=1 << 10)
def _subscription_version(subscription: bytes) -> int:
    try:
        return decode_subscription(subscription).blob_version
    except CodecError:
        return 0


def _encoded_assignment(coordinator: ConsumerGroupCoordinator, assigned: Partitions, version: int) -> bytes:
    """The assignment's bytes, remembered per assignment object (assignments are immutable
    mappings, and every SyncGroup of a classic member in a consumer group asks for its own)
    while the topic names and ids stay."""
    cache = coordinator.encoded_assignments
    image = (tuple(coordinator.topic_partitions), tuple(coordinator.topic_id_overrides.items()))
    found = cache.get(id(assigned))
    if found is not None and found[0] is assigned and found[1] == version and found[2] == image:
        return found[3]
    names = {coordinator.topic_id(n): n for n in coordinator.topic_partitions}
    by_name = {names[t]: sorted(ps) for t, ps in assigned.items() if t in names}
    encoded = encode_assignment(by_name, version)
    if len(cache) > 4096:
        cache.clear()
    cache[id(assigned)] = (assigned, version, image, encoded)  # holds `assigned`: its id stays its own
    return encoded


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
            m.instance_id,
            m.client_id,
            m.client_host,
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


# -- the answers to classic requests served by a consumer group -------------------------------------


def join_error_response(api_version: int, code: ErrorCode, member_id: str) -> Any:
    return R.join_group(api_version, int(code), member_id=member_id)


def join_ok_response(api_version: int, member_id: str, generation_id: int, protocol_name: str) -> Any:
    """classicGroupJoinToConsumerGroup's answer: no leader, no member list (always a follower)."""
    return R.join_group(
        api_version,
        0,
        member_id=member_id,
        generation_id=generation_id,
        protocol_type=CONSUMER_PROTOCOL_TYPE,
        protocol_name=protocol_name,
    )


def sync_error_response(api_version: int, code: ErrorCode) -> Any:
    return R.sync_group(api_version, int(code))


def sync_ok_response(
    api_version: int, assignment: bytes, protocol_type: str | None, protocol_name: str | None
) -> Any:
    return R.sync_group(
        api_version, 0, assignment=assignment, protocol_type=protocol_type, protocol_name=protocol_name
    )


def heartbeat_response(api_version: int, code: ErrorCode) -> Any:
    return R.heartbeat(api_version, int(code))


def leave_response(api_version: int, results: list[tuple[str, str | None, int]]) -> Any:
    return R.leave_group(api_version, 0, results)


__all__ = [
    "CONSUMER_PROTOCOL_TYPE",
    "ClassicMemberView",
    "assignment_bytes",
    "classic_join",
    "classic_member",
    "from_classic_group",
    "must_rejoin",
    "rebalance_in_progress",
    "supports_classic_protocols",
    "throw_if_generation_unmatched",
    "validate_online_upgrade",
]
