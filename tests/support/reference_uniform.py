"""The straightforward port of Kafka's UniformHomogeneousAssignmentBuilder, partition by partition
(what replay.coordinator.consumer.assignors.uniform computed before it worked on counts and
slices): the reference the fast builder is compared with over random groups
(tests/test_consumer_group_assignors.py). Test-only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from replay.coordinator.consumer.assignors import (
    GroupAssignment,
    MemberSpec,
    PartitionAssignorError,
    java_hash_order,
)


def reference_uniform_homogeneous(  # noqa: C901 - Kafka's builder step by step, kept as it was
    members: Sequence[MemberSpec], topic_partitions: Mapping[UUID, int]
) -> GroupAssignment:
    if not members:
        return {}
    topic_ids = java_hash_order(sorted(members[0].subscribed_topic_ids))
    if not topic_ids:
        return {}
    assigned: dict[UUID, set[int]] = {}
    for m in members:
        for t, parts in m.assignment.items():
            assigned.setdefault(t, set()).update(parts)
    unassigned: list[tuple[UUID, int]] = []
    total = 0
    for topic_id in topic_ids:
        count = topic_partitions.get(topic_id, -1)
        if count == -1:
            raise PartitionAssignorError(f"unknown topic {topic_id}")
        taken = assigned.get(topic_id, ())
        unassigned.extend((topic_id, p) for p in range(count) if p not in taken)
        total += count
    minimum_quota, extra = divmod(total, len(members))
    subscribed = set(topic_ids)
    target: GroupAssignment = {}
    unfilled: list[tuple[str, int]] = []
    member_count = len(members)
    for index, member in enumerate(members):
        quota = minimum_quota
        has_extra = False
        if extra > 0:
            quota += 1
            has_extra = True
        new: dict[UUID, frozenset[int]] = {}
        for topic_id in java_hash_order(member.assignment):  # fromRecord: ties in record (dict) order
            parts = member.assignment[topic_id]
            if topic_id not in subscribed:
                continue
            if len(parts) <= quota:
                quota -= len(parts)
                new[topic_id] = frozenset(parts)
                continue
            kept = []
            for partition in sorted(parts):
                if quota > 0:
                    quota -= 1
                    kept.append(partition)
                else:
                    unassigned.append((topic_id, partition))
            if kept:
                new[topic_id] = frozenset(kept)
        if quota > 0 and has_extra and member_count - index > extra:
            quota -= 1
            has_extra = False
        if quota > 0:
            unfilled.append((member.member_id, quota))
        if has_extra:
            extra -= 1
        target[member.member_id] = new
    position = 0
    for member_id, quota in unfilled:
        grown = {t: set(parts) for t, parts in target[member_id].items()}
        for _ in range(quota):
            if position >= len(unassigned):
                break
            topic_id, partition = unassigned[position]
            position += 1
            grown.setdefault(topic_id, set()).add(partition)
        target[member_id] = {t: frozenset(parts) for t, parts in grown.items()}
    if position < len(unassigned):
        raise PartitionAssignorError("Partitions were left unassigned")
    return target
