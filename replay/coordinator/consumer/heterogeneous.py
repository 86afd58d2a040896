"""UniformHeterogeneousAssignmentBuilder: the uniform assignor for members with different
subscriptions, a line-by-line port (moved out of assignors.py, unchanged).

Kafka 4.3.1 (org.apache.kafka:kafka-group-coordinator:4.3.1): assignor/UniformHeterogeneousAssignmentBuilder
(topics ordered by partitions per subscriber, the least-loaded/most-loaded member ranges of its
MemberAssignmentBalancer, at most 16 balancing passes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from replay.coordinator.consumer.specs import GroupAssignment, MemberSpec


class PartitionAssignorError(ValueError):
    """Kafka's PartitionAssignorException (the heartbeat then fails with UNKNOWN_SERVER_ERROR)."""


def partition_count(topic_partitions: Mapping[UUID, int], topic_id: UUID) -> int:
    count = topic_partitions.get(topic_id, -1)
    if count == -1:
        raise PartitionAssignorError(
            f"Members are subscribed to topic {topic_id} which doesn't exist in the topic metadata."
        )
    return count


def _java_uuid_key(value: UUID) -> tuple[int, int]:
    """org.apache.kafka.common.Uuid.compareTo: most, then least significant bits as signed longs."""

    def signed(bits: int) -> int:
        return bits - (1 << 64) if bits & (1 << 63) else bits

    return signed(value.int >> 64), signed(value.int & 0xFFFFFFFFFFFFFFFF)


_MAX_ITERATION_COUNT = 16


class Heterogeneous:
    """UniformHeterogeneousAssignmentBuilder (members with different subscriptions), line by line."""

    def __init__(self, members: Sequence[MemberSpec], topic_partitions: Mapping[UUID, int]) -> None:
        self.members = list(members)
        self.counts = topic_partitions
        self.subscribers: dict[UUID, list[int]] = {}
        self.sizes = [0] * len(self.members)
        for index, member in enumerate(self.members):
            for topic_id in member.subscribed_topic_ids:
                partition_count(topic_partitions, topic_id)
                self.subscribers.setdefault(topic_id, []).append(index)
        self.owners = {t: [-1] * topic_partitions[t] for t in self.subscribers}
        self.target: list[dict[UUID, set[int]]] = [{} for _ in self.members]

    def topic_order(self, topic_id: UUID) -> tuple[float, int, tuple[int, int]]:
        # topicComparator: more partitions per subscriber first, then fewer subscribers, then id.
        subscribers = len(self.subscribers[topic_id])
        return (-self.counts[topic_id] / subscribers, subscribers, _java_uuid_key(topic_id))

    def build(self) -> GroupAssignment:  # noqa: C901 - follows Kafka's assignment builder's build() step by step
        if not self.subscribers:
            return {m.member_id: {} for m in self.members}
        # maybeRevokePartitions: keep what is still subscribed.
        for index, member in enumerate(self.members):
            for topic_id, parts in member.assignment.items():
                if topic_id in member.subscribed_topic_ids:
                    self.sizes[index] += len(parts)
                    for partition in parts:
                        self.owners[topic_id][partition] = index
                    self.target[index][topic_id] = set(parts)
        # computeUnassignedPartitions + assignRemainingPartitions
        unassigned = {
            t: [p for p, owner in enumerate(owners) if owner == -1] for t, owners in self.owners.items()
        }
        for topic_id in sorted((t for t, ps in unassigned.items() if ps), key=self.topic_order):
            balancer = _Balancer(self.sizes)
            balancer.initialize(self.subscribers[topic_id])
            for partition in unassigned[topic_id]:
                self.assign_partition(topic_id, partition, balancer.next_least_loaded())
        # balance(): topics with two or more subscribers, at most 16 passes.
        topics = sorted((t for t, subs in self.subscribers.items() if len(subs) >= 2), key=self.topic_order)
        if topics:
            last = -1
            balancer = _Balancer(self.sizes)
            done = False
            for _ in range(_MAX_ITERATION_COUNT):
                for index, topic_id in enumerate(topics):
                    if index == last:
                        done = True
                        break
                    if self.balance_topic(topic_id, balancer) > 0 or last == -1:
                        last = index
                if done:
                    break
        return {
            m.member_id: {t: frozenset(ps) for t, ps in self.target[i].items() if ps}
            for i, m in enumerate(self.members)
        }

    def balance_topic(self, topic_id: UUID, balancer: _Balancer) -> int:
        moved = 0
        owners = self.owners[topic_id]
        if balancer.initialize(self.subscribers[topic_id]) <= 1:
            return moved
        partitions = sorted(range(self.counts[topic_id]), key=lambda p: (owners[p], p))
        start: dict[int, int] = {}
        end: dict[int, int] = {}
        for i, partition in enumerate(partitions):
            start.setdefault(owners[partition], i)
            end[owners[partition]] = i + 1
        while not balancer.is_balanced():
            while True:
                most = balancer.next_most_loaded()
                if most == -1:
                    break
                if most not in end or end[most] - start[most] <= 0:
                    balancer.exclude_most_loaded()
                    continue
                break
            if most == -1:
                break
            partition = partitions[end[most] - 1]
            end[most] -= 1
            least = balancer.next_least_loaded()
            if balancer.is_balanced():
                break
            self.assign_partition(topic_id, partition, least)
            moved += 1
        return moved

    def assign_partition(self, topic_id: UUID, partition: int, index: int) -> None:
        old = self.owners[topic_id][partition]
        if old != -1:
            parts = self.target[old].get(topic_id)
            if parts is not None:
                parts.discard(partition)
                if not parts:
                    del self.target[old][topic_id]
            self.sizes[old] -= 1
        self.target[index].setdefault(topic_id, set()).add(partition)
        self.owners[topic_id][partition] = index
        self.sizes[index] += 1


