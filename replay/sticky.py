"""`sticky` and `cooperative-sticky`: Kafka's AbstractStickyAssignor, ported for replay's leaders.

Source: clients/.../consumer/internals/AbstractStickyAssignor.java (assignPartitions,
allSubscriptionsEqual, ConstrainedAssignmentBuilder), StickyAssignor.java (previous assignment
and generation in the subscription's user data) and CooperativeStickyAssignor.java (owned
partitions and generation in the subscription, adjustAssignment: a partition moving between
members is left unassigned this round; the revoking member rejoins, so the next round gives it).

Ported: the constrained path, taken when every member subscribes to the same topics (the usual
group), without rack awareness (replayed members send no rack). Where Java iterates a HashMap,
the same order is reproduced (`java_hash_order`). Not ported: GeneralAssignmentBuilder (members
with different subscriptions); for those groups the leader deals partitions round robin to the
subscribers (`replay.assignors.roundrobin_assign`), and `STICKY_GENERAL_CASE` says so.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Final

from proxy.wire.codec import CodecError
from proxy.wire.consumer_protocol import Subscription, decode_subscription
from replay.coordinator.hashorder import MemberMapKind, hash_order

TopicPartition = tuple[str, int]
DEFAULT_GENERATION: Final = -1
STICKY_GENERAL_CASE: Final = "round robin (AbstractStickyAssignor's general case is not ported)"


# ---------------------------------------------------------------------------------------------
# Java HashMap iteration order (String keys inserted one by one into `new HashMap<>()`)


def java_hash_order(keys: Iterable[str]) -> list[str]:
    """The order a java.util.HashMap iterates `keys` inserted in this order: by bucket
    (hash ^ hash >>> 16, masked by the table size; the table starts at 16 and doubles when more
    than 3/4 full), then insertion order within a bucket (`replay.coordinator.hashorder`)."""
    return hash_order(MemberMapKind.JAVA_HASH_MAP, dict.fromkeys(keys))


# ---------------------------------------------------------------------------------------------
# Member data: what each assignor reads from a subscription


def _sticky_user_data(data: bytes | None) -> tuple[list[TopicPartition], int | None]:
    """StickyAssignor.deserializeTopicPartitionAssignment: STICKY_ASSIGNOR_USER_DATA_V1
    (previous_assignment: [topic: STRING, partitions: [INT32]], generation: INT32), else V0
    (without generation), else nothing with DEFAULT_GENERATION. Kafka's own Struct schema for
    this blob lives in the assignor, not in the message JSON kio is generated from."""
    if not data:
        return [], None
    try:
        offset = 0
        (topics,) = struct.unpack_from(">i", data, offset)
        offset += 4
        partitions: list[TopicPartition] = []
        for _ in range(max(topics, 0)):
            (length,) = struct.unpack_from(">h", data, offset)
            offset += 2
            topic = data[offset : offset + length].decode()
            offset += length
            (count,) = struct.unpack_from(">i", data, offset)
            offset += 4
            for index in struct.unpack_from(f">{max(count, 0)}i", data, offset):
                partitions.append((topic, index))
            offset += 4 * max(count, 0)
        if len(data) - offset >= 4:
            return partitions, struct.unpack_from(">i", data, offset)[0]
        return partitions, None
    except (struct.error, UnicodeDecodeError):
        return [], DEFAULT_GENERATION


def sticky_user_data(partitions: Iterable[TopicPartition], generation_id: int) -> bytes:
    """StickyAssignor.serializeTopicPartitionAssignment (USER_DATA_V1), topics in first-seen order."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    out = [struct.pack(">i", len(by_topic))]
    for topic, indexes in by_topic.items():
        name = topic.encode()
        out.append(struct.pack(f">h{len(name)}si{len(indexes)}i", len(name), name, len(indexes), *indexes))
    out.append(struct.pack(">i", generation_id))
    return b"".join(out)


def cooperative_user_data(generation_id: int) -> bytes:
    """CooperativeStickyAssignor.subscriptionUserData: COOPERATIVE_STICKY_ASSIGNOR_USER_DATA_V0."""
    return struct.pack(">i", generation_id)


def member_data(protocol: str, subscription: Subscription) -> tuple[list[TopicPartition], int | None]:
    """(owned partitions, generation) as `StickyAssignor.memberData` or
    `CooperativeStickyAssignor.memberData` read them."""
    if protocol == "sticky":
        return _sticky_user_data(subscription.user_data)
    if subscription.generation_id is not None:
        return list(subscription.owned_partitions), subscription.generation_id
    generation: int | None = None
    if subscription.user_data is not None:
        generation = (
            struct.unpack(">i", subscription.user_data[:4])[0]
            if len(subscription.user_data) >= 4
            else DEFAULT_GENERATION
        )
    return list(subscription.owned_partitions), generation


# ---------------------------------------------------------------------------------------------
# The constrained assignment


class _Iterator:
    """java.util.Iterator over a list, with remove() of the element last returned."""

    def __init__(self, items: list[str]) -> None:
        self.items, self.index, self.last = items, 0, -1

    def has_next(self) -> bool:
        return self.index < len(self.items)

    def next(self) -> str:
        self.last, self.index = self.index, self.index + 1
        return self.items[self.last]

    def remove(self) -> None:
        del self.items[self.last]
        self.index, self.last = self.last, -1


