"""The iteration order of the `HashMap<Uuid, Set<Integer>>` a uniform assignor builds per member.

A member's target is written as a ConsumerGroupTargetAssignmentMember record in the order the
assignor's map iterates (GroupCoordinatorRecordHelpers.newConsumerGroupTargetAssignmentRecord walks
`partitions.entrySet()`), and read back by Assignment.fromRecord (`Collectors.toMap`: a default
HashMap filled in record order). Two topics in the same bucket of that map are therefore walked in
record order, and the next UniformHomogeneousAssignmentBuilder.maybeRevokePartitions keeps the
first one's partitions and revokes the other's (Kafka 4.0.1 and 4.3.1 alike).

The record order is the assignor map's, which its history decides (java.util.HashMap, JDK 17):
- `AssignorHelpers.deepCopyAssignment(old)`: `new HashMap<>(old.size())`, then `put` of each entry
  in `old`'s order; `put` appends to a bucket's chain and resizes after an insert that makes the
  size exceed the threshold;
- removals (a topic revoked entirely or no longer subscribed) leave the table as it is;
- `assignRemainingPartitions`: `computeIfAbsent(topicId, ...)` once per partition handed out. It
  resizes BEFORE looking when the size already exceeds the threshold, and inserts a new key at
  the HEAD of its bucket's chain (`tab[i] = newNode(hash, key, v, first)`), so topics added to one
  bucket come out in the reverse of the order they were handed out.

A table never shrinks; a resize splits each chain keeping its relative order. So the iteration
order is (bucket in the final table, position in the chain), and the position follows one counter:
appended keys take increasing numbers, keys pushed at the head decreasing ones. Not modelled:
treeified bins (8 topics in one bucket).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import TypeVar
from uuid import UUID

from replay.coordinator.hashorder import MemberMapKind, capacity_for, improved_hash

K = TypeVar("K", str, UUID)


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


@lru_cache(maxsize=1 << 12)
def java_uuid_hash(value: UUID) -> int:
    """org.apache.kafka.common.Uuid.hashCode: (int)(h >> 32) ^ (int) h with h = msb ^ lsb."""
    h = (value.int >> 64) ^ (value.int & 0xFFFFFFFFFFFFFFFF)
    return _int32((h >> 32) ^ h)


@lru_cache(maxsize=1 << 12)
def uuid_spread(key: UUID) -> int:
    """HashMap.hash(key): `h ^ (h >>> 16)`, unsigned."""
    h = java_uuid_hash(key) & 0xFFFFFFFF
    return h ^ (h >> 16)


def _table_size_for(capacity: int) -> int:
    """HashMap.tableSizeFor: the power of two at or above `capacity` (1 for 0)."""
    size = 1
    while size < capacity:
        size <<= 1
    return size


class JavaUuidMapOrder:
    """The keys of a java.util.HashMap<Uuid, ?> and the order it iterates them in."""

    __slots__ = ("capacity", "counter", "position", "size", "threshold")

    def __init__(self, initial_capacity: int | None = None) -> None:
        """`new HashMap<>(initial_capacity)`, or `new HashMap<>()` for None."""
        self.capacity = 0  # the table is allocated by the first insert
        self.threshold = 0 if initial_capacity is None else _table_size_for(initial_capacity)
        self.size = 0
        self.counter = 0
        self.position: dict[UUID, int] = {}

    def _resize(self) -> None:
        if self.capacity > 0:
            old = self.capacity
            self.capacity = old << 1
            # oldCap >= DEFAULT_INITIAL_CAPACITY doubles the threshold, else 0.75 of the new table
            self.threshold = self.threshold << 1 if old >= 16 else self.capacity * 3 // 4
        else:
            self.capacity = self.threshold if self.threshold > 0 else 16
            self.threshold = self.capacity * 3 // 4

    def put(self, key: UUID) -> None:
        """HashMap.put (putVal): a new key is appended to its bucket's chain."""
        if self.capacity == 0:
            self._resize()
        if key in self.position:
            return
        self.counter += 1
        self.position[key] = self.counter
        self.size += 1
        if self.size > self.threshold:
            self._resize()

    def compute_if_absent(self, key: UUID, calls: int = 1) -> None:
        """`calls` HashMap.computeIfAbsent for one key: a new key goes to the head of its chain.
        Only the first two calls can change anything (the second may still resize)."""
        for _ in range(min(calls, 2)):
            if self.size > self.threshold or self.capacity == 0:
                self._resize()
            if key not in self.position:
                self.counter += 1
                self.position[key] = -self.counter
                self.size += 1

    def remove(self, key: UUID) -> None:
        if self.position.pop(key, None) is not None:
            self.size -= 1

    def order(self) -> list[UUID]:
        mask = self.capacity - 1
        position = self.position
        return sorted(position, key=lambda k: (uuid_spread(k) & mask, position[k]))


def record_order(
    previous: Sequence[UUID] | None, kept: Iterable[UUID], handed_out: Sequence[tuple[UUID, int]]
) -> list[UUID]:
    """The record order of a member's new target: `previous` (the topics of the target it had,
    in the order Kafka iterates it; None when the assignor kept no copy of it, i.e. built the map
    from nothing) deep-copied, reduced to `kept`, then `handed_out` (topic, partitions) pieces in
    the order assignRemainingPartitions gave them."""
    table = JavaUuidMapOrder(len(previous) if previous is not None else 0)
    if previous is not None:
        for topic_id in previous:
            table.put(topic_id)
        still = set(kept)
        for topic_id in previous:
            if topic_id not in still:
                table.remove(topic_id)
    for topic_id, count in handed_out:
        table.compute_if_absent(topic_id, count)
    return table.order()


@lru_cache(maxsize=1 << 16)
def _string_spread(key: str) -> int:
    """hashorder.improved_hash, unsigned and cached (a target orders every member id)."""
    return improved_hash(key) & 0xFFFFFFFF


def java_hash_order(keys: Iterable[K]) -> list[K]:
    """`keys` (in insertion order) in the order a java.util.HashMap/HashSet holding them iterates.

    Sorted on one int per key, bucket << 32 | insertion index (a target assignment orders every
    member this way)."""
    ordered = list(keys)
    if len(ordered) < 2:
        return ordered
    mask = capacity_for(MemberMapKind.JAVA_HASH_MAP, len(ordered)) - 1
    if isinstance(ordered[0], UUID):
        decorated = [((uuid_spread(k) & mask) << 32) | i for i, k in enumerate(ordered)]
    else:
        decorated = [((_string_spread(str(k)) & mask) << 32) | i for i, k in enumerate(ordered)]
    decorated.sort()
    return [ordered[d & 0xFFFFFFFF] for d in decorated]


def in_record_order(
    grown: dict[UUID, frozenset[int]],
    previous: Sequence[UUID] | None,
    pieces: Sequence[tuple[UUID, int]],
) -> dict[UUID, frozenset[int]]:
    """`grown` (a member's new target) in the order Kafka's assignor map iterates it: the record
    order (maporder.record_order over `previous`, the old target deep-copied, and `pieces`)."""
    if len(grown) < 2:
        return grown
    return {topic_id: grown[topic_id] for topic_id in record_order(previous, grown, pieces)}


__all__ = [
    "JavaUuidMapOrder",
    "in_record_order",
    "java_hash_order",
    "java_uuid_hash",
    "record_order",
    "uuid_spread",
]
