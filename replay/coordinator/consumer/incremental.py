"""The next `uniform` target of a homogeneous group from the last one, by the members that left
or joined since: what UniformHomogeneousAssignmentBuilder.build gives over every member, without
a pass over every member.

Kafka 4.3.1 (org.apache.kafka:kafka-group-coordinator:4.3.1): modern/TargetAssignmentBuilder
.build runs the assignor over all members at every new target (members in its member-spec
HashMap order, each with its current target); assignor/UniformHomogeneousAssignmentBuilder
computes the minimum quota `q = partitions / members` and `e = partitions % members` members
that get one more, walks the members in that order (maybeRevokePartitions) and hands the
partitions nobody holds, then the revoked ones, to the members under quota
(assignRemainingPartitions). Kafka's result is what has to come out; the shortcut below walks
only the members that loop would not leave alone:

- After a target the group keeps (group.TargetProfile) the target, its quotas and the members
  holding `q + 1`. Every member then holds exactly its quota: the builder hands out every
  partition (or throws), no member ends over its quota, and the quotas add up to the
  partitions; the profile is kept only when the sizes add up to the partitions, so the target
  is a partition of the subscribed topics, each partition held once.
- The next target, with the same subscribed topics, partition counts and minimum quota `q`:
  a member of the last target holds `q` or `q + 1` (its current target is the last target's
  entry), a new member holds nothing. In the builder's first loop the count of members still
  to get an extra, `r`, never exceeds the members left (`r <= n - i` at index i), so a member
  holding exactly `q` before index `n - e` gives its extra slot up (`n - i > e >= r`), keeps
  its very assignment and leaves `r` as it was: nothing to walk (specs.inert_members relies on
  the same). The members walked are the `q + 1` holders, the new members and the last `e`
  positions, in member order with their indices; the partitions nobody holds are exactly the
  leavers' targets (each in topic order, ascending: `_free_partitions`).
- Anything else (another assignor, a heterogeneous group, other topics or counts, another
  minimum quota, a new member that holds something, a member that left and came back, a
  member table that resized) falls back to the full computation in target.py, which keeps a
  new profile when it may. The walk costs its members (the `q + 1` holders and the last `e`:
  at most all, when nearly every member gets an extra) and a bisect each.

tests/test_consumer_group_incremental.py compares it with the full computation and with the
partition-by-partition port of Kafka's builder over random groups and member changes.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from itertools import chain
from typing import TYPE_CHECKING
from uuid import UUID

from replay.coordinator.consumer import assignors
from replay.coordinator.consumer.group import (
    EMPTY,
    ConsumerGroup,
    ConsumerGroupMember,
    Partitions,
    TargetProfile,
)
from replay.coordinator.consumer.specs import GroupAssignment, MemberSpec
from replay.coordinator.hashorder import MemberMapKind, capacity_for

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator

_MAX_SEQ = 0xFFFFFFFF  # HashOrderCache: the join sequence lives in the low 32 bits of a key


def next_target(
    coordinator: ConsumerGroupCoordinator,
    group: ConsumerGroup,
    updated: ConsumerGroupMember,
    member_count: int,
    topic_order: tuple[UUID, ...],
) -> dict[str, Partitions] | None:
    """The new target of a `uniform` homogeneous group (the caller checked both), written into
    `group.target` in place; None, with nothing changed, when the last target's profile does not
    allow it. `member_count` counts `updated` (a joining member is not stored yet);
    `topic_order` is target.topic_ids_order of any member (a homogeneous group's members share
    their subscription)."""
    profile = group.target_profile
    if profile is None or profile.pending is not None or group.target is not profile.result:
        return None
    updated_id = updated.member_id
    joining = updated_id not in group.members
    added = [*profile.added, updated_id] if joining else profile.added
    removed = profile.removed
    if member_count != profile.member_count - len(removed) + len(added) or member_count < 2:
        return None
    subscribed = coordinator.member_topic_ids(group, updated)
    partition_counts = coordinator._partition_counts()
    topic_ids, counts = assignors.uniform_topics(subscribed, partition_counts, topic_order)
    if subscribed != profile.subscribed or topic_ids != profile.topic_ids or counts != profile.counts:
        return None
    minimum_quota, extra = divmod(sum(counts), member_count)
    if minimum_quota != profile.minimum_quota or not _holding_nothing(group, added, updated):
        return None
    ordered = _moved_hash_order(group, removed, added, member_count)
    if ordered is None:
        return None
    keys, key_of = ordered
    big = profile.big.difference(removed)
    walked_ids = big.union(added)
    if extra:
        walked_ids.update(group.hash_order.ordered[member_count - extra :])  # type: ignore[union-attr]
    target = group.target
    walked = sorted((bisect_left(keys, key_of[m]), m) for m in walked_ids)
    specs = [(i, MemberSpec(m, None, subscribed, target.get(m, EMPTY))) for i, m in walked]
    changes: GroupAssignment = {}
    walk = assignors.UniformWalk(member_count, minimum_quota, extra, subscribed, topic_ids, changes)
    walk.first_loop(specs, {})
    try:
        walk.assign_remaining(_freed(topic_ids, removed.values()))
    except assignors.PartitionAssignorError:
        group.target_profile = None  # cannot happen from a valid profile: the full path decides
        return None
    target.update(changes)
    big.difference_update(changes)
    big.update(m for m, assignment in changes.items() if _size(assignment) > minimum_quota)
    if len(big) != extra:
        group.target_profile = None
        return target
    profile.big, profile.member_count = big, member_count
    profile.pending = updated_id if joining else None
    profile.removed, profile.added = {}, []
    return target


def _holding_nothing(group: ConsumerGroup, added: list[str], updated: ConsumerGroupMember) -> bool:
    """Each new member's current target is empty (a replacing static member's is the departed
    one's, group.target_of), and none of them left again (their ids are not in `removed`)."""
    profile, target, stored = group.target_profile, group.target, group.members
    assert profile is not None
    for member_id in added:
        if member_id in target or member_id in profile.removed:
            return False
        member = updated if member_id == updated.member_id else stored.get(member_id)
        if member is None or group.target_of(member):
            return False
    return True


