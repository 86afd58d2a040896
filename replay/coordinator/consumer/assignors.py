"""Server-side assignors of KIP-848 consumer groups: `uniform` (the default) and `range`.

Ports of Kafka 4.3.1's group-coordinator (sources jar org.apache.kafka:kafka-group-coordinator:
4.3.1, read for this module):
- assignor/UniformAssignor.java -> UniformHomogeneousAssignmentBuilder.java (members subscribed to
  the same topics): keep each member's current target up to its quota, collect the unassigned
  and over-quota partitions, hand them out to members under quota in member order.
- assignor/RangeAssignor.java: members sorted by instance id (static first) then member id;
  each subscribed topic cut into contiguous ranges, the first `partitions % members` members
  get one extra (assignHomogeneousGroup / assignHeterogeneousGroup).

Where Kafka's outcome depends on Java hash iteration order (the uniform builder walks a fresh
`HashMap<String, ...>` of members and a `HashSet<Uuid>` of topics), `java_hash_order` reproduces
java.util.HashMap's order: bucket `(h ^ h >>> 16) & (capacity - 1)` of the final table, ties in
insertion order. A member's current target is walked in Assignment.fromRecord's order: its dict
is kept in record order (maporder.py models the assignor map the record was written from).
Deviations, documented: (1) the insertion order fed to it is the group's join
order, while Kafka inserts in its TimelineHashMap's order, so two members whose ids land in the
same bucket may come out swapped; (2) a member's partitions of one topic are walked ascending
(Kafka walks a HashSet<Integer>, ascending whenever the set's table is larger than its largest
partition number). Members with different subscriptions go through a line-by-line port of
UniformHeterogeneousAssignmentBuilder (heterogeneous.py).
"""

from __future__ import annotations

import gc
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from uuid import UUID

from replay.coordinator.consumer.heterogeneous import Heterogeneous, PartitionAssignorError, partition_count
from replay.coordinator.consumer.maporder import in_record_order as _in_record_order
from replay.coordinator.consumer.maporder import java_hash_order, java_uuid_hash
from replay.coordinator.consumer.specs import (
    GroupAssignment,
    MemberSpec,
    SpecColumns,
    assignments_of,
    inert_members,
)
from replay.coordinator.hashorder import java_string_hash

UNIFORM = "uniform"
RANGE = "range"
ASSIGNORS = (UNIFORM, RANGE)  # group.consumer.assignors default order: the first is the default


def _homogeneous(members: Sequence[MemberSpec]) -> bool:
    first = members[0].subscribed_topic_ids
    return all(member.subscribed_topic_ids == first for member in members)


@lru_cache(maxsize=1 << 10)
def _topic_order(topic_ids: frozenset[UUID]) -> tuple[UUID, ...]:
    """The order Kafka walks the group's HashSet<Uuid> of subscribed topics in (cached). Ties in
    a bucket by topic id: Kafka's insertion order is its subscribed names' set order, unknown here."""
    return tuple(java_hash_order(sorted(topic_ids)))


@lru_cache(maxsize=1 << 10)
def _target_order(record: tuple[UUID, ...]) -> tuple[UUID, ...]:
    """The order Kafka walks a member's current target in: Assignment.fromRecord's HashMap filled
    in record order, which is the order of the target's dict here (maporder.record_order). Also
    the subscribed HashSet<Uuid> filled in TopicIds order."""
    return tuple(java_hash_order(record))


def uniform_topics(
    subscribed: frozenset[UUID], topic_partitions: Mapping[UUID, int], topic_order: Sequence[UUID] | None
) -> tuple[tuple[UUID, ...], list[int]]:
    """The subscribed topics in the order the homogeneous builder walks its HashSet<Uuid> (see
    `uniform`'s `topic_order`) and their partition counts (-1: not in the metadata)."""
    if topic_order is not None and len(topic_order) == len(subscribed):
        topic_ids = _target_order(tuple(topic_order))
    else:
        topic_ids = _topic_order(subscribed)
    return topic_ids, [topic_partitions.get(topic_id, -1) for topic_id in topic_ids]


