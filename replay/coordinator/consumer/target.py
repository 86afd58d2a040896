"""The target assignment of a consumer group: when to compute one and what the assignor sees.

Kafka 4.3.1 (org.apache.kafka:kafka-group-coordinator:4.3.1): GroupMetadataManager
.maybeUpdateTargetAssignment and canComputeNextTargetAssignment (at most one new target per
`group.consumer.assignment.interval.ms`), modern/TargetAssignmentBuilder (members in the order of
its member-spec HashMap, each with its subscribed topic ids and current target; the updated
member in place of its stored self, a joining one last), ConsumerGroup.subscriptionType and
computePreferredServerAssignor.

What a group of a thousand members pays here, per target: one spec per member (the topic ids
of a subscription are resolved once per distinct subscription, not once per member), one sort
of ints for the hash order (`assignors.java_hash_order`), the subscription type and the preferred
assignor read from the counts the group keeps (ConsumerGroup.name_counts / regex_counts /
assignor_counts) instead of a walk over its members.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from replay.coordinator.consumer import assignors, incremental
from replay.coordinator.consumer.group import ConsumerGroup, ConsumerGroupMember, HashOrderCache, Partitions
from replay.coordinator.consumer.types import ConsumerGroupEvent
from replay.coordinator.hashorder import MemberMapKind, capacity_for, improved_hash

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator


def maybe_update_target(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    group_epoch: int,
    updated: ConsumerGroupMember,
) -> tuple[int, Partitions]:
    """maybeUpdateTargetAssignment + canComputeNextTargetAssignment (the assignment interval)."""
    if group.assignment_epoch >= group_epoch:
        return group.assignment_epoch, group.target_of(updated)
    config = coordinator.config
    interval = config.assignment_interval_ms
    last = group.assignment_timestamp_ms
    batching = config.behaviour.batches_target_assignments
    if batching and last is not None and interval != 0 and now_ms < last + interval:
        return group.assignment_epoch, group.target_of(updated)
    stored = group.members
    updated_id = updated.member_id
    joining = updated_id not in stored
    name = preferred_assignor(coordinator, group, updated)
    homogeneous = is_homogeneous(coordinator, group, updated, len(stored) + joining)
    uniform = name == assignors.UNIFORM and homogeneous
    empty: Partitions = {}
    if uniform and group.target_profile is not None:
        shared = topic_ids_order(coordinator, group, updated)  # every member's (homogeneous)
        moved = incremental.next_target(coordinator, group, updated, len(stored) + joining, shared)
        if moved is not None:
            return _assigned(coordinator, now_ms, group, group_epoch, name, moved.get(updated_id, empty))
    group.target_profile = None
    member_ids = list(stored)
    if joining:
        member_ids.append(updated_id)  # addOrUpdateMember: a join takes its place at the end
    ordered = member_hash_order(group, member_ids)
    specs = (_homogeneous_specs if homogeneous else _specs)(coordinator, group, ordered, updated)
    first = specs[0].member_id if specs else None
    order = (
        topic_ids_order(coordinator, group, updated if first == updated_id else stored[first])
        if first
        else None
    )
    result = assignors.assign(name, specs, coordinator._partition_counts(), homogeneous, order)
    if len(result) == len(member_ids):  # every member answered (its keys are the specs' ids)
        group.target = result  # type: ignore[assignment]
    else:
        group.target = {member_id: result.get(member_id, empty) for member_id in member_ids}
    if uniform and order is not None and len(member_ids) >= 2:  # the hash order cache is this target's
        subscribed = specs[0].subscribed_topic_ids
        pending = updated_id if joining else None
        incremental.keep_profile(
            group, subscribed, order, coordinator._partition_counts(), len(member_ids), pending
        )
    return _assigned(coordinator, now_ms, group, group_epoch, name, group.target.get(updated_id, empty))


def _assigned(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    group_epoch: int,
    name: str,
    assignment: Partitions,
) -> tuple[int, Partitions]:
    """A new target is the group's: its epoch and time, the event."""
    group.assignment_epoch = group_epoch
    group.assignment_timestamp_ms = now_ms
    coordinator.events.append(
        ConsumerGroupEvent(now_ms, group.group_id, "target_assigned", None, group_epoch, name)
    )
    return group_epoch, assignment


