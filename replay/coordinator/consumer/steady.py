"""The O(1) path of ConsumerGroupHeartbeat: a member heartbeating without changing anything.

Most heartbeats of a large group are these (every member, every
group.consumer.heartbeat.interval.ms); Kafka's consumerGroupHeartbeat runs its full sequence for
them and finds nothing to do. Here they skip it when every condition under which that sequence
does something is ruled out first, and touch only the member, its session timer and a cached
answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from replay.coordinator.consumer.group import ConsumerGroup, MemberState
from replay.coordinator.consumer.types import HeartbeatRequest, HeartbeatResponse

_STABLE = MemberState.STABLE
_new_tuple = tuple.__new__  # HeartbeatResponse is a NamedTuple; its own __new__ is Python

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator


def steady_heartbeat(
    coordinator: ConsumerGroupCoordinator, now_ms: int, request: HeartbeatRequest
) -> HeartbeatResponse | None:
    """`steady` with a HeartbeatRequest's fields."""
    return steady(
        coordinator,
        now_ms,
        request.group_id,
        request.member_id,
        request.member_epoch,
        request.instance_id,
        request.rack_id,
        request.rebalance_timeout_ms,
        request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None,
        request.server_assignor,
        request.client_id,
        request.client_host,
    )


def steady(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group_id: str,
    member_id: str,
    epoch: int,
    instance_id: str | None,
    rack_id: str | None,
    rebalance_timeout_ms: int,
    subscribes: bool,
    server_assignor: str | None,
    client_id: str,
    client_host: str,
) -> HeartbeatResponse | None:
    """consumerGroupHeartbeat of a member that changes nothing: its epoch, its own fields
    (none sent, or the same; `subscribes`: topic names or a regex were sent), a group whose
    target is computed and whose metadata did not move, no regex. It is answered from O(1)
    state: the session timeout is rescheduled and, when the group's target epoch moved on and
    the member's target is what it has (the assignor kept it as it was), the member is
    reconciled to that epoch (`advanced_to`). The fields come one by one so that the service
    can ask with a kio request's own (the member's owned partitions are not read here, nor by
    the full path for such a member: they are not converted). None, with nothing changed:
    anything else, for the full path (`_heartbeat`), which gives the same answer to these
    (tests/test_consumer_group_fast_paths.py runs both over random groups)."""
    group = coordinator.groups.get(group_id)
    if group is None or group.regex_counts or group.assignment_epoch < group.group_epoch:
        return None
    member = group.members.get(member_id)
    if (
        member is None
        or epoch != member.member_epoch
        or epoch <= 0
        or member.state is not _STABLE
        or member.classic is not None
        or subscribes
        or (rebalance_timeout_ms != -1 and rebalance_timeout_ms != member.rebalance_timeout_ms)
        or client_id != member.client_id
        or client_host != member.client_host
        or (rack_id is not None and rack_id != member.rack_id)
        or (server_assignor is not None and server_assignor != member.server_assignor)
        or (
            instance_id is not None
            and (instance_id != member.instance_id or group.static_members.get(instance_id) != member_id)
        )
        or not member_id.strip()
    ):
        return None
    if not metadata_unchanged(coordinator, group):
        return None
    timer = group.session_timers.get(member_id)
    if timer is None:
        return None  # made by the full path's first heartbeat of this member
    target_epoch = group.assignment_epoch
    if epoch != target_epoch:
        target = group.target.get(member_id)  # group.target_of, without a call when found
        if target is None:
            target = group.target_of(member)
        if member.assigned is not target or member.pending_revocation:
            return None
        subscribed = subscribed_ids(coordinator, group, member.subscribed_topic_names)
        if not target.keys() <= subscribed or not all(target.values()):
            return None
        group.advance_member(member, target_epoch)
        coordinator.timers.cancel(timer[2])
    coordinator.timers.schedule(timer[0], now_ms + coordinator.config.session_timeout_ms, timer[1])
    answer = group.plain_answers.get(member_id)
    if answer is None or answer.member_epoch != target_epoch:
        interval_ms = coordinator.config.heartbeat_interval_ms
        answer = _new_tuple(HeartbeatResponse, (0, None, member_id, target_epoch, interval_ms, None))
        group.plain_answers[member_id] = answer
    return answer


def steady_classic_heartbeat(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
) -> bool:
    """classicGroupHeartbeatToConsumerGroup of a classic member that is where it should be:
    known (by instance id too), at the generation it names, STABLE at or past the target
    epoch (so not must_rejoin). Its session timer is rescheduled with its own classic session
    timeout and True tells the caller to answer NONE; False, with nothing changed: the full
    path's turn (service.classic_heartbeat), which does the same for these members."""
    member = group.members.get(member_id)
    if (
        member is None
        or member.classic is None
        or member.member_epoch != generation_id
        or member.state is not _STABLE
        or member.member_epoch < group.assignment_epoch
        or (instance_id is not None and group.static_members.get(instance_id) != member_id)
    ):
        return False
    timer = group.session_timers.get(member_id)
    if timer is None:
        return False
    coordinator.timers.schedule(timer[0], now_ms + member.classic.session_timeout_ms, timer[1])
    return True


def metadata_unchanged(coordinator: ConsumerGroupCoordinator, group: ConsumerGroup) -> bool:
    """The metadata hash of the subscribed topics is what the group last bumped its epoch for
    (without regexes: the names the members subscribe to, with their partition counts)."""
    tp = coordinator.topic_partitions
    metadata_hash = group.metadata_hash
    existing = 0
    for name in group.name_counts:
        partitions = tp.get(name)
        if partitions is not None:
            if (name, partitions) not in metadata_hash:
                return False
            existing += 1
    return existing == len(metadata_hash)


def subscribed_ids(
    coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, names: frozenset[str]
) -> frozenset[UUID]:
    """TopicIds of `names` (no regex here), remembered per subscription while the metadata
    hash the group holds - just checked against the image - and the topic id overrides stay
    (`coordinator.topic_ids` builds a set of UUIDs, which hash in Python)."""
    token = (group.metadata_hash, coordinator.topic_ids_version)
    found = group.topic_ids_cache.get(names)
    if found is not None and found[0][0] is token[0] and found[0][1] == token[1]:
        return found[1]
    ids = coordinator.topic_ids(names)
    group.topic_ids_cache[names] = (token, ids)
    return ids


__all__ = ["metadata_unchanged", "steady", "steady_classic_heartbeat", "steady_heartbeat", "subscribed_ids"]