def uniform(
    members: Sequence[MemberSpec],
    topic_partitions: Mapping[UUID, int],
    homogeneous: bool | None = None,
    topic_order: Sequence[UUID] | None = None,
) -> GroupAssignment:
    """UniformAssignor.assign; `members` in Kafka's member-spec map order (see java_hash_order).
    `homogeneous` is the group's SubscriptionType (None: the members' topic sets all equal).
    `topic_order`: the first member's subscribed topic ids in the order its TopicIds iterates them
    (its names set's order), which the builder's `new HashSet<>(...)` keeps for ties in a bucket
    (None: ties by topic id)."""
    if not members:
        return {}
    if not (_homogeneous(members) if homogeneous is None else homogeneous):
        return Heterogeneous(members, topic_partitions).build()
    subscribed = members[0].subscribed_topic_ids
    topic_ids, counts = uniform_topics(subscribed, topic_partitions, topic_order)
    if not topic_ids:
        return {}
    if -1 in counts:
        partition_count(topic_partitions, topic_ids[counts.index(-1)])  # raises, naming the first
    if not any(assignments_of(members)):  # nobody holds anything: a fresh group
        if not gc.isenabled():
            return _uniform_fresh(members, topic_ids, counts)
        # No reference cycle in a fresh target: the cyclic GC, deferred, has nothing to miss (its
        # older generations walk the whole heap: bench/README.md, 10,000 members ~0.7x CPU).
        gc.disable()
        try:
            return _uniform_fresh(members, topic_ids, counts)
        finally:
            gc.enable()
    return _uniform_homogeneous(members, subscribed, topic_ids, counts)


def _uniform_fresh(
    members: Sequence[MemberSpec], topic_ids: tuple[UUID, ...], counts: list[int]
) -> GroupAssignment:
    """UniformHomogeneousAssignmentBuilder.build when nobody holds a partition: nothing to keep
    or revoke, so build() is its quotas (the minimum each, one more for the last `extra` members)
    and assignRemainingPartitions hands out slices of `range(count)` in topic order. Compared with
    `_uniform_homogeneous` and the port in tests/test_consumer_group_assignors.py."""
    member_count = len(members)
    minimum_quota, extra = divmod(sum(counts), member_count)
    first_extra = member_count - extra
    chunks = [(topic_id, range(count)) for topic_id, count in zip(topic_ids, counts, strict=True) if count]
    target: GroupAssignment = {}
    position = offset = 0
    topic_id, chunk = chunks[0] if chunks else (None, range(0))
    size = len(chunk)
    for index, member in enumerate(members):
        quota = minimum_quota + 1 if index >= first_extra else minimum_quota
        end = offset + quota
        if offset < end < size:  # the usual member: one slice of the current topic (measured hot path)
            target[member.member_id] = {topic_id: frozenset(chunk[offset:end])}  # type: ignore[dict-item]
            offset = end
            continue
        if not quota:
            target[member.member_id] = member.assignment  # type: ignore[assignment]
            continue
        grown: dict[UUID, frozenset[int]] = {}
        pieces: list[tuple[UUID, int]] = []
        while quota:
            piece = frozenset(chunk[offset : offset + quota])  # quotas add up to the partitions
            grown[topic_id] = piece  # type: ignore[index]
            pieces.append((topic_id, len(piece)))  # type: ignore[arg-type]
            quota -= len(piece)
            offset += len(piece)
            if offset == size:
                position += 1
                topic_id, chunk = chunks[position] if position < len(chunks) else (None, range(0))
                size, offset = len(chunk), 0
        target[member.member_id] = _in_record_order(grown, None, pieces)
    return target


# A run of partitions of one topic waiting for a member: a range while the topic is untouched.
_Chunk = tuple[UUID, Sequence[int]]


def _uniform_homogeneous(
    members: Sequence[MemberSpec],
    subscribed: frozenset[UUID],
    topic_ids: tuple[UUID, ...],
    counts: list[int],
    skip_inert: bool = True,
) -> GroupAssignment:
    """UniformHomogeneousAssignmentBuilder.build on counts and slices instead of partitions.

    Kafka's list of unassigned partitions (each subscribed topic's free partitions in topic
    order, then the revoked ones in member order) is kept as chunks: a topic nobody holds is
    `range(count)`, so handing out a member's quota is one slice. As in Kafka (the immutable
    map it does not copy), a member that keeps everything keeps its very assignment object.
    Same result as the partition-by-partition port (tests/support/reference_uniform.py, compared
    over random groups in tests/test_consumer_group_assignors.py). `skip_inert`: members the
    first loop would leave as they are (specs.inert_members) are not walked one by one."""
    member_count = len(members)
    minimum_quota, extra = divmod(sum(counts), member_count)
    target: GroupAssignment = {}
    held: dict[int, list[frozenset[int]]] = {}  # the current holders of each subscribed topic
    walked: Iterable[tuple[int, MemberSpec]] = enumerate(members)
    skipped = inert_members(members, topic_ids, minimum_quota, extra) if skip_inert else None
    if skipped is not None:
        indices, target, held = skipped
        walked = [(index, members[index]) for index in indices]
    walk = UniformWalk(member_count, minimum_quota, extra, subscribed, topic_ids, target)
    walk.first_loop(walked, held)
    walk.assign_remaining(_free_partitions(topic_ids, counts, held))
    return target


