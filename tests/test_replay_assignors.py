"""The client-side assignors against the vectors of Kafka's own tests
(clients/src/test/java/org/apache/kafka/clients/consumer/{Range,RoundRobin}AssignorTest.java)."""

from __future__ import annotations

import pytest

from proxy.wire.consumer_protocol import decode_assignment, encode_subscription
from replay.assignors import compute, encode, range_assign, roundrobin_assign
from replay.sticky import java_hash_order, sticky_user_data

T1, T2 = "topic1", "topic2"


def sub(*topics: str, instance: str | None = None) -> tuple[str | None, bytes]:
    return instance, encode_subscription(list(topics))


def test_range_two_consumers_two_topics_six_partitions() -> None:
    """RangeAssignorTest.testTwoConsumersTwoTopicsSixPartitions."""
    got = range_assign({"consumer1": sub(T1, T2), "consumer2": sub(T1, T2)}, {T1: 3, T2: 3})
    assert sorted(got["consumer1"]) == [(T1, 0), (T1, 1), (T2, 0), (T2, 1)]
    assert sorted(got["consumer2"]) == [(T1, 2), (T2, 2)]


def test_range_static_members_keep_their_ranges_when_a_dynamic_member_is_replaced() -> None:
    """RangeAssignorTest.testStaticMemberRangeAssignmentPersistent: static members sort by
    group.instance.id ahead of dynamic ones."""
    static = {f"consumer{i}": sub(T1, T2, instance=f"instance{i}") for i in (1, 2, 3)}
    expected = {
        "consumer1": [(T1, 0), (T1, 1), (T2, 0)],
        "consumer2": [(T1, 2), (T2, 1)],
        "consumer3": [(T1, 3), (T2, 2)],
    }
    first = range_assign({**static, "consumer4": sub(T1, T2)}, {T1: 5, T2: 4})
    assert {k: sorted(v) for k, v in first.items()} == {**expected, "consumer4": [(T1, 4), (T2, 3)]}
    second = range_assign({**static, "consumer5": sub(T1, T2)}, {T1: 5, T2: 4})
    assert {k: sorted(v) for k, v in second.items()} == {**expected, "consumer5": [(T1, 4), (T2, 3)]}


def test_range_follows_instance_ids_not_member_ids() -> None:
    """RangeAssignorTest.testStaticMemberRangeAssignmentPersistentAfterMemberIdChanges."""
    members = {"consumer1": "instance1", "consumer2": "instance2", "consumer3": "instance3"}
    before = range_assign({m: sub(T1, T2, instance=i) for m, i in members.items()}, {T1: 5, T2: 5})
    by_instance = {members[m]: sorted(p) for m, p in before.items()}
    assert by_instance == {
        "instance1": [(T1, 0), (T1, 1), (T2, 0), (T2, 1)],
        "instance2": [(T1, 2), (T1, 3), (T2, 2), (T2, 3)],
        "instance3": [(T1, 4), (T2, 4)],
    }
    swapped = {"consumer1": "instance1", "consumer5": "instance2", "consumer4": "instance3"}
    after = range_assign({m: sub(T1, T2, instance=i) for m, i in swapped.items()}, {T1: 5, T2: 5})
    assert {swapped[m]: sorted(p) for m, p in after.items()} == by_instance


def test_roundrobin_mixed_topics() -> None:
    """RoundRobinAssignorTest.testMultipleConsumersMixedTopics."""
    got = roundrobin_assign(
        {"consumer1": sub(T1), "consumer2": sub(T1, T2), "consumer3": sub(T1)}, {T1: 3, T2: 2}
    )
    assert got == {
        "consumer1": [(T1, 0)],
        "consumer2": [(T1, 1), (T2, 0), (T2, 1)],
        "consumer3": [(T1, 2)],
    }