def _constrained(  # noqa: C901 - follows Kafka's method line by line, to be checked against it
    topics: Mapping[str, int],
    owned_by: dict[str, list[TopicPartition]],
    doubly_claimed: set[TopicPartition],
) -> tuple[dict[str, list[TopicPartition]], dict[TopicPartition, str]]:
    """ConstrainedAssignmentBuilder.build without racks: (assignment, partitions transferring
    ownership). `owned_by` iterates in Java's HashMap order."""
    total = sum(topics.values())
    members = len(owned_by)
    min_quota, extra = divmod(total, members)
    max_quota = min_quota + (1 if extra else 0)
    expected_over, current_over = extra, 0
    assignment: dict[str, list[TopicPartition]] = {member: [] for member in owned_by}
    assigned: set[TopicPartition] = set()
    maybe_revoked: dict[TopicPartition, str] = {}
    under: list[str] = []  # unfilledMembersWithUnderMinQuotaPartitions
    exactly: list[str] = []  # unfilledMembersWithExactlyMinQuotaPartitions
    transferring: dict[TopicPartition, str] = {}
    for member, claimed in owned_by.items():  # assignOwnedPartitions
        owned = sorted(claimed, key=lambda tp: (tp[1], tp[0]))
        owned = [tp for tp in owned if tp not in doubly_claimed]
        if len(owned) < min_quota:
            assignment[member] += owned
            assigned.update(owned)
            under.append(member)
            continue
        if len(owned) >= max_quota and current_over < expected_over:
            keep = max_quota
            current_over += 1
            if current_over == expected_over:
                exactly.clear()
        else:
            keep = min_quota
            if current_over < expected_over:
                exactly.append(member)
        assignment[member] += owned[:keep]
        assigned.update(owned[:keep])
        for tp in owned[keep:]:
            maybe_revoked[tp] = member
    unassigned = [
        (topic, index)
        for topic in sorted(topics)
        for index in range(topics[topic])
        if (topic, index) not in assigned
    ]
    under.sort()
    exactly.sort()

    def give(tp: TopicPartition, member: str) -> int:  # assignNewPartition
        assignment[member].append(tp)
        if (tp in maybe_revoked and maybe_revoked[tp] != member) or tp in doubly_claimed:
            transferring[tp] = member
        return len(assignment[member])

    cursor = _Iterator(under)
    for tp in unassigned:  # assignRoundRobin
        if cursor.has_next():
            member = cursor.next()
        elif not under and not exactly:
            raise AssertionError("no more unfilled consumers to be assigned")  # a bug, as in Java
        elif not under:
            member = exactly.pop(0)
        else:
            cursor = _Iterator(under)
            member = cursor.next()
        count = give(tp, member)
        if count == min_quota:
            cursor.remove()
            exactly.append(member)
        elif count == max_quota:
            current_over += 1
    return assignment, transferring


def sticky_assign(  # noqa: C901 - follows Kafka's allSubscriptionsEqual path line by line
    protocol: str, subscriptions: Mapping[str, tuple[str | None, bytes]], topics: Mapping[str, int]
) -> dict[str, list[TopicPartition]] | None:
    """AbstractStickyAssignor.assignPartitions (+ CooperativeStickyAssignor.adjustAssignment);
    None when the members' subscriptions differ (the general case, not ported)."""
    decoded: dict[str, Subscription] = {}
    for member_id, (_, metadata) in subscriptions.items():
        try:
            decoded[member_id] = decode_subscription(metadata)
        except CodecError:
            decoded[member_id] = Subscription((), None, (), None, 0)
    order = java_hash_order(decoded)  # subscriptions is a HashMap in ConsumerCoordinator
    known = {topic for topic, count in topics.items() if count > 0}
    subscribed = {topic for s in decoded.values() for topic in s.topics}
    partitions = {topic: topics[topic] for topic in subscribed & known}
    if len({frozenset(s.topics) for s in decoded.values()}) > 1:
        return None
    owned_by: dict[str, list[TopicPartition]] = {}
    owner: dict[TopicPartition, str] = {}
    doubly_claimed: set[TopicPartition] = set()
    for member_id in order:  # allSubscriptionsEqual
        claimed, generation = member_data(protocol, decoded[member_id])
        generation = DEFAULT_GENERATION if generation is None else generation
        mine: list[TopicPartition] = []
        owned_by[member_id] = mine
        for tp in claimed:
            if tp[0] not in partitions:
                continue
            other = owner.get(tp)
            if other is None:
                mine.append(tp)
                owner[tp] = member_id
                continue
            other_generation = decoded[other].generation_id
            other_generation = DEFAULT_GENERATION if other_generation is None else other_generation
            if generation == other_generation:
                doubly_claimed.add(tp)
                owned_by[other].remove(tp)
                owner[tp] = member_id
            elif generation > other_generation:
                mine.append(tp)
                owned_by[other].remove(tp)
                owner[tp] = member_id
    if not owned_by:
        return {}
    assignment, transferring = _constrained(partitions, owned_by, doubly_claimed)
    if protocol == "cooperative-sticky":
        for tp, member_id in transferring.items():
            assignment[member_id].remove(tp)
    return assignment


__all__ = [
    "STICKY_GENERAL_CASE",
    "cooperative_user_data",
    "java_hash_order",
    "member_data",
    "sticky_assign",
    "sticky_user_data",
]
