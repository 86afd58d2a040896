"""What the KIP-848 assignors see of a group's members, and the one-topic shortcut of the
uniform homogeneous builder (assignors.py): member specs as tuples or as columns, and the
members of a settled one-topic group its first loop would leave as they are.

Kafka 4.3.1 (org.apache.kafka:kafka-group-coordinator:4.3.1): modern/MemberSubscriptionAndAssignmentImpl
(a member spec), assignor/UniformHomogeneousAssignmentBuilder.build (the loop `inert_members`
stands in for, for the members it leaves alone).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain, repeat
from operator import attrgetter, itemgetter
from typing import NamedTuple, Protocol, overload
from uuid import UUID

# member id -> topic id -> partitions
Assignment = Mapping[UUID, frozenset[int]]
GroupAssignment = dict[str, dict[UUID, frozenset[int]]]


class MemberSpec(NamedTuple):
    """What an assignor sees of a member (modern/MemberSubscriptionAndAssignmentImpl). A typed
    NamedTuple rather than a frozen dataclass: a target assignment builds one per member, and
    tuple construction costs a third of a frozen dataclass's."""

    member_id: str
    instance_id: str | None
    subscribed_topic_ids: frozenset[UUID]
    assignment: Assignment  # the member's current TARGET assignment


class _HasInstanceId(Protocol):
    @property
    def instance_id(self) -> str | None: ...


class SpecColumns(Sequence[MemberSpec]):
    """The member specs of a homogeneous group as columns (ids, the records their instance ids
    are read from, one subscription, current targets): a Sequence[MemberSpec] that builds a spec
    only when one is asked for. A 1,000-member group computes a target per epoch bump, and the
    uniform assignor's one-topic walk (`_inert_members`) reads the columns as they are."""

    __slots__ = ("assignments", "member_ids", "records", "subscribed")

    def __init__(
        self,
        member_ids: list[str],
        records: Sequence[_HasInstanceId],
        subscribed: frozenset[UUID],
        assignments: list[Assignment],
    ) -> None:
        self.member_ids = member_ids
        self.records = records
        self.subscribed = subscribed
        self.assignments = assignments

    def __len__(self) -> int:
        return len(self.member_ids)

    @overload
    def __getitem__(self, index: int) -> MemberSpec: ...

    @overload
    def __getitem__(self, index: slice) -> list[MemberSpec]: ...

    def __getitem__(self, index: int | slice) -> MemberSpec | list[MemberSpec]:
        if isinstance(index, slice):
            return list(self)[index]
        columns = (self.member_ids[index], self.records[index].instance_id, self.subscribed)
        return _new_tuple(MemberSpec, (*columns, self.assignments[index]))

    def __iter__(self) -> Iterator[MemberSpec]:
        count = len(self.member_ids)
        instance_ids = map(_INSTANCE_ID, self.records)
        columns = zip(
            self.member_ids, instance_ids, repeat(self.subscribed, count), self.assignments, strict=True
        )
        return map(_new_tuple, repeat(MemberSpec, count), columns)


_new_tuple = tuple.__new__  # NamedTuple's own __new__ is Python
_INSTANCE_ID = attrgetter("instance_id")


def assignments_of(members: Sequence[MemberSpec]) -> list[Assignment]:
    if isinstance(members, SpecColumns):
        return members.assignments
    return list(map(_ASSIGNMENT, members))


_ASSIGNMENT = itemgetter(3)  # MemberSpec.assignment, read in C


# A settled one-topic group walks only the members whose target may change (`inert_members`)
# when they are at most 1 in this many: past that, finding them costs more than walking all.
_INERT_SHARE = 8


def inert_members(
    members: Sequence[MemberSpec], topic_ids: tuple[UUID, ...], minimum_quota: int, extra: int
) -> tuple[list[int], GroupAssignment, dict[int, list[frozenset[int]]]] | None:
    """What the first loop of `_uniform_homogeneous` does to the members it leaves alone, found
    by C iteration instead of one Python step per member: when the group subscribes to one
    topic and every member holds nothing or part of it, a member holding exactly the minimum
    quota before the last `extra` positions keeps its very assignment, adds its partitions to
    the held ones, neither revokes nor waits for more, and leaves `extra` as it was (with an
    extra slot left it is offered minimum + 1, keeps its minimum, and gives the slot back since
    more members than extras follow it). Returns the indices of the other members in member
    order, the target with every member's current assignment in member order (the walk
    overwrites the others' in place), and the held partitions; None when the shape does not
    fit or too many members would be walked anyway. tests/test_consumer_group_assignors.py
    compares both ways over random one-topic groups."""
    member_count = len(members)
    if len(topic_ids) != 1 or member_count < 2 * _INERT_SHARE:
        return None
    topic_id = topic_ids[0]
    currents = assignments_of(members)
    found = _one_topic_parts(currents, topic_id)
    if found is None:
        return None
    parts, ones = found
    sizes = list(map(len, parts))
    last_inert = member_count - extra  # members from here on may keep an extra slot
    limit = member_count // _INERT_SHARE - extra
    if last_inert - (sizes[:last_inert] if extra else sizes).count(minimum_quota) > limit:
        return None
    others = set(sizes) - {minimum_quota}
    if len(others) > _INERT_SHARE:
        return None
    walked = sorted(_positions(sizes, others, last_inert))
    walked.extend(range(last_inert, member_count))
    member_ids = members.member_ids if isinstance(members, SpecColumns) else map(_MEMBER_ID, members)
    target: GroupAssignment = dict(zip(member_ids, currents, strict=True))  # type: ignore[arg-type]
    return walked, target, ({id(topic_id): parts} if ones else {})


def _one_topic_parts(currents: list[Assignment], topic_id: UUID) -> tuple[list[frozenset[int]], int] | None:
    """Each member's partitions of `topic_id` (empty when it holds nothing) and how many hold
    the topic; None when someone holds more than one topic or another topic (or an assignment
    is not a dict)."""
    member_count = len(currents)
    held_topics = list(chain.from_iterable(currents))  # every member's topics, one list
    ones = len(held_topics)
    # All equal to the topic (equal ids are fine: the walk treats them alike), so no
    # assignment holds more than it: a dict holds a key once.
    if ones > member_count or held_topics.count(topic_id) != ones:
        return None
    filled = currents
    if ones != member_count:  # nothing held: as if holding no partition of the topic
        filled = list(currents)
        nothing: dict[UUID, frozenset[int]] = {topic_id: frozenset()}
        for index in _positions(currents, ({},), member_count):
            filled[index] = nothing
    try:
        return list(chain.from_iterable(map(dict.values, filled))), ones  # type: ignore[arg-type]
    except TypeError:  # an assignment that is not a dict
        return None


def _positions(values: Sequence[object], wanted: Iterable[object], stop: int) -> Iterator[int]:
    """Where `values[:stop]` holds one of `wanted` (few of them: one C scan each)."""
    for value in wanted:
        index = -1
        while True:
            try:
                index = values.index(value, index + 1, stop)
            except ValueError:
                break
            yield index


_MEMBER_ID = itemgetter(0)  # MemberSpec.member_id


__all__ = [
    "Assignment",
    "GroupAssignment",
    "MemberSpec",
    "SpecColumns",
    "assignments_of",
    "inert_members",
]
