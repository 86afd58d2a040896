"""The classic member's cycle in a consumer group, when nothing but the epoch moved.

In a rolling upgrade every group epoch bump sends each classic member left through three
requests (Kafka 4.3.1 GroupMetadataManager): a Heartbeat answered REBALANCE_IN_PROGRESS
(classicGroupHeartbeatToConsumerGroup: the member is behind the target epoch), a JoinGroup that
changes nothing of the member but its epoch (classicGroupJoinToConsumerGroup), and a SyncGroup
for its assignment (classicGroupSyncToConsumerGroup). The service's full paths (service.py,
classic_members.py) run Kafka's sequence step by step; these answer the same requests when every
condition under which that sequence does something else is ruled out first, and do only what it
would then do: the same checks, reconciliation, timers (in the same order) and answers. Each
returns the answer for core.handle to send (the one caller: its routes' `consumer_first`), or
None, with nothing changed, for anything else (the service's full path's turn).
tests/test_consumer_group_migration.py runs random classic cycles both ways (answers, events,
timers, group, members).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from proxy.wire.codec import CodecError
from proxy.wire.errors import ErrorCode
from replay.coordinator import responses as R
from replay.coordinator.codes import NONE, REBALANCE_IN_PROGRESS
from replay.coordinator.consumer.classic_members import (
    CONSUMER_PROTOCOL_TYPE,
    classic_timers_of,
    owned_partitions,
    subscription_of,
    supports_classic_protocols,
    sync_ok_answer,
)
from replay.coordinator.consumer.group import (
    ClassicKit,
    ConsumerGroup,
    MemberState,
    MigrationPolicy,
    reconcile,
)
from replay.coordinator.consumer.steady import metadata_unchanged, steady_classic_heartbeat, subscribed_ids
from replay.coordinator.types import RequestContext

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
    from replay.coordinator.consumer.service import ConsumerGroupService

# Enum members looked up once: an enum attribute is looked up in Python on 3.11 (~0.2 us).
_DISABLED = MigrationPolicy.DISABLED
_STABLE = MemberState.STABLE
_UNREVOKED = MemberState.UNREVOKED_PARTITIONS
_REBALANCE_IN_PROGRESS = ErrorCode.rebalance_in_progress


def rejoin(
    service: ConsumerGroupService, now_ms: int, ctx: RequestContext, request: Any, group: ConsumerGroup
) -> Any | None:
    """classicGroupJoinToConsumerGroup of a known classic member (by instance id too) whose
    JoinGroup changes none of its fields (the same protocols, hence the same subscription,
    timeouts, client id and host; no regex), in a group whose target is computed for its epoch
    and whose subscribed topics' metadata did not move (no epoch bump, no new target): the
    member reconciles to the target epoch, its consumer-join timer goes, its session and
    consumer-sync timers are scheduled, and its answer (a follower's, at its new epoch) is
    returned for the caller to send."""
    coordinator = service.coordinator
    member_id = request.member_id
    member = group.members.get(member_id)
    if member is None or not member_id:
        return None
    classic = member.classic
    instance_id = request.group_instance_id
    protocols = request.protocols
    rebalance_timeout_ms = request.rebalance_timeout_ms
    if (
        classic is None
        or classic.protocols != protocols
        or classic.session_timeout_ms != request.session_timeout_ms
        or (rebalance_timeout_ms != -1 and rebalance_timeout_ms != member.rebalance_timeout_ms)
        or ctx.client_id != member.client_id
        or ctx.client_host != member.client_host
        or member.subscribed_topic_regex is not None
        or (
            instance_id is not None
            and (instance_id != member.instance_id or group.static_members.get(instance_id) != member_id)
        )
        or group.regex_counts
        or group.assignment_epoch < group.group_epoch
        or coordinator.config.migration_policy is _DISABLED
        or not supports_classic_protocols(group, request.protocol_type, protocols)
    ):
        return None
    try:
        subscription, topics = subscription_of(protocols[0][1])
    except CodecError:
        return None
    if topics != member.subscribed_topic_names or not metadata_unchanged(coordinator, group):
        return None
    target_epoch = group.assignment_epoch
    epoch = member.member_epoch
    if member.state is not _STABLE or epoch != target_epoch:
        target = group.target.get(member_id)  # group.target_of, without a call when found
        if (
            target is not None
            and target is member.assigned
            and member.state is _STABLE
            and not member.pending_revocation
            and all(target.values())
            and target.keys() <= subscribed_ids(coordinator, group, member.subscribed_topic_names)
        ):
            # reconcile's first case (the target is what the member has: only the epoch moves),
            # without building the arguments of its other cases.
            group.advance_member(member, target_epoch)
            epoch = target_epoch
        else:
            reconciled = reconcile(
                member,
                target_epoch,
                group.target_of(member),
                subscribed_ids(coordinator, group, member.subscribed_topic_names),
                group.owner_of,
                owned_partitions(coordinator, subscription.owned_partitions),
                False,
            )
            group.update_member(reconciled)
            epoch = reconciled.member_epoch
    # cancelConsumerGroupJoinTimeout, scheduleConsumerGroupSessionTimeout,
    # scheduleConsumerGroupSyncTimeout, in Kafka's order.
    kit = group.classic_kits.get(member_id) or _kit(coordinator, group, member_id)
    timers = coordinator.timers
    timers.cancel(kit[2])
    timers.schedule(kit[0], now_ms + request.session_timeout_ms, kit[1])
    timers.schedule(kit[4], now_ms + rebalance_timeout_ms, kit[5])
    # join_ok_response without its call.
    return R.join_follower_constructor(ctx.api_version)(
        member_id, epoch, CONSUMER_PROTOCOL_TYPE, classic.protocols[0][0]
    )


def _kit(coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, member_id: str) -> ClassicKit:
    """The keys and actions of a classic member's session, consumer-join and consumer-sync
    timers (`coordinator.session_timer`, `classic_timers_of`: made once, the same ones
    scheduleConsumerGroupSessionTimeout / ...JoinTimeoutIfAbsent / ...SyncTimeout would make),
    kept in the group (`ConsumerGroup.classic_kits`, dropped with the member) so that each
    classic request finds all three in one look-up."""
    session_key, session_expired, _ = coordinator.session_timer(group.group_id, member_id)
    join_key, join_expired, sync_key, sync_expired = classic_timers_of(coordinator, group.group_id, member_id)
    kit = (session_key, session_expired, join_key, join_expired, sync_key, sync_expired)
    group.classic_kits[member_id] = kit
    return kit


def behind(service: ConsumerGroupService, now_ms: int, group: ConsumerGroup, request: Any) -> bool:
    """classicGroupHeartbeatToConsumerGroup of a known classic member (by instance id too) at the
    generation it names but behind the target epoch: its session is renewed with its classic
    session timeout, its consumer-join timer scheduled if absent, and True tells the caller to
    answer REBALANCE_IN_PROGRESS."""
    _, generation_id, member_id, instance_id = request  # replay.coordinator.parse.Heartbeat
    member = group.members.get(member_id)
    if (
        member is None
        or member.classic is None
        or member.member_epoch != generation_id
        or member.member_epoch >= group.assignment_epoch
        or (instance_id is not None and group.static_members.get(instance_id) != member_id)
    ):
        return False
    coordinator = service.coordinator
    kit = group.classic_kits.get(member_id) or _kit(coordinator, group, member_id)
    timers = coordinator.timers
    timers.schedule(kit[0], now_ms + member.classic.session_timeout_ms, kit[1])
    if not timers.is_scheduled(kit[2]):
        timers.schedule(kit[2], now_ms + member.rebalance_timeout_ms, kit[3])
    return True


def heartbeat(
    service: ConsumerGroupService, now_ms: int, ctx: RequestContext, request: Any, group: ConsumerGroup
) -> Any | None:
    """classicGroupHeartbeatToConsumerGroup's two common answers, returned for the caller to
    send: REBALANCE_IN_PROGRESS for a member behind the target epoch (`behind`), NONE for one
    where it should be (steady.steady_classic_heartbeat); None, with nothing changed, for
    anything else."""
    # The two exclude each other (behind: the member's epoch is under the target's).
    if behind(service, now_ms, group, request):
        return R.heartbeat(ctx.api_version, REBALANCE_IN_PROGRESS)
    _, generation_id, member_id, instance_id = request  # replay.coordinator.parse.Heartbeat
    if steady_classic_heartbeat(service.coordinator, now_ms, group, member_id, instance_id, generation_id):
        return R.heartbeat(ctx.api_version, NONE)
    return None


def sync(
    service: ConsumerGroupService, now_ms: int, ctx: RequestContext, request: Any, group: ConsumerGroup
) -> Any | None:
    """classicGroupSyncToConsumerGroup of a known classic member (by instance id too) at its
    generation, naming its protocol (or none), with no rebalance in progress for it: its
    consumer-sync timer goes, its session is renewed and its answer (its assignment) is returned
    for the caller to send."""
    _, generation_id, member_id, instance_id, protocol_type, protocol_name, _ = request
    member = group.members.get(member_id)
    if member is None:
        return None
    classic = member.classic
    if (
        classic is None
        or member.member_epoch != generation_id
        or (instance_id is not None and group.static_members.get(instance_id) != member_id)
        or (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL_TYPE)
        or (protocol_name is not None and protocol_name != classic.protocols[0][0])
        or (group.assignment_epoch > generation_id and member.state is not _UNREVOKED)
    ):
        return None
    coordinator = service.coordinator
    kit = group.classic_kits.get(member_id) or _kit(coordinator, group, member_id)
    timers = coordinator.timers
    timers.cancel(kit[4])
    timers.schedule(kit[0], now_ms + classic.session_timeout_ms, kit[1])
    return sync_ok_answer(coordinator, member, ctx.api_version, protocol_type, protocol_name)


__all__ = ["behind", "heartbeat", "rejoin", "sync"]