def test_roundrobin_static_members_persist() -> None:
    """RoundRobinAssignorTest.testStaticMemberRoundRobinAssignmentPersistent."""
    static = {f"consumer{i}": sub(T1, T2, instance=f"instance{i}") for i in (1, 2, 3)}
    expected = {
        "consumer1": [(T1, 0), (T2, 1)],
        "consumer2": [(T1, 1), (T2, 2)],
        "consumer3": [(T1, 2)],
    }
    assert roundrobin_assign({**static, "consumer4": sub(T1, T2)}, {T1: 3, T2: 3}) == {
        **expected,
        "consumer4": [(T2, 0)],
    }
    assert roundrobin_assign({**static, "consumer5": sub(T1, T2)}, {T1: 3, T2: 3}) == {
        **expected,
        "consumer5": [(T2, 0)],
    }


def assign(protocol_name: str, subscriptions, topics) -> dict[str, bytes]:
    return encode(compute(protocol_name, subscriptions, topics))


def test_assign_by_protocol_name_encodes_the_consumer_protocol() -> None:
    subscriptions = {"a": sub(T1), "b": sub(T1)}
    ranged = {m: decode_assignment(b) for m, b in assign("range", subscriptions, {T1: 4}).items()}
    dealt = {m: decode_assignment(b) for m, b in assign("roundrobin", subscriptions, {T1: 4}).items()}
    assert ranged == {"a": ("topic1-0", "topic1-1"), "b": ("topic1-2", "topic1-3")}
    assert dealt == {"a": ("topic1-0", "topic1-2"), "b": ("topic1-1", "topic1-3")}
    # a topic the leader has no metadata for is skipped, as AbstractPartitionAssignor.assign does
    assert {m: decode_assignment(b) for m, b in assign("range", subscriptions, {}).items()} == {
        "a": (),
        "b": (),
    }


# --- sticky and cooperative-sticky (AbstractStickyAssignorTest, StickyAssignor user data) -------


def sticky_sub(topics: tuple[str, ...], owned: list[tuple[str, int]], generation: int) -> tuple[None, bytes]:
    """StickyAssignorTest.buildSubscriptionV2Above: user data, owned partitions and generation."""
    user_data = sticky_user_data(owned, generation)
    blob = encode_subscription(
        list(topics), 2, owned_partitions=tuple(owned), generation_id=generation, user_data=user_data
    )
    return None, blob


def coop_sub(topics: tuple[str, ...], owned: list[tuple[str, int]], generation: int) -> tuple[None, bytes]:
    return None, encode_subscription(list(topics), 2, owned_partitions=tuple(owned), generation_id=generation)


def test_sticky_two_consumers_two_topics_six_partitions() -> None:
    """AbstractStickyAssignorTest.testTwoConsumersTwoTopicsSixPartitions (no previous owners)."""
    subs = {"consumer1": sticky_sub((T1, T2), [], -1), "consumer2": sticky_sub((T1, T2), [], -1)}
    got = compute("sticky", subs, {T1: 3, T2: 3})
    assert got == {"consumer1": [(T1, 0), (T1, 2), (T2, 1)], "consumer2": [(T1, 1), (T2, 0), (T2, 2)]}


def test_sticky_owner_of_min_quota_gets_the_extra_partition() -> None:
    """testConsumerOwningMinQuotaExpectedMaxQuota."""
    subs = {
        "consumer1": sticky_sub((T1, T2), [(T1, 0), (T2, 1)], 1),
        "consumer2": sticky_sub((T1, T2), [(T1, 1), (T2, 2)], 1),
    }
    got = compute("sticky", subs, {T1: 2, T2: 3})
    assert got == {"consumer1": [(T1, 0), (T2, 1), (T2, 0)], "consumer2": [(T1, 1), (T2, 2)]}


@pytest.mark.parametrize("protocol", ["sticky", "cooperative-sticky"])
def test_sticky_all_under_min_quota_and_stale_generations(protocol: str) -> None:
    """testAllConsumersAreUnderMinQuota, testOwnedPartitionsAreInvalidatedForConsumerWithStaleGeneration."""
    make = sticky_sub if protocol == "sticky" else coop_sub
    subs = {
        "consumer1": make((T1, T2), [(T1, 0)], 1),
        "consumer2": make((T1, T2), [(T1, 1)], 1),
        "consumer3": make((T1, T2), [], 1),
    }
    got = compute(protocol, subs, {T1: 2, T2: 3})
    assert got == {"consumer1": [(T1, 0), (T2, 1)], "consumer2": [(T1, 1), (T2, 2)], "consumer3": [(T2, 0)]}
    owned = [("topic", 0), ("topic", 2), (T2, 1)]
    stale = {"consumer1": make(("topic", T2), owned, 10), "consumer2": make(("topic", T2), owned, 9)}
    got = compute(protocol, stale, {"topic": 3, T2: 3})
    assert set(got["consumer1"]) == set(owned)
    assert set(got["consumer2"]) == {("topic", 1), (T2, 0), (T2, 2)}