class _Balancer:
    """UniformHeterogeneousAssignmentBuilder.MemberAssignmentBalancer (ranges of equally loaded
    members in a list sorted once by load, then member index)."""

    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.sorted: list[int] = []
        self.least_end = 0
        self.least_count = -1
        self.next_least = 0
        self.most_start = 0
        self.most_end = 0
        self.most_count = 1
        self.next_most = -1

    def initialize(self, members: list[int]) -> int:
        if not members:
            raise ValueError("Cannot balance an empty subscriber list.")
        sizes = self.sizes
        self.sorted = sorted(members, key=lambda m: (sizes[m], m))
        self.least_end = 0
        self.least_count = sizes[self.sorted[0]] - 1
        self.next_least = 0
        self.most_start = len(self.sorted)
        self.most_end = len(self.sorted)
        self.most_count = sizes[self.sorted[-1]] + 1
        self.next_most = len(self.sorted) - 1
        return sizes[self.sorted[-1]] - sizes[self.sorted[0]]

    def next_least_loaded(self) -> int:
        if self.next_least >= self.least_end:
            self.least_count += 1
            while (
                self.least_end < len(self.sorted)
                and self.sizes[self.sorted[self.least_end]] == self.least_count
            ):
                self.least_end += 1
            self.next_least = 0
        member = self.sorted[self.next_least]
        self.next_least += 1
        return member

    def next_most_loaded(self) -> int:
        if self.next_most < self.most_start:
            if self.most_end <= self.most_start and self.most_start > 0:
                self.most_count = self.sizes[self.sorted[self.most_start - 1]]
            else:
                self.most_count -= 1
            while self.most_start > 0 and self.sizes[self.sorted[self.most_start - 1]] == self.most_count:
                self.most_start -= 1
            self.next_most = self.most_end - 1
        if self.next_most < 0:
            return -1
        member = self.sorted[self.next_most]
        self.next_most -= 1
        return member

    def exclude_most_loaded(self) -> None:
        member = self.sorted[self.next_most + 1]
        self.sorted[self.next_most + 1] = self.sorted[self.most_end - 1]
        self.sorted[self.most_end - 1] = member
        self.most_end -= 1

    def is_balanced(self) -> bool:
        return self.most_count - self.least_count <= 1


__all__ = ["Heterogeneous", "PartitionAssignorError", "partition_count"]
