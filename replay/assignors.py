"""The consumer's partition assignors, ported from Kafka's clients (the leader runs them).

A replayed member assigns with the assignor its group selected (the JoinGroup protocol name the
recorded client chose), computed the way the Java client computes it, so the reference run and a
live broker run of the same members agree with what the recorded clients did:

- `range`: `RangeAssignor.assignPartitions` (clients/.../consumer/RangeAssignor.java), without
  racks: per topic, the subscribed members sorted by `MemberInfo.compareTo` (static members by
  group.instance.id first, then dynamic members by member id) take contiguous ranges, the first
  `partitions % members` one partition more. A librdkafka leader orders them by its own
  comparator instead (`range_member_key`), which the recorded client software tells.
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
from functools import cmp_to_key, lru_cache
from typing import Any, Final

from proxy.wire.consumer_protocol import decode_subscription_topics, encode_assignment

Subscriptions = Mapping[str, tuple[str | None, bytes]]  # member id -> (group.instance.id, metadata)
Topics = Mapping[str, int]  # topic -> partition count
Assignment = dict[str, list[tuple[str, int]]]  # member id -> partitions in assignment order


def member_order(member_id: str, group_instance_id: str | None) -> tuple[int, str]:
    """AbstractPartitionAssignor.MemberInfo.compareTo: static members (by instance id) before
    dynamic ones (by member id)."""
    return (0, group_instance_id) if group_instance_id else (1, member_id)


MemberKey = Callable[[tuple[str, str | None]], Any]  # (member id, group.instance.id) -> sort key


def _librdkafka_member_cmp(a: tuple[str, str | None], b: tuple[str, str | None]) -> int:
    """librdkafka's rd_kafka_group_member_cmp (src/rdkafka_assignor.c): two static members by
    group.instance.id, any other pair by member id (byte order, as rd_kafkap_str_cmp). Unlike
    Java's MemberInfo, a dynamic member is not put after the static ones: Kafka names a static
    member `<instance id>-<uuid>` and a dynamic one `<client.id>-<uuid>`, so where they sort
    depends on those names."""
    (a_id, a_instance), (b_id, b_instance) = a, b
    left, right = (a_instance, b_instance) if a_instance and b_instance else (a_id, b_id)
    return (left > right) - (left < right)


def range_member_key(client_software: str | None) -> MemberKey:
    """How the recorded leader's client orders the members of a topic in its range assignor:
    librdkafka (confluent-kafka-python/-go/-dotnet report `...-rdkafka-<version>` or
    `librdkafka`, KIP-511) with rd_kafka_group_member_cmp (rd_kafka_range_assignor_assign_cb
    sorts each topic's members with it); the Java client, kafka-python and unknown clients with
    MemberInfo.compareTo.

    Not modelled: kafka-python's own range assignor differs from MemberInfo in two ways, read
    in its releases: up to 2.2.x it sorts a topic's members by member id only (as aiokafka);
    from 2.3.0 (3.0.12 still) it means to put static members first, but splits them from the
    dynamic ones with `itertools.groupby` over the unsorted JoinGroup list and keeps the last
    run of each kind, so when static and dynamic members are listed interleaved the others get
    nothing. A replayed kafka-python leader assigns as Java's; the demo's kafka-python members
    assign that way too (demo.consumer_main.kafka_python_range_assignor)."""
    if client_software and "rdkafka" in client_software.lower():
        return cmp_to_key(_librdkafka_member_cmp)
    return lambda member: member_order(*member)


@lru_cache(maxsize=4096)
def subscribed_topics(metadata: bytes) -> tuple[str, ...]:
    """A subscription's topics (members of one group mostly send the same bytes: cached)."""
    try:
        return decode_subscription_topics(metadata)
    except ValueError:
        return ()


def range_assign(
    subscriptions: Subscriptions, topics: Topics, member_key: MemberKey | None = None
) -> Assignment:
    """RangeAssignor.assignPartitions without rack awareness (assignRanges per topic); the
    members of a topic in `member_key` order (`range_member_key`; default Java's MemberInfo)."""
    key = member_key or range_member_key(None)
    assignment: Assignment = {member_id: [] for member_id in subscriptions}
    consumers_per_topic: dict[str, list[tuple[str, str | None]]] = {}
    for member_id, (instance_id, metadata) in subscriptions.items():
        for topic in subscribed_topics(metadata):
            consumers_per_topic.setdefault(topic, []).append((member_id, instance_id))
    for topic, members in consumers_per_topic.items():
        count = topics.get(topic, 0)
        if count <= 0:
            continue
        consumers = sorted(members, key=key)
        per_consumer, extra = divmod(count, len(consumers))
        start = 0
        for index, (member_id, _) in enumerate(consumers):
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


def encode(assignment: Assignment, user_data: bytes | None = None) -> dict[str, bytes]:
    """ConsumerProtocolAssignment bytes per member; `user_data` is what a custom assignor adds
    (the built-in ones add none, which is what lets Kafka upgrade the group online)."""
    out: dict[str, bytes] = {}
    for member_id, partitions in assignment.items():
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        out[member_id] = encode_assignment(by_topic, user_data=user_data)
    return out


STICKY_PROTOCOLS: Final = ("sticky", "cooperative-sticky")


def compute(
    protocol_name: str, subscriptions: Subscriptions, topics: Topics, client_software: str | None = None
) -> Assignment:
    """The assignment the group's selected assignor gives, as the leader's client computes it
    (`client_software`, KIP-511 `name/version`; only `range` differs between clients so far).

    An assignor we do not know (a custom `partition.assignment.strategy`) is replaced by `range`,
    the Java client's first default; the events carry the protocol name, so it shows.
    """
    if protocol_name in STICKY_PROTOCOLS:
        from replay.sticky import sticky_assign

        sticky = sticky_assign(protocol_name, subscriptions, topics)
        return sticky if sticky is not None else roundrobin_assign(subscriptions, topics)
    if protocol_name == "roundrobin":
        return roundrobin_assign(subscriptions, topics)
    return range_assign(subscriptions, topics, range_member_key(client_software))


__all__ = [
    "ASSIGNORS",
    "STICKY_PROTOCOLS",
    "compute",
    "encode",
    "member_order",
    "range_assign",
    "range_member_key",
    "roundrobin_assign",
]