class UniformWalk:
    """The two loops of UniformHomogeneousAssignmentBuilder (maybeRevokePartitions, then
    assignRemainingPartitions) over the members handed to them, writing into `target`: the
    members not walked must be ones the first loop leaves as they are (their very assignment
    kept, `extra` untouched, nothing revoked or wanted). `_uniform_homogeneous` walks all or
    all but the inert ones; incremental.py walks the few members a one-member change touches."""

    __slots__ = (
        "canonical",
        "copied",
        "extra",
        "member_count",
        "minimum_quota",
        "revoked",
        "subscribed",
        "target",
        "topic_ids",
        "unfilled",
    )

    def __init__(
        self,
        member_count: int,
        minimum_quota: int,
        extra: int,
        subscribed: frozenset[UUID],
        topic_ids: tuple[UUID, ...],
        target: GroupAssignment,
    ) -> None:
        self.member_count, self.minimum_quota, self.extra = member_count, minimum_quota, extra
        self.subscribed, self.topic_ids, self.target = subscribed, topic_ids, target
        # Subscribed topics by identity: the topic ids in assignments are mostly the very objects
        # of the subscription, and uuid.UUID hashes in Python (a dict lookup by UUID costs a call).
        self.canonical = {id(topic_id): topic_id for topic_id in topic_ids}
        self.revoked: list[_Chunk] = []
        self.unfilled: list[tuple[str, int]] = []
        self.copied: dict[str, tuple[UUID, ...]] = {}  # an unfilled member's old target, Kafka's order

    def first_loop(  # noqa: C901 - Kafka's maybeRevokePartitions in one measured hot loop
        self, walked: Iterable[tuple[int, MemberSpec]], held: dict[int, list[frozenset[int]]]
    ) -> None:
        """maybeRevokePartitions over `walked` (index in member order, spec), in member order;
        each walked member's subscribed partitions are added to `held`."""
        member_count, minimum_quota, extra = self.member_count, self.minimum_quota, self.extra
        subscribed, topic_ids, target = self.subscribed, self.topic_ids, self.target
        canonical, revoked, unfilled, copied = self.canonical, self.revoked, self.unfilled, self.copied
        for index, member in walked:
            quota = minimum_quota
            has_extra = extra > 0
            if has_extra:
                quota += 1
            current = member.assignment
            whole = False
            if len(current) == 1:  # the usual member: one topic, all of it kept (measured hot path)
                ((topic_id, parts),) = current.items()
                key = id(topic_id)
                if key in canonical and len(parts) <= quota:
                    holders = held.get(key)
                    if holders is None:
                        held[key] = [parts]
                    else:
                        holders.append(parts)
                    quota -= len(parts)
                    target[member.member_id] = current  # type: ignore[assignment]
                    whole = True
            if whole:
                pass
            elif current:
                changed = False
                kept: list[tuple[UUID, frozenset[int]]] = []
                if len(current) == 1:
                    items: Iterable[tuple[UUID, frozenset[int]]] = current.items()
                else:
                    items = [(t, current[t]) for t in _target_order(tuple(current))]
                for topic_id, parts in items:
                    key = id(topic_id)
                    if key not in canonical:
                        key = _subscribed_key(topic_id, subscribed, topic_ids)
                        if key == -1:
                            changed = True
                            continue
                    holders = held.get(key)
                    if holders is None:
                        held[key] = [parts]
                    else:
                        holders.append(parts)
                    if len(parts) <= quota:
                        quota -= len(parts)
                        kept.append((topic_id, parts))
                        continue
                    changed = True
                    ordered = sorted(parts)
                    if quota:
                        kept.append((topic_id, frozenset(ordered[:quota])))
                    revoked.append((topic_id, ordered[quota:]))
                    quota = 0
                if changed:
                    target[member.member_id] = _in_record_order(dict(kept), _target_order(tuple(current)), ())
                else:
                    target[member.member_id] = current  # type: ignore[assignment]
            else:
                target[member.member_id] = current  # type: ignore[assignment]
            if quota > 0 and has_extra and member_count - index > extra:
                quota -= 1
                has_extra = False
            if quota > 0:
                unfilled.append((member.member_id, quota))
                if current:  # assignRemainingPartitions adds to a deep copy of it
                    copied[member.member_id] = _target_order(tuple(current))
            if has_extra:
                extra -= 1
        self.extra = extra

    def assign_remaining(self, chunks: list[_Chunk]) -> None:
        """assignRemainingPartitions: `chunks` (the free partitions in topic order) then the
        revoked ones, handed out to the unfilled members in member order."""
        target, copied = self.target, self.copied
        chunks.extend(self.revoked)
        chunk_count = len(chunks)
        position = offset = 0
        for member_id, quota in self.unfilled:
            if position >= chunk_count:
                break
            current = target[member_id]
            if not current:  # a new member whose quota one chunk covers (most of a fresh group)
                topic_id, chunk = chunks[position]
                end = offset + quota
                if end < len(chunk):
                    target[member_id] = {topic_id: frozenset(chunk[offset:end])}
                    offset = end
                    continue
            grown = dict(current)
            pieces: list[tuple[UUID, int]] = []
            while quota and position < chunk_count:
                topic_id, chunk = chunks[position]
                end = offset + quota
                if end >= len(chunk):
                    piece = frozenset(chunk[offset:])
                    position += 1
                    offset = 0
                else:
                    piece = frozenset(chunk[offset:end])
                    offset = end
                quota -= len(piece)
                pieces.append((topic_id, len(piece)))
                have = grown.get(topic_id)
                grown[topic_id] = piece if have is None else have | piece
            target[member_id] = _in_record_order(grown, copied.get(member_id), pieces)
        if position < chunk_count:
            raise PartitionAssignorError("Partitions were left unassigned")