def test_cooperative_sticky_moves_a_partition_in_two_rebalances() -> None:
    """testMaxQuotaConsumerMoreThanNumExpectedMaxCapacityMembers: the plain sticky assignor moves
    topic2-0 to consumer3 at once; the cooperative one first leaves it unassigned (it is being
    revoked from consumer1), then gives it to consumer3 when the members rejoin."""
    owned = {"consumer1": [(T1, 0), (T2, 0)], "consumer2": [(T1, 1), (T2, 1)], "consumer3": []}
    eager = compute("sticky", {m: sticky_sub((T1, T2), o, 1) for m, o in owned.items()}, {T1: 2, T2: 2})
    assert eager == {"consumer1": [(T1, 0)], "consumer2": [(T1, 1), (T2, 1)], "consumer3": [(T2, 0)]}
    first = compute(
        "cooperative-sticky", {m: coop_sub((T1, T2), o, 1) for m, o in owned.items()}, {T1: 2, T2: 2}
    )
    assert first == {"consumer1": [(T1, 0)], "consumer2": [(T1, 1), (T2, 1)], "consumer3": []}
    second = compute(
        "cooperative-sticky", {m: coop_sub((T1, T2), o, 2) for m, o in first.items()}, {T1: 2, T2: 2}
    )
    assert second == eager


def test_partition_claimed_twice_in_one_generation_is_reassigned() -> None:
    """testPartitionsTransferringOwnershipIncludeThePartitionClaimedByMultipleConsumersInSameGeneration."""
    subs = {
        "consumer1": sticky_sub(("topic",), [("topic", 0), ("topic", 1)], 1),
        "consumer2": sticky_sub(("topic",), [("topic", 0), ("topic", 2)], 1),
        "consumer3": sticky_sub(("topic",), [], 1),
    }
    got = compute("sticky", subs, {"topic": 3})
    assert got == {"consumer1": [("topic", 1)], "consumer2": [("topic", 2)], "consumer3": [("topic", 0)]}


def test_java_hash_order_matches_java_util_hashmap() -> None:
    """Iteration orders printed by java.util.HashMap for these keys (String.hashCode buckets)."""
    assert java_hash_order(["b", "a", "c"]) == ["a", "b", "c"]  # buckets 2, 1, 3
    # "Aa" and "BB" share String.hashCode 2112: one bucket, insertion order
    assert java_hash_order(["BB", "Aa"]) == ["BB", "Aa"]
    assert java_hash_order(["Aa", "BB"]) == ["Aa", "BB"]


def test_range_as_a_librdkafka_leader_orders_mixed_members_by_member_id() -> None:
    """rd_kafka_group_member_cmp: two static members by instance id, any other pair by member id,
    so a dynamic member whose id (`<client.id>-<uuid>`) sorts first takes the first range; a Java
    leader puts it last (MemberInfo). Seen in the corpus' confluent-kafka mixed group."""
    members = {
        "grp-a-1111": sub(T1, instance="grp-a"),
        "grp-b-2222": sub(T1, instance="grp-b"),
        "client-c-3333": sub(T1),
    }
    java = compute("range", members, {T1: 3}, "apache-kafka-java/3.9.2")
    rdkafka = compute("range", members, {T1: 3}, "confluent-kafka-python/2.16.1-rdkafka-2.16.0")
    assert java == {"grp-a-1111": [(T1, 0)], "grp-b-2222": [(T1, 1)], "client-c-3333": [(T1, 2)]}
    assert rdkafka == {"grp-a-1111": [(T1, 1)], "grp-b-2222": [(T1, 2)], "client-c-3333": [(T1, 0)]}
    assert compute("range", members, {T1: 3}) == java  # unknown clients: Java's order