def topic_ids_order(
    coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, member: ConsumerGroupMember
) -> tuple[UUID, ...]:
    """The member's subscribed topic ids in the order Kafka's TopicIds walks its names set: a
    HashSet<String> (a regex's from the record's sorted list, GroupCoordinatorRecordHelpers
    .newConsumerGroupRegularExpressionRecord; names from the request's list, whose order is not
    kept here: sorted), which decides ties in the uniform builder's HashSet<Uuid>."""
    names = member.subscribed_topic_names | group.resolved_topics(member.subscribed_topic_regex)
    known = coordinator.topic_partitions
    return tuple(coordinator.topic_id(n) for n in assignors.java_hash_order(sorted(names)) if n in known)


def member_hash_order(group: ConsumerGroup, member_ids: list[str]) -> list[str]:
    """`assignors.java_hash_order(member_ids)` (the order of Kafka's member-spec HashMap) with
    each member id's improved hash kept by the group: a target of a 1,000-member group no longer
    hashes (through an lru_cache call each) every member id again. When the members are the
    last target's, less those that left, plus new ones at the end (a join appends to the
    member dict), with the same table size, that order is moved by the difference
    (`_moved_order`) instead of sorted again.
    tests/test_consumer_group_fast_paths.py checks it against java_hash_order."""
    if len(member_ids) < 2:
        return list(member_ids)
    spreads = group.hash_spreads
    mask = capacity_for(MemberMapKind.JAVA_HASH_MAP, len(member_ids)) - 1
    cache = group.hash_order
    if cache is not None and cache.mask == mask and _moved_order(cache, member_ids, spreads):
        return list(cache.ordered)
    hashes: list[int | None] = list(map(spreads.get, member_ids))
    if None in hashes:
        for index, found in enumerate(hashes):
            if found is None:
                hashes[index] = spreads[member_ids[index]] = improved_hash(member_ids[index])
    decorated = [((h & mask) << 32) | i for i, h in enumerate(hashes)]  # type: ignore[operator]
    key_of = dict(zip(member_ids, decorated, strict=True))
    decorated.sort()
    ordered = [member_ids[d & 0xFFFFFFFF] for d in decorated]
    group.hash_order = HashOrderCache(mask, list(member_ids), decorated, ordered, key_of, len(member_ids))
    return list(ordered)


_MAX_SEQ = 0xFFFFFFFF  # the join sequence lives in the low 32 bits of a key


def _moved_order(cache: HashOrderCache, member_ids: list[str], spreads: dict[str, int]) -> bool:
    """Move `cache` to `member_ids` when they are its members less some, plus new ones at the
    end: each leaver's key taken out of the sorted keys, each newcomer's put in with the next
    join sequence (bisect: equal buckets stay in join order). False, with nothing changed,
    otherwise (a member that left and came back between two targets moved to the end)."""
    key_of = cache.key_of
    removed = key_of.keys() - set(member_ids)
    kept = cache.member_ids
    if removed:
        kept = list(kept)
        for member_id in removed:  # few: one C scan each
            kept.remove(member_id)
    if len(kept) > len(member_ids) or member_ids[: len(kept)] != kept:
        return False
    added = member_ids[len(kept) :]
    if not key_of.keys().isdisjoint(added) or cache.next_seq + len(added) > _MAX_SEQ:
        return False
    cache.move(removed, added, spreads)
    cache.member_ids = list(member_ids)
    return True