def _moved_hash_order(
    group: ConsumerGroup, removed: dict[str, Partitions], added: list[str], member_count: int
) -> tuple[list[int], dict[str, int]] | None:
    """group.hash_order (target.member_hash_order's cache, made for the last target's members)
    moved to the members now: the leavers' keys taken out, the new members' put in with the
    next join sequences (a join appends to the member dict, so the order is that of
    `target.member_hash_order`). None, with nothing changed, when the table size changed."""
    cache = group.hash_order
    mask = capacity_for(MemberMapKind.JAVA_HASH_MAP, member_count) - 1
    if cache is None or cache.mask != mask or cache.next_seq + len(added) > _MAX_SEQ:
        return None
    key_of = cache.key_of
    if not all(m in key_of for m in removed) or any(m in key_of for m in added):
        return None
    cache.move(removed, added, group.hash_spreads)
    for member_id in removed:
        cache.member_ids.remove(member_id)
    cache.member_ids.extend(added)
    return cache.keys, key_of


def _freed(topic_ids: tuple[UUID, ...], leavers: Iterable[Partitions]) -> list[assignors._Chunk]:
    """The partitions nobody holds: the leavers' (the last target held each partition once), per
    subscribed topic in topic order, ascending (assignors._free_partitions)."""
    held = list(chain.from_iterable(a.items() for a in leavers))
    chunks: list[assignors._Chunk] = []
    for topic_id in topic_ids:
        parts = [p for t, p in held if t == topic_id]
        if parts:
            free = sorted(frozenset().union(*parts))
            if free:
                chunks.append((topic_id, free))
    return chunks


def _size(assignment: Partitions) -> int:
    return sum(map(len, assignment.values()))


def keep_profile(
    group: ConsumerGroup,
    subscribed: frozenset[UUID],
    topic_order: tuple[UUID, ...],
    counts_of: dict[UUID, int],
    member_count: int,
    pending: str | None,
) -> None:
    """After a full `uniform` homogeneous target of `member_count` (>= 2) members: keep its
    profile when the target holds every subscribed partition once (the sizes add up to the
    partitions, see the module docstring), else none."""
    group.target_profile = None
    topic_ids, counts = assignors.uniform_topics(subscribed, counts_of, topic_order)
    total = sum(counts)
    if -1 in counts or not topic_ids:
        return
    target = group.target
    try:
        held = sum(map(len, chain.from_iterable(map(dict.values, target.values()))))  # type: ignore[arg-type]
    except TypeError:  # a target that is not a dict
        return
    minimum_quota, extra = divmod(total, member_count)
    if held != total or len(target) != member_count:
        return
    big = {m for m, assignment in target.items() if _size(assignment) > minimum_quota} if extra else set()
    if len(big) != extra:
        return
    group.target_profile = TargetProfile(
        target, subscribed, topic_ids, counts, member_count, minimum_quota, big, pending
    )


__all__ = ["keep_profile", "next_target"]