def _subscribed_key(topic_id: UUID, subscribed: frozenset[UUID], topic_ids: tuple[UUID, ...]) -> int:
    """The identity key of the subscribed topic equal to `topic_id` (another object of the same
    id), -1 when it is not subscribed."""
    if topic_id not in subscribed:
        return -1
    return next(id(t) for t in topic_ids if t == topic_id)


def _free_partitions(
    topic_ids: tuple[UUID, ...], counts: list[int], held: dict[int, list[frozenset[int]]]
) -> list[_Chunk]:
    """The subscribed topics' partitions no member holds (groupSpec.isPartitionAssigned), in
    topic order, each topic's ascending."""
    chunks: list[_Chunk] = []
    for topic_id, count in zip(topic_ids, counts, strict=True):
        holders = held.get(id(topic_id))
        free: Sequence[int]
        if not holders:
            free = range(count)
        else:
            taken = frozenset().union(*holders)
            every = _every_partition(count)
            if taken >= every:  # a size check first: a member's leave frees some, at no cost
                continue
            free = sorted(every - taken)
        if free:
            chunks.append((topic_id, free))
    return chunks


@lru_cache(maxsize=1 << 8)
def _every_partition(count: int) -> frozenset[int]:
    """A topic's partitions as a set, made once per partition count (`_free_partitions`)."""
    return frozenset(range(count))


def _range_order(member: MemberSpec) -> tuple[int, str]:
    # RangeAssignor.sortMemberIds: static members (by instance id) before dynamic (by member id).
    return (0, member.instance_id) if member.instance_id is not None else (1, member.member_id)


def range_(members: Sequence[MemberSpec], topic_partitions: Mapping[UUID, int]) -> GroupAssignment:
    """RangeAssignor.assign. Both of Kafka's paths walk members in order and give the member of
    rank r among a topic's S subscribers the range starting at r*q + min(r, e) (q, e = divmod(P, S))
    of length q (+1 while r < e); computed here per topic, so members that get nothing of a topic
    cost nothing."""
    if not members:
        return {}
    ordered = sorted(members, key=_range_order)
    # Members grouped by identical subscriptions (one group when homogeneous), in rank order.
    by_subscription: dict[frozenset[UUID], list[str]] = {}
    for member in ordered:
        by_subscription.setdefault(member.subscribed_topic_ids, []).append(member.member_id)
    position = {m.member_id: i for i, m in enumerate(ordered)}
    subscribers: dict[UUID, list[str]] = {}
    for subscription, member_ids in by_subscription.items():
        for topic_id in subscription:
            known = subscribers.get(topic_id)
            subscribers[topic_id] = (
                member_ids if known is None else sorted([*known, *member_ids], key=position.__getitem__)
            )
    target: dict[str, dict[UUID, frozenset[int]]] = {m.member_id: {} for m in ordered}
    for topic_id, subs in subscribers.items():
        count = partition_count(topic_partitions, topic_id)
        quota, extra = divmod(count, len(subs))
        for rank, member_id in enumerate(subs if quota else subs[:extra]):
            start = rank * quota + min(rank, extra)
            end = start + quota + (1 if rank < extra else 0)
            target[member_id][topic_id] = frozenset(range(start, end))
    return target


def assign(
    name: str,
    members: Sequence[MemberSpec],
    topic_partitions: Mapping[UUID, int],
    homogeneous: bool | None = None,
    topic_order: Sequence[UUID] | None = None,
) -> GroupAssignment:
    match name:
        case "uniform":
            return uniform(members, topic_partitions, homogeneous, topic_order)
        case "range":
            return range_(members, topic_partitions)
    raise PartitionAssignorError(f"unknown assignor {name!r}")


__all__ = [
    "ASSIGNORS",
    "RANGE",
    "UNIFORM",
    "GroupAssignment",
    "MemberSpec",
    "PartitionAssignorError",
    "SpecColumns",
    "assign",
    "java_hash_order",
    "java_string_hash",
    "java_uuid_hash",
    "range_",
    "uniform",
]