def _specs(
    coordinator: ConsumerGroupCoordinator,
    group: ConsumerGroup,
    ordered: list[str],
    updated: ConsumerGroupMember,
) -> list[assignors.MemberSpec]:
    """TargetAssignmentBuilder's member specs, in `ordered` order, `updated` in place of its
    stored self: each member's subscribed topic ids (resolved once per distinct subscription)
    and current target (a replacing static member's is the departed one's)."""
    stored, updated_id, current = group.members, updated.member_id, group.target
    subscriptions: dict[object, frozenset[UUID]] = {}
    specs = []
    spec, new_tuple = assignors.MemberSpec, tuple.__new__  # NamedTuple's own __new__ is Python
    for member_id in ordered:
        m = updated if member_id == updated_id else stored[member_id]
        regex = m.subscribed_topic_regex
        key = m.subscribed_topic_names if regex is None else (m.subscribed_topic_names, regex)
        topic_ids = subscriptions.get(key)
        if topic_ids is None:
            topic_ids = subscriptions[key] = coordinator.member_topic_ids(group, m)
        assignment = current.get(member_id)
        if assignment is None:
            assignment = group.target_of(m)
        specs.append(new_tuple(spec, (member_id, m.instance_id, topic_ids, assignment)))
    return specs


def _homogeneous_specs(
    coordinator: ConsumerGroupCoordinator,
    group: ConsumerGroup,
    ordered: list[str],
    updated: ConsumerGroupMember,
) -> Sequence[assignors.MemberSpec]:
    """`_specs` when every member subscribes to the same names or the same one regex
    (`is_homogeneous`): one set of topic ids for all, so the specs are columns
    (`assignors.SpecColumns`: the ids, the member records, the current targets gathered by
    C iteration) instead of one tuple per member built in a Python loop (a 1,000-member group
    computes a new target for each epoch bump, up to once per assignment interval).
    tests/test_consumer_group_fast_paths.py checks it against `_specs`."""
    members: list[ConsumerGroupMember | None] = list(map(group.members.get, ordered))
    members[ordered.index(updated.member_id)] = updated
    assignments: list[Partitions | None] = list(map(group.target.get, ordered))
    if None in assignments:  # a joining member, or a replacing static member
        for index, assignment in enumerate(assignments):
            if assignment is None:
                assignments[index] = group.target_of(members[index])  # type: ignore[arg-type]
    topic_ids = coordinator.member_topic_ids(group, updated)
    return assignors.SpecColumns(ordered, members, topic_ids, assignments)  # type: ignore[arg-type]


def is_homogeneous(
    coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, updated: ConsumerGroupMember, count: int
) -> bool:
    """ConsumerGroup.subscriptionType: by name, every subscribed name (existing or not) is
    subscribed by every member; with regexes, all members share one regex and none uses names.
    Read from the group's counts with `updated` in place of its stored self."""
    by_name, regexes = coordinator._counts_with(group, updated)
    if not regexes:
        return all(n == count for n in by_name.values())
    if len(regexes) != 1 or next(iter(regexes.values())) != count:
        return False
    return not by_name


def preferred_assignor(
    coordinator: ConsumerGroupCoordinator, group: ConsumerGroup, updated: ConsumerGroupMember
) -> str:
    """ConsumerGroup.computePreferredServerAssignor: the most used assignor among members
    (with the updated member counted in its new choice), else the default (the first configured).
    Ties go to the assignor met first walking the members (then `updated`)."""
    default = coordinator.config.assignors[0]
    if not group.assignor_counts:  # nobody stored names one: only `updated` may
        return updated.server_assignor if updated.server_assignor is not None else default
    counts: dict[str, int] = {}
    for m in group.members.values():
        if m.member_id == updated.member_id:
            continue
        if m.server_assignor is not None:
            counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
    if updated.server_assignor is not None:
        counts[updated.server_assignor] = counts.get(updated.server_assignor, 0) + 1
    if not counts:
        return default
    return max(counts.items(), key=lambda item: item[1])[0]


__all__ = ["is_homogeneous", "maybe_update_target", "member_hash_order", "preferred_assignor"]
