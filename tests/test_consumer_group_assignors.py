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
    SpecColumns,
    _topic_order,
    _uniform_homogeneous,
    java_hash_order,
    java_string_hash,
    java_uuid_hash,
    uniform,
)
from replay.coordinator.consumer.specs import inert_members
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


def _one_topic_currents(data: st.DataObject, topic: uuid.UUID, count: int, member_count: int) -> list[Any]:
    """Settled-looking holdings of one topic (disjoint runs of about count / members), then
    some disturbed: over and under quota, nothing, an empty set, an equal topic id object."""
    share = max(1, count // member_count)
    currents: list[Any] = []
    for index in range(member_count):
        parts = frozenset(p for p in range(index * share, (index + 1) * share) if p < count)
        currents.append({topic: parts} if parts else {})
    for _ in range(data.draw(st.integers(0, 6))):
        index = data.draw(st.integers(0, member_count - 1))
        match data.draw(st.sampled_from(["more", "less", "nothing", "empty set", "equal id", "overlap"])):
            case "more":
                currents[index] = {
                    topic: frozenset(data.draw(st.lists(st.integers(0, count + 2), max_size=6)))
                }
            case "less":
                currents[index] = {topic: frozenset(list(currents[index].get(topic, ()))[:1])}
            case "nothing":
                currents[index] = {}
            case "empty set":
                currents[index] = {topic: frozenset()}
            case "equal id":
                currents[index] = {uuid.UUID(int=topic.int): currents[index].get(topic, frozenset({0}))}
            case "overlap":
                currents[index] = dict(currents[data.draw(st.integers(0, member_count - 1))])
    return currents


@settings(max_examples=300, deadline=None)
@given(st.integers(16, 90), st.integers(0, 200), st.data())
def test_the_one_topic_walk_skips_only_members_it_would_leave_alone(
    member_count: int, count: int, data: st.DataObject
) -> None:
    """`inert_members` (walk only the members whose target may change) against the walk over
    every member, on settled one-topic groups a member joined or left, some disturbed: the same
    targets, in the same member order, the very objects kept for the same members; given as
    specs or as columns (`SpecColumns`)."""
    topic = TOPICS[0]
    subscribed = frozenset({topic})
    currents = _one_topic_currents(data, topic, count, member_count)
    ids = [f"m{i:03d}" for i in range(member_count)]
    specs = [MemberSpec(m, None, subscribed, c) for m, c in zip(ids, currents, strict=True)]
    columns = SpecColumns(ids, specs, subscribed, currents)
    assert list(columns) == specs and columns[3] == specs[3] and columns[1:4] == specs[1:4]
    full = _outcome(lambda: _uniform_homogeneous(specs, subscribed, (topic,), [count], False))
    for members in (specs, columns):
        fast = _outcome(lambda m=members: _uniform_homogeneous(m, subscribed, (topic,), [count], True))  # type: ignore[misc]
        assert fast == full
        if isinstance(full, dict):
            assert list(fast) == list(full)  # type: ignore[arg-type]
            kept = [m for m, c in zip(ids, currents, strict=True) if full[m] is c]
            assert [m for m, c in zip(ids, currents, strict=True) if fast[m] is c] == kept  # type: ignore[index]
    if isinstance(full, dict):
        assert full == reference_uniform_homogeneous(specs, {topic: count})


@settings(max_examples=100, deadline=None)
@given(st.integers(40, 80), st.integers(1, 4), st.data())
def test_rolling_restarts_of_one_topic_take_the_short_walk_to_the_same_targets(
    member_count: int, per_member: int, data: st.DataObject
) -> None:
    """The shape the walk is for: one member leaves, one joins, each target from the last."""
    topic = TOPICS[0]
    counts = {topic: member_count * per_member}
    subscribed = frozenset(counts)
    ids = [f"member-{i}" for i in range(member_count)]
    target: dict[str, Any] = {}
    walked = 0
    for step in range(6):
        members = [MemberSpec(m, None, subscribed, target.get(m, {})) for m in java_hash_order(ids)]
        fast = uniform(members, counts, True)
        quota, extra = divmod(counts[topic], len(members))
        walked += inert_members(members, (topic,), quota, extra) is not None
        full = _uniform_homogeneous(members, subscribed, (topic,), [counts[topic]], False)
        assert fast == full and list(fast) == list(full)
        target = dict(fast)
        if step % 2:
            ids.append(f"joined-{step}")
        else:
            ids.pop(data.draw(st.integers(0, len(ids) - 1)))
    assert walked >= 3  # the settled targets took the short walk
