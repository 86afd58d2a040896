"""The uniform assignor's fast homogeneous builder (counts and slices, assignments kept as the
very objects when nothing changes) against the partition-by-partition port of Kafka's
UniformHomogeneousAssignmentBuilder it replaced (tests/support/reference_uniform.py), over
random groups: fresh, settled, over quota, with unsubscribed and vanished topics, overlapping
or out-of-range current assignments, and more members than partitions."""

from __future__ import annotations

import gc
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.coordinator.consumer.assignors import (
    MemberSpec,
    PartitionAssignorError,
    _topic_order,
    _uniform_homogeneous,
    java_hash_order,
    java_string_hash,
    java_uuid_hash,
    uniform,
)
from tests.support.reference_uniform import reference_uniform_homogeneous

TOPICS = [uuid.UUID(int=(i + 1) * 0x1F3D5B79) for i in range(6)]


_Group = tuple[list[MemberSpec], dict[uuid.UUID, int]]


@st.composite
def _groups(draw: st.DrawFn) -> _Group:
    counts = {t: draw(st.integers(0, 12)) for t in TOPICS[: draw(st.integers(1, len(TOPICS)))]}
    subscribed = frozenset(draw(st.lists(st.sampled_from(TOPICS), min_size=1, max_size=4, unique=True)))
    member_count = draw(st.integers(1, 14))
    members = []
    for index in range(member_count):
        current: dict[uuid.UUID, frozenset[int]] = {}
        for topic_id in draw(st.lists(st.sampled_from(TOPICS), max_size=3, unique=True)):
            # the subscription's very object, or an equal copy (a topic id decoded elsewhere)
            key = topic_id if draw(st.booleans()) else uuid.UUID(int=topic_id.int)
            current[key] = frozenset(draw(st.lists(st.integers(0, 13), max_size=8)))
        members.append(MemberSpec(f"m{index:02d}-{draw(st.integers(0, 99))}", None, subscribed, current))
    return members, counts


def _outcome(run: object) -> object:
    try:
        return run()  # type: ignore[operator]
    except PartitionAssignorError:
        return "PartitionAssignorError"


@settings(max_examples=400, deadline=None)
@given(_groups())
def test_fast_uniform_equals_the_partition_by_partition_port(group: _Group) -> None:
    members, counts = group
    fast = _outcome(lambda: uniform(members, counts, True))
    reference = _outcome(lambda: reference_uniform_homogeneous(members, counts))
    assert fast == reference


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 40), st.integers(1, 5), st.integers(0, 30), st.data())
def test_settled_groups_rebalance_like_the_reference(
    member_count: int, topic_count: int, partitions: int, data: st.DataObject
) -> None:
    """A realistic path: assign, then members join and leave, each time from the last target
    (disjoint, in range), the shape a rolling restart produces."""
    counts = {t: partitions + i for i, t in enumerate(TOPICS[:topic_count])}
    subscribed = frozenset(counts)
    ids = [f"member-{i}" for i in range(member_count)]
    target: dict[str, dict[uuid.UUID, frozenset[int]]] = {}
    for step in range(4):
        members = [MemberSpec(m, None, subscribed, target.get(m, {})) for m in ids]
        fast = uniform(members, counts, True)
        assert fast == reference_uniform_homogeneous(members, counts)
        target = dict(fast)
        if data.draw(st.booleans()) and len(ids) > 1:
            ids.pop(data.draw(st.integers(0, len(ids) - 1)))
        else:
            ids.insert(data.draw(st.integers(0, len(ids))), f"joined-{step}")


def _straightforward_hash_order(keys: list[Any]) -> list[Any]:
    """java.util.HashMap iteration: by bucket of the final table, ties in insertion order."""
    capacity = 16
    while len(keys) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: Any) -> int:
        h = (java_uuid_hash(key) if isinstance(key, uuid.UUID) else java_string_hash(key)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (capacity - 1)

    return [key for _, _, key in sorted((bucket(k), i, k) for i, k in enumerate(keys))]


@given(
    st.one_of(
        st.lists(st.text(max_size=12), max_size=60, unique=True),
        st.lists(st.uuids(), max_size=60, unique=True),
    )
)
def test_hash_order_sorts_like_the_bucket_walk(keys: list[Any]) -> None:
    expected = keys if len(keys) < 2 else _straightforward_hash_order(keys)
    assert java_hash_order(keys) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 60),
    st.lists(st.integers(0, 40), min_size=1, max_size=len(TOPICS)),
    st.data(),
)
def test_a_fresh_group_takes_the_fresh_path_to_the_same_assignment(
    member_count: int, partition_counts: list[int], data: st.DataObject
) -> None:
    """Nobody holds anything (a new group): `uniform` goes through `_uniform_fresh`, which must
    give what the general builder and the partition-by-partition port give - the very same
    empty-assignment object for a member whose quota is 0 included."""
    counts = dict(zip(TOPICS, partition_counts, strict=False))
    subscribed = frozenset(data.draw(st.lists(st.sampled_from(sorted(counts)), min_size=1, unique=True)))
    members = [MemberSpec(f"m{i:03d}", None, subscribed, {}) for i in range(member_count)]
    fast = uniform(members, counts, True)
    topic_ids = _topic_order(subscribed)
    general = _uniform_homogeneous(members, subscribed, topic_ids, [counts[t] for t in topic_ids])
    assert fast == general == reference_uniform_homogeneous(members, counts)
    assert list(fast) == list(general)  # the same member order
    assert gc.isenabled()  # the cyclic collector deferred during the fresh path is back on
    for member in members:
        if not fast[member.member_id]:
            assert fast[member.member_id] is member.assignment
