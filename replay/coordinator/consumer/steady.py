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

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator


def steady_heartbeat(
    coordinator: ConsumerGroupCoordinator, now_ms: int, request: HeartbeatRequest
) -> HeartbeatResponse | None:
    """consumerGroupHeartbeat of a member that changes nothing: its epoch, its own fields
    (none sent, or the same), a group whose target is computed and whose metadata did not
    move, no regex. It is answered from O(1) state: the session timeout is rescheduled and,
    when the group's target epoch moved on and the member's target is what it has (the
    assignor kept it as it was), the member is reconciled to that epoch (`advanced_to`).
    None: anything else, for the full path (`_heartbeat`), which gives the same answer to
    these (tests/test_consumer_group_fast_paths.py runs both over random groups)."""
    group = coordinator.groups.get(request.group_id)
    if group is None or group.regex_counts or group.assignment_epoch < group.group_epoch:
        return None
    member_id = request.member_id
    member = group.members.get(member_id)
    epoch = request.member_epoch
    if (
        member is None
        or epoch != member.member_epoch
        or epoch <= 0
        or member.state is not MemberState.STABLE
        or member.classic is not None
        or request.subscribed_topic_names is not None
        or request.subscribed_topic_regex is not None
        or request.rebalance_timeout_ms not in (-1, member.rebalance_timeout_ms)
        or request.client_id != member.client_id
        or request.client_host != member.client_host
        or (request.rack_id is not None and request.rack_id != member.rack_id)
        or (request.server_assignor is not None and request.server_assignor != member.server_assignor)
        or (
            request.instance_id is not None
            and (
                request.instance_id != member.instance_id
                or group.static_members.get(request.instance_id) != member_id
            )
        )
        or not member_id.strip()
    ):
        return None
    if not _metadata_unchanged(coordinator, group):
        return None
    target_epoch = group.assignment_epoch
    if epoch != target_epoch:
        target = group.target_of(member)
        if member.assigned is not target or member.pending_revocation:
            return None
        subscribed = _subscribed_ids(coordinator, group, member.subscribed_topic_names)
        if not target.keys() <= subscribed or not all(target.values()):
            return None
        group.update_member(member.advanced_to(target_epoch))
        coordinator.timers.cancel(f"rebalance-timeout-{group.group_id}-{member_id}")
    coordinator._schedule_session_timeout(now_ms, group.group_id, member_id)
    answer = group.plain_answers.get(member_id)
    if answer is None or answer.member_epoch != target_epoch:  # type: ignore[attr-defined]
        interval_ms = coordinator.config.heartbeat_interval_ms
        answer = HeartbeatResponse(0, None, member_id, target_epoch, interval_ms)
        group.plain_answers[member_id] = answer
    return answer  # type: ignore[return-value]


def _metadata_unchanged(coordinator: ConsumerGroupCoordinator, group: ConsumerGroup) -> bool:
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


def _subscribed_ids(
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


__all__ = ["steady_heartbeat"]
