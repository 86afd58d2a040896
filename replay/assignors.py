"""The consumer's partition assignors, ported from Kafka's clients (the leader runs them).

A replayed member assigns with the assignor its group selected (the JoinGroup protocol name the
recorded client chose), computed the way the Java client computes it, so the reference run and a
live broker run of the same members agree with what the recorded clients did:

- `range`: `RangeAssignor.assignPartitions` (clients/.../consumer/RangeAssignor.java), without
  racks: per topic, the subscribed members sorted by `MemberInfo.compareTo` (static members by
  group.instance.id first, then dynamic members by member id) take contiguous ranges, the first
  `partitions % members` one partition more.
- `roundrobin`: `RoundRobinAssignor.assign`: every subscribed partition, topics sorted, dealt in
  turn to the members in `MemberInfo` order, skipping members not subscribed to the topic.
- `sticky` and `cooperative-sticky`: `AbstractStickyAssignor` (see `replay.sticky`).

Inputs are what the leader has: each member's (group.instance.id, subscription metadata bytes)
from the JoinGroup response, and the partition count of each topic (the client's metadata; a
topic without partitions is skipped, as AbstractPartitionAssignor.assign skips topics without
metadata). Output: member id -> ConsumerProtocolAssignment bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Final

from proxy.wire.consumer_protocol import decode_subscription_topics, encode_assignment

Subscriptions = Mapping[str, tuple[str | None, bytes]]  # member id -> (group.instance.id, metadata)
Topics = Mapping[str, int]  # topic -> partition count
Assignment = dict[str, list[tuple[str, int]]]  # member id -> partitions in assignment order


def member_order(member_id: str, group_instance_id: str | None) -> tuple[int, str]:
    """AbstractPartitionAssignor.MemberInfo.compareTo: static members (by instance id) before
    dynamic ones (by member id)."""
    return (0, group_instance_id) if group_instance_id else (1, member_id)


@lru_cache(maxsize=4096)
def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """A subscription's topics (members of one group mostly send the same bytes: cached)."""
    try:
        return decode_subscription_topics(metadata)
    except ValueError:
        return ()


def range_assign(subscriptions: Subscriptions, topics: Topics) -> Assignment:
    """RangeAssignor.assignPartitions without rack awareness (assignRanges per topic)."""
    assignment: Assignment = {member_id: [] for member_id in subscriptions}
    consumers_per_topic: dict[str, list[tuple[tuple[int, str], str]]] = {}
    for member_id, (instance_id, metadata) in subscriptions.items():
        for topic in subscribed_topics(metadata):
            consumers_per_topic.setdefault(topic, []).append(
                (member_order(member_id, instance_id), member_id)
            )
    for topic, consumers in consumers_per_topic.items():
        count = topics.get(topic, 0)
        if count <= 0:
            continue
        consumers.sort()
        per_consumer, extra = divmod(count, len(consumers))
        start = 0
        for index, (_, member_id) in enumerate(consumers):
            size = per_consumer + (1 if index < extra else 0)
            assignment[member_id].extend((topic, p) for p in range(start, start + size))
            start += size
    return assignment


def roundrobin_assign(subscriptions: Subscriptions, topics: Topics) -> Assignment:
    """RoundRobinAssignor.assign: a CircularIterator over the sorted members."""
    assignment: Assignment = {member_id: [] for member_id in subscriptions}
    subscribed = {
        member_id: set(subscribed_topics(metadata)) for member_id, (_, metadata) in subscriptions.items()
    }
    members = [m for _, m in sorted((member_order(m, i), m) for m, (i, _) in subscriptions.items())]
    if not members:
        return assignment
    all_topics = sorted(set().union(*subscribed.values()))
    position = 0
    for topic in all_topics:
        for partition in range(topics.get(topic, 0)):
            while topic not in subscribed[members[position % len(members)]]:
                position += 1
            assignment[members[position % len(members)]].append((topic, partition))
            position += 1
    return assignment


ASSIGNORS: Final[dict[str, Callable[[Subscriptions, Topics], Assignment]]] = {
    "range": range_assign,
    "roundrobin": roundrobin_assign,
}


def encode(assignment: Assignment) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    for member_id, partitions in assignment.items():
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        out[member_id] = encode_assignment(by_topic)
    return out


STICKY_PROTOCOLS: Final = ("sticky", "cooperative-sticky")


def compute(protocol_name: str, subscriptions: Subscriptions, topics: Topics) -> Assignment:
    """The assignment the group's selected assignor gives.

    An assignor we do not know (a custom `partition.assignment.strategy`) is replaced by `range`,
    the Java client's first default; the events carry the protocol name, so it shows.
    """
    if protocol_name in STICKY_PROTOCOLS:
        from replay.sticky import sticky_assign

        sticky = sticky_assign(protocol_name, subscriptions, topics)
        return sticky if sticky is not None else roundrobin_assign(subscriptions, topics)
    return ASSIGNORS.get(protocol_name, range_assign)(subscriptions, topics)


def assign(protocol_name: str, subscriptions: Subscriptions, topics: Topics) -> dict[str, bytes]:
    """`compute`, encoded per member as ConsumerProtocolAssignment bytes."""
    return encode(compute(protocol_name, subscriptions, topics))


__all__ = [
    "ASSIGNORS",
    "STICKY_PROTOCOLS",
    "assign",
    "compute",
    "encode",
    "member_order",
    "range_assign",
    "roundrobin_assign",
]
