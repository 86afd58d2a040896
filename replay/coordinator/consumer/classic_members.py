"""Classic members inside a consumer group (KIP-848's online migration, Kafka 4.3.1
GroupMetadataManager): classicGroupJoinToConsumerGroup (`classic_join`),
classicGroupSyncToConsumerGroup's and classicGroupHeartbeatToConsumerGroup's checks and answers,
classicGroupLeaveToConsumerGroup's identity checks. A classic member is always a follower
(JoinGroup answers no member list and an empty leader); its generation is its member epoch; it
learns of a new target through REBALANCE_IN_PROGRESS on its heartbeat and rejoins.

In a rolling upgrade every epoch bump sends each classic member left through a heartbeat, a
JoinGroup and a SyncGroup, so these are the most frequent requests of the migration; what they
repeat is remembered (the decoded subscription by its bytes, the member when it rejoins as it
was, the assignment's bytes and SyncGroup answer per assignment, the timers' keys and actions
per member), each checked against the full path by random runs
(tests/test_consumer_group_migration.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any
from uuid import UUID

from proxy.wire.codec import CodecError
from proxy.wire.consumer_protocol import Subscription, decode_subscription, encode_assignment
from proxy.wire.errors import ErrorCode
from replay.coordinator import responses as R
from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
from replay.coordinator.consumer.group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    reconcile,
)
from replay.coordinator.consumer.regex import maybe_update_regexes
from replay.coordinator.consumer.steady import metadata_unchanged, subscribed_ids
from replay.coordinator.consumer.types import ConsumerGroupEvent, HeartbeatError

CONSUMER_PROTOCOL_TYPE = "consumer"  # ConsumerProtocol.PROTOCOL_TYPE


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


def supports_classic_protocols(
    group: ConsumerGroup, protocol_type: str, protocols: tuple[tuple[str, bytes], ...]
) -> bool:
    """ConsumerGroup.supportsClassicProtocols: a name every classic member supports, from the
    counts the group keeps (classicProtocolMembersSupportedProtocols), not a walk of its members."""
    if protocol_type != CONSUMER_PROTOCOL_TYPE:
        return False
    if not group.members:
        return bool(protocols)
    counts, classic = group.classic_protocol_counts, group.classic_members
    for name, _ in protocols:  # noqa: SIM110 - not any() of a generator: every classic JoinGroup asks
        if counts.get(name, 0) == classic:
            return True
    return False


@lru_cache(maxsize=1 << 12)
def subscription_of(metadata: bytes) -> tuple[Subscription, frozenset[str]]:
    """ConsumerProtocol.deserializeSubscription of a JoinGroup protocol's metadata, with its
    topics as the member's subscribed names, remembered by the bytes: a classic member rejoins
    with the same metadata at every rebalance (an eager assignor's never changes; a cooperative
    one's changes with what it owns), and the decoded value is immutable. Malformed bytes raise
    CodecError every time (exceptions are not cached)."""
    subscription = decode_subscription(metadata)
    return subscription, frozenset(subscription.topics)


def owned_partitions(
    coordinator: ConsumerGroupCoordinator, owned: tuple[tuple[str, int], ...]
) -> dict[UUID, frozenset[int]]:
    """toTopicPartitions(subscription.ownedPartitions()): an eager member owns none."""
    return topic_partitions(coordinator, owned) if owned else {}


def rebuilt(
    member: ConsumerGroupMember,
    instance_id: str | None,
    rebalance_timeout_ms: int,
    topics: frozenset[str],
    client_id: str,
    client_host: str,
    session_timeout_ms: int,
    protocols: tuple[tuple[str, bytes], ...],
) -> ConsumerGroupMember:
    """classicGroupJoinToConsumerGroup's ConsumerGroupMember.Builder(member)
    .maybeUpdateInstanceId / maybeUpdateRebalanceTimeoutMs(ofSentinel) /
    maybeUpdateSubscribedTopicNames / setClientId / setClientHost / setClassicMemberMetadata
    .build(), with no regex (a classic member has none) and no rack (not modelled). A field
    whose new value equals the stored one keeps the stored object, and a member none of whose
    fields change is the stored member itself (Kafka writes no member record then:
    hasMemberSubscriptionChanged compares the two), so a classic member rejoining as it was
    builds nothing and ConsumerGroup.update_member has nothing to index.
    tests/test_consumer_group_migration.py checks it against `_replace` of every field."""
    classic = member.classic
    if classic is None or classic.session_timeout_ms != session_timeout_ms or classic.protocols != protocols:
        classic = ClassicMemberMetadata(session_timeout_ms, protocols)
    if topics == member.subscribed_topic_names:
        topics = member.subscribed_topic_names
    if instance_id is None or instance_id == member.instance_id:
        instance_id = member.instance_id
    if rebalance_timeout_ms == -1:
        rebalance_timeout_ms = member.rebalance_timeout_ms
    if (
        classic is member.classic
        and topics is member.subscribed_topic_names
        and instance_id is member.instance_id
        and rebalance_timeout_ms == member.rebalance_timeout_ms
        and client_id == member.client_id
        and client_host == member.client_host
        and member.subscribed_topic_regex is None
    ):
        return member
    return member._replace(
        instance_id=instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=topics,
        subscribed_topic_regex=None,  # setSubscribedTopicRegex(""): no regex for classic members
        client_id=client_id,
        client_host=client_host,
        classic=classic,
    )


def bumped_metadata(
    coordinator: ConsumerGroupCoordinator,
    group: ConsumerGroup,
    updated: ConsumerGroupMember,
    subscription_changed: bool,
) -> frozenset[tuple[str, int]] | None:
    """The group's new metadata hash when classicGroupJoinToConsumerGroup bumps the group epoch
    (the member's subscription changed, or the subscribed topics' metadata did), else None.
    A member rejoining with the same subscription and no regex in the group: the group's
    subscribed names are its own counts (the member's are among them), so only the image can
    have moved, which `steady`'s check of the stored hash tells without building a new one."""
    if subscription_changed or group.regex_counts:
        metadata_hash = coordinator._metadata_hash(coordinator._subscribed_names(group, updated))
        return metadata_hash if subscription_changed or metadata_hash != group.metadata_hash else None
    if metadata_unchanged(coordinator, group):
        return None
    return coordinator._metadata_hash(group.name_counts)


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
        subscription, topics = subscription_of(protocols[0][1])
    except (CodecError, IndexError) as exc:
        raise HeartbeatError(ErrorCode.inconsistent_group_protocol, f"Malformed subscription: {exc}") from exc
    updated = rebuilt(
        member,
        instance_id,
        rebalance_timeout_ms,
        topics,
        client_id,
        client_host,
        session_timeout_ms,
        protocols,
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
    bumped = bumped_metadata(coordinator, group, updated, names_changed or regex_changed)
    if bumped is not None:
        group.group_epoch += 1
        group.metadata_hash = bumped
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
    reconciled = updated
    if not skip and (names_changed or regex_changed or not updated.is_reconciled_to(target_epoch)):
        reconciled = reconcile(
            updated,
            target_epoch,
            target,
            # a classic member subscribes by names only; the group's metadata hash was just
            # brought up to date with the image for them (steady.subscribed_ids' condition)
            subscribed_ids(coordinator, group, updated.subscribed_topic_names),
            group.owner_of,
            owned_partitions(coordinator, subscription.owned_partitions),
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
    encoded: bytes = _encoded_entry(coordinator, member)[3]
    return encoded


def sync_ok_answer(
    coordinator: ConsumerGroupCoordinator,
    member: ConsumerGroupMember,
    api_version: int,
    protocol_type: str | None,
    protocol_name: str | None,
) -> Any:
    """classicGroupSyncToConsumerGroup's answer (`sync_ok_response` of `assignment_bytes`),
    remembered beside the assignment's bytes per (api_version, protocol type, protocol name):
    a kio response is frozen, and a classic member whose target did not move at a rebalance
    syncs again for the very same answer."""
    answers = _encoded_entry(coordinator, member)[4]
    key = (api_version, protocol_type, protocol_name)
    answer = answers.get(key)
    if answer is None:
        answer = answers[key] = sync_ok_response(
            api_version, assignment_bytes(coordinator, member), protocol_type, protocol_name
        )
    return answer


@lru_cache(maxsize=1 << 10)
def _subscription_version(subscription: bytes) -> int:
    try:
        return subscription_of(subscription)[0].blob_version
    except CodecError:
        return 0


def _encoded_entry(coordinator: ConsumerGroupCoordinator, member: ConsumerGroupMember) -> tuple[Any, ...]:
    """(assignment, version, topic image, bytes, answers, subscription, topic names): the
    assignment's bytes, remembered per assignment object (assignments are immutable mappings,
    and every SyncGroup of a classic member in a consumer group asks for its own) while the
    version and the topic names and ids stay, with the SyncGroup answers made of them
    (`sync_ok_answer`).

    What the bytes depend on is checked first without rebuilding it (every SyncGroup of a
    rolling upgrade's classic members lands here): the version is a function of the
    subscription's bytes, the same object while the member's classic metadata stays; without
    topic id overrides a name's id is `_serve_topic_id(name)`, distinct per name, so the names
    of the assigned ids depend only on which names the image holds, not on their order or
    partition counts."""
    assigned = member.assigned
    classic = member.classic
    subscription = classic.protocols[0][1] if classic is not None and classic.protocols else None
    cache = coordinator.encoded_assignments
    found = cache.get(id(assigned))
    if (
        found is not None
        and found[0] is assigned
        and found[5] is subscription
        and not coordinator.topic_id_overrides
        and coordinator.topic_partitions.keys() == found[6]
    ):
        return found
    version = 0 if subscription is None else min(_subscription_version(subscription), 3)
    image = (tuple(coordinator.topic_partitions), tuple(coordinator.topic_id_overrides.items()))
    if found is not None and found[0] is assigned and found[1] == version and found[2] == image:
        # The same bytes: kept, with what the first check reads next time.
        entry = cache[id(assigned)] = (*found[:5], subscription, _names_checked(image))
        return entry
    names = {coordinator.topic_id(n): n for n in coordinator.topic_partitions}
    by_name = {names[t]: sorted(ps) for t, ps in assigned.items() if t in names}
    if len(cache) > 4096:
        cache.clear()
    # The entry holds `assigned`: its id stays its own while the entry lives.
    entry = cache[id(assigned)] = (
        assigned,
        version,
        image,
        encode_assignment(by_name, version),
        {},
        subscription,
        _names_checked(image),
    )
    return entry


def _names_checked(image: tuple[Any, ...]) -> frozenset[str] | None:
    """The names `_encoded_entry`'s first check compares with the image's, or None (never
    equal) for bytes made under topic id overrides: those are checked by the whole image."""
    names, overrides = image
    return None if overrides else frozenset(names)


ClassicTimers = tuple[str, Callable[[int], None], str, Callable[[int], None]]


def classic_timers_of(coordinator: ConsumerGroupCoordinator, group_id: str, member_id: str) -> ClassicTimers:
    """The keys and actions of a classic member's "consumer-join" timer
    (scheduleConsumerGroupJoinTimeoutIfAbsent) and "consumer-sync" timer
    (scheduleConsumerGroupSyncTimeout), made once per member and looked up by its group id and
    member id (strings, their hashes cached; a tuple key is hashed anew at every look-up): each
    action finds the member by its ids when it fires, as a new one would, so one made earlier
    does the same (each join, sync and rejoining heartbeat of a classic member in a consumer
    group schedules or cancels one)."""
    by_group = coordinator.classic_timers.get(group_id)
    if by_group is None:
        if len(coordinator.classic_timers) > 1 << 10:
            coordinator.classic_timers.clear()
        by_group = coordinator.classic_timers[group_id] = {}
    found = by_group.get(member_id)
    if found is None:

        def join_expired(at_ms: int) -> None:
            why = "the classic member failed to join within the rebalance timeout"
            coordinator._fence_operation(at_ms, group_id, member_id, "member_fenced", why)

        def sync_expired(at_ms: int) -> None:
            why = "the member failed to sync within timeout"
            coordinator._fence_operation(at_ms, group_id, member_id, "member_fenced", why)

        if len(by_group) > 1 << 16:
            by_group.clear()
        found = by_group[member_id] = (
            f"consumer-join-{group_id}-{member_id}",
            join_expired,
            f"consumer-sync-{group_id}-{member_id}",
            sync_expired,
        )
    return found


def classic_timer(
    coordinator: ConsumerGroupCoordinator, kind: str, group_id: str, member_id: str
) -> tuple[str, Callable[[int], None]]:
    """The key and action of a classic member's "consumer-join" or "consumer-sync" timer
    (`classic_timers_of`)."""
    join_key, join_expired, sync_key, sync_expired = classic_timers_of(coordinator, group_id, member_id)
    return (sync_key, sync_expired) if kind == "consumer-sync" else (join_key, join_expired)


# -- the answers to classic requests served by a consumer group -------------------------------------


def join_error_response(api_version: int, code: ErrorCode, member_id: str) -> Any:
    return R.join_group(api_version, int(code), member_id=member_id)


def join_ok_response(api_version: int, member_id: str, generation_id: int, protocol_name: str) -> Any:
    """classicGroupJoinToConsumerGroup's answer: no leader, no member list (always a follower)."""
    return R.join_follower_constructor(api_version)(
        member_id, generation_id, CONSUMER_PROTOCOL_TYPE, protocol_name
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
    "assignment_bytes",
    "classic_join",
    "classic_member",
    "classic_timer",
    "classic_timers_of",
    "downgrade_by_replacement",
    "heartbeat_response",
    "join_error_response",
    "join_ok_response",
    "leave_response",
    "leaving_member",
    "must_rejoin",
    "owned_partitions",
    "rebalance_in_progress",
    "rebuilt",
    "subscription_of",
    "supports_classic_protocols",
    "sync_error_response",
    "sync_ok_answer",
    "sync_ok_response",
    "throw_if_generation_unmatched",
    "topic_partitions",
    "waiting_on_unreleased_partition",
]
