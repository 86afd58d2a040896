"""A KIP-848 consumer group's state: members with epochs, target assignment, reconciliation.

Ports of Kafka 4.3.1's group-coordinator (sources jar org.apache.kafka:kafka-group-coordinator:4.3.1):
- modern/consumer/ConsumerGroupMember.java (+ ModernGroupMember): member epoch, previous member
  epoch, state, assigned partitions, partitions pending revocation; `isReconciledTo`.
- modern/MemberState.java: STABLE, UNREVOKED_PARTITIONS, UNRELEASED_PARTITIONS.
- modern/consumer/CurrentAssignmentBuilder.java: `reconcile` below is its `build()`:
  revocation first (the member keeps its epoch until it stops reporting the revoked partitions),
  then assignment at the target epoch, where a partition still owned (assigned or pending
  revocation) by another member is held back (UNRELEASED_PARTITIONS) until that member releases it.
- modern/consumer/ConsumerGroup.java: group epoch, assignment epoch, static members by instance
  id, the partition -> owner index behind `currentPartitionEpoch` (-1 = free), and the group state
  (EMPTY / ASSIGNING / RECONCILING / STABLE, ConsumerGroup.maybeUpdateGroupState).

Partition epochs (4.3 keeps the epoch at which each partition was assigned) are not modelled:
only "owned by whom" decides reconciliation; OffsetCommit epoch checks are not modelled yet.
"""

from __future__ import annotations

import enum
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple
from uuid import UUID

from proxy.wire.errors import ErrorCode
from replay.coordinator.hashorder import improved_hash

if TYPE_CHECKING:
    from replay.coordinator.consumer.types import HeartbeatResponse

Partitions = Mapping[UUID, frozenset[int]]
EMPTY: Mapping[UUID, frozenset[int]] = {}

LEAVE_GROUP_MEMBER_EPOCH = -1  # ConsumerGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2  # ...LEAVE_GROUP_STATIC_MEMBER_EPOCH


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


class ConsumerGroupState(enum.Enum):
    """ConsumerGroup.ConsumerGroupState, with the names ConsumerGroupDescribe reports."""

    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class MigrationPolicy(enum.Enum):
    """ConsumerGroupMigrationPolicy (group.consumer.migration.policy): whether a classic group may
    be upgraded online to a consumer group and a consumer group downgraded back."""

    DISABLED = "disabled"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    BIDIRECTIONAL = "bidirectional"

    @property
    def upgrade_enabled(self) -> bool:
        """ConsumerGroupMigrationPolicy.isUpgradeEnabled."""
        return self in (MigrationPolicy.UPGRADE, MigrationPolicy.BIDIRECTIONAL)

    @property
    def downgrade_enabled(self) -> bool:
        """ConsumerGroupMigrationPolicy.isDowngradeEnabled."""
        return self in (MigrationPolicy.DOWNGRADE, MigrationPolicy.BIDIRECTIONAL)


@dataclass(frozen=True, slots=True)
class ClassicMemberMetadata:
    """ConsumerGroupMemberMetadataValue.ClassicMemberMetadata: what a member using the classic
    protocol inside a consumer group keeps of its JoinGroup (session timeout, its protocols in
    preference order, each with its ConsumerProtocolSubscription bytes)."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The first supported protocol: what JoinGroup answers and SyncGroup must name."""
        return self.protocols[0][0]


class FencedMemberEpoch(Exception):
    """FencedMemberEpochException from reconciliation (a member in an unknown state)."""


_STABLE = MemberState.STABLE
_new_tuple = tuple.__new__  # a NamedTuple's own __new__ is a Python function


def _frozen(partitions: Mapping[UUID, Iterable[int]]) -> dict[UUID, frozenset[int]]:
    return {t: frozenset(ps) for t, ps in partitions.items() if ps}


class ConsumerGroupMember(NamedTuple):
    """ConsumerGroupMember (+ ModernGroupMember), immutable. A typed NamedTuple rather than a
    frozen dataclass: every member reconciles to each new group epoch (`advanced_to`), so a
    1,000-member group builds a member per heartbeat after each epoch bump, and a tuple is built
    in a tenth of a frozen dataclass's time (fifteen `object.__setattr__`). Changed copies go
    through `_replace`."""

    member_id: str
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    assigned: Partitions = EMPTY
    pending_revocation: Partitions = EMPTY
    classic: ClassicMemberMetadata | None = None  # set while the member uses the classic protocol

    @property
    def uses_classic_protocol(self) -> bool:
        """ConsumerGroupMember.useClassicProtocol."""
        return self.classic is not None

    def is_reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == target_epoch

    def with_epoch(self, epoch: int) -> ConsumerGroupMember:
        """Builder.updateMemberEpoch: the old epoch becomes the previous one."""
        return self._replace(member_epoch=epoch, previous_member_epoch=self.member_epoch)

    def advanced_to(self, epoch: int) -> ConsumerGroupMember:
        """A STABLE member reconciled to `epoch` with what it already has: `with_epoch` plus
        state STABLE, built as one tuple (the reconciliation every member does after each group
        epoch bump; `_replace` costs several times more). tests/test_consumer_group_fast_paths.py
        checks it against `_replace`."""
        # unpacked, not `*self[4:]` (a slice tuple first)
        member_id, previous, _, _, i, r, t, c, h, names, regex, a, assigned, pending, classic = self
        fields = (
            member_id,
            epoch,
            previous,
            _STABLE,
            i,
            r,
            t,
            c,
            h,
            names,
            regex,
            a,
            assigned,
            pending,
            classic,
        )
        return _new_tuple(ConsumerGroupMember, fields)

    def owned(self) -> Iterable[tuple[UUID, int]]:
        for source in (self.assigned, self.pending_revocation):
            for topic_id, parts in source.items():
                for partition in parts:
                    yield topic_id, partition


def _owns_any(owned: Partitions | None, revoked: Partitions) -> bool:
    """CurrentAssignmentBuilder.ownsRevokedPartitions: no owned list counts as still owning."""
    if owned is None:
        return True
    return any(p in revoked.get(t, ()) for t, parts in owned.items() for p in parts)


def reconcile(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Partitions,
    subscribed_topic_ids: frozenset[UUID],
    owner_of: Mapping[tuple[UUID, int], str],
    owned: Partitions | None,
    has_subscription_changed: bool,
) -> ConsumerGroupMember:
    """CurrentAssignmentBuilder.build(); `owner_of` is the group's partition -> member index."""
    match member.state:
        case MemberState.STABLE:
            if member.member_epoch != target_epoch:
                if (
                    member.assigned is target
                    and not member.pending_revocation
                    and target.keys() <= subscribed_topic_ids
                    and all(target.values())  # computeNextAssignment drops empty topics
                ):
                    # computeNextAssignment when the target is what the member has: nothing to
                    # revoke or wait for, only the epoch moves.
                    return member.advanced_to(target_epoch)
                return _next_assignment(member, target_epoch, target, subscribed_topic_ids, owner_of, owned)
            if has_subscription_changed:
                return _update_current(member, subscribed_topic_ids, owned)
            return member
        case MemberState.UNREVOKED_PARTITIONS:
            if _owns_any(owned, member.pending_revocation):
                if has_subscription_changed:
                    return _update_current(member, subscribed_topic_ids, owned)
                return member
            return _next_assignment(member, target_epoch, target, subscribed_topic_ids, owner_of, owned)
        case MemberState.UNRELEASED_PARTITIONS:
            return _next_assignment(member, target_epoch, target, subscribed_topic_ids, owner_of, owned)


def _update_current(
    member: ConsumerGroupMember, subscribed: frozenset[UUID], owned: Partitions | None
) -> ConsumerGroupMember:
    """CurrentAssignmentBuilder.updateCurrentAssignment: drop topics no longer subscribed."""
    if not subscribed and not member.pending_revocation:
        assigned: dict[UUID, frozenset[int]] = {}
        pending = dict(member.assigned)
    else:
        assigned = {t: ps for t, ps in member.assigned.items() if t in subscribed}
        pending = dict(member.pending_revocation)
        for topic_id, parts in member.assigned.items():
            if topic_id not in subscribed:
                pending[topic_id] = pending.get(topic_id, frozenset()) | parts
    if assigned == dict(member.assigned):
        return member
    if pending and _owns_any(owned, pending):
        return member.with_epoch(member.member_epoch)._replace(
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=assigned,
            pending_revocation=pending,
        )
    return member.with_epoch(member.member_epoch)._replace(assigned=assigned)


def _next_assignment(
    member: ConsumerGroupMember,
    target_epoch: int,
    target: Partitions,
    subscribed: frozenset[UUID],
    owner_of: Mapping[tuple[UUID, int], str],
    owned: Partitions | None,
) -> ConsumerGroupMember:
    """CurrentAssignmentBuilder.computeNextAssignment."""
    unreleased = False
    assigned: dict[UUID, set[int]] = {}
    revoking: dict[UUID, frozenset[int]] = {}
    pending_assignment: dict[UUID, set[int]] = {}
    for topic_id in set(target) | set(member.assigned):
        wanted = target.get(topic_id, frozenset()) if topic_id in subscribed else frozenset()
        current = member.assigned.get(topic_id, frozenset())
        kept = current & wanted
        if kept:
            assigned[topic_id] = set(kept)
        if current - kept:
            revoking[topic_id] = current - kept
        to_assign = set(wanted - kept)
        mine_pending = member.pending_revocation.get(topic_id, frozenset())
        held = {p for p in to_assign if (topic_id, p) in owner_of and p not in mine_pending}
        if held:
            unreleased = True
            to_assign -= held
        if to_assign:
            pending_assignment[topic_id] = to_assign
    if revoking and _owns_any(owned, revoking):
        return member.with_epoch(member.member_epoch)._replace(
            state=MemberState.UNREVOKED_PARTITIONS,
            assigned=_frozen(assigned),
            pending_revocation=revoking,
        )
    for topic_id, parts in pending_assignment.items():
        assigned.setdefault(topic_id, set()).update(parts)
    frozen = _frozen(assigned)
    if not unreleased and frozen == target:
        # The very target object: the next reconciliation to an unchanged target (the assignor
        # keeps unchanged targets as they are) is then an identity check (`reconcile`).
        frozen = target  # type: ignore[assignment]
    return member.with_epoch(target_epoch)._replace(
        state=MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE,
        assigned=frozen,
        pending_revocation={},
    )


@dataclass(slots=True)
class HashOrderCache:
    """The member-spec HashMap order of the group's last target (target.member_hash_order),
    kept so that the next one moves only the members that left or joined: `keys` sorted, each
    `(bucket << 32) | seq` where seq grows with the join order, `ordered` the member ids in
    that order, `member_ids` the join order it was made for."""

    mask: int
    member_ids: list[str]
    keys: list[int]
    ordered: list[str]
    key_of: dict[str, int]
    next_seq: int

    def move(self, removed: Iterable[str], added: Iterable[str], spreads: dict[str, int]) -> None:
        """Each leaver's key taken out of the sorted keys, each newcomer's put in with the next
        join sequence (bisect: equal buckets stay in join order); `member_ids` is the caller's."""
        keys, ordered, key_of = self.keys, self.ordered, self.key_of
        for member_id in removed:
            index = bisect_left(keys, key_of.pop(member_id))
            del keys[index], ordered[index]
        for member_id in added:
            spread = spreads.get(member_id)
            if spread is None:
                spread = spreads[member_id] = improved_hash(member_id)
            key = key_of[member_id] = ((spread & self.mask) << 32) | self.next_seq
            self.next_seq += 1
            index = bisect_left(keys, key)
            keys.insert(index, key)
            ordered.insert(index, member_id)


@dataclass(slots=True)
class TargetProfile:
    """What the group's last `uniform` homogeneous target was computed from and gave, kept so
    that the next one is computed from the members that left or joined since (incremental.py):
    `result` is the `group.target` it produced (an identity check: a full target replaces it),
    every member in it holds exactly `minimum_quota` partitions of the subscribed topics, or one
    more for the members in `big`, and no partition twice. ConsumerGroup.remove_member records
    each leaver's target in `removed`, update_member each new member in `added`; `pending` is a
    joining member the target counted before it was stored. Writers of `group.target` other
    than target.py write only the targets of members in `added` (static replacement), which
    incremental.py checks are empty."""

    result: dict[str, Partitions]
    subscribed: frozenset[UUID]
    topic_ids: tuple[UUID, ...]
    counts: list[int]
    member_count: int
    minimum_quota: int
    big: set[str]
    pending: str | None
    removed: dict[str, Partitions] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)

    def joined(self, member_id: str) -> None:
        if member_id == self.pending:
            self.pending = None  # the target already counted it
        else:
            self.added.append(member_id)


def _bump(counts: dict[str, int], key: str, delta: int) -> None:
    value = counts.get(key, 0) + delta
    if value > 0:
        counts[key] = value
    else:
        counts.pop(key, None)


TimerAction = Callable[[int], None]
# A classic member's (session key, action, consumer-join key, action, consumer-sync key, action).
ClassicKit = tuple[str, TimerAction, str, TimerAction, str, TimerAction]


@dataclass(slots=True)
class ConsumerGroup:
    """The mutable state of one consumer group (ConsumerGroup.java); members are immutable."""

    group_id: str
    group_epoch: int = 1  # Kafka 4.3.1 ModernGroup starts a new group at epoch 1 (the first join makes it 2)
    assignment_epoch: int = 1  # TargetAssignmentMetadata.INITIAL = (epoch 1, timestamp 0)
    metadata_hash: frozenset[tuple[str, int]] = frozenset()  # of the subscribed topics, at the last bump
    resolved_regexes: dict[str, frozenset[str]] = field(default_factory=dict)  # regex -> topic names
    last_regex_refresh_ms: int | None = None
    regex_topic_names: frozenset[str] = frozenset()  # the topic names the last resolution saw
    # ConsumerGroup.subscribedTopicNames / subscribedRegularExpressions: members per name / regex
    name_counts: dict[str, int] = field(default_factory=dict)
    regex_counts: dict[str, int] = field(default_factory=dict)
    assignment_timestamp_ms: int | None = None  # Kafka's 0 ("never computed"); virtual time may be 0
    members: dict[str, ConsumerGroupMember] = field(default_factory=dict)  # join order
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    target: dict[str, Partitions] = field(default_factory=dict)
    owner_of: dict[tuple[UUID, int], str] = field(default_factory=dict)
    # Members naming a server assignor, per assignor (computePreferredServerAssignor's input).
    assignor_counts: dict[str, int] = field(default_factory=dict)
    # ConsumerGroup.classicProtocolMembersSupportedProtocols / numClassicProtocolMembers.
    classic_protocol_counts: dict[str, int] = field(default_factory=dict)
    classic_members: int = 0
    # The answer to a member's plain heartbeat at its current epoch (the same every time), and
    # the key and action of its session timer: made once, not on every heartbeat.
    # The session timer's entry also holds the member's rebalance timer key (steady.py cancels it).
    plain_answers: dict[str, HeartbeatResponse] = field(default_factory=dict)
    session_timers: dict[str, tuple[str, Callable[[int], None], str]] = field(default_factory=dict)
    # A classic member's timers in one look-up (classic_cycle.py): (session key, action,
    # consumer-join key, action, consumer-sync key, action), made from the two above once.
    classic_kits: dict[str, ClassicKit] = field(default_factory=dict)
    # Member id -> its improved Java string hash (target.py's member_hash_order), and that
    # order as the last target left it.
    hash_spreads: dict[str, int] = field(default_factory=dict)
    hash_order: HashOrderCache | None = None
    # The kio answer built for a plain answer (service.py): member id -> (answer, api_version, kio).
    wire_answers: dict[str, tuple[HeartbeatResponse, int, object]] = field(default_factory=dict)
    # steady.py: subscription -> ((metadata hash, topic id overrides version), topic ids)
    topic_ids_cache: dict[frozenset[str], tuple[tuple[object, int], frozenset[UUID]]] = field(
        default_factory=dict
    )
    target_profile: TargetProfile | None = None  # the last target's, while it can be moved on

    def update_member(self, member: ConsumerGroupMember) -> None:
        """ConsumerGroup.updateMember: partition index, static member index."""
        old = self.members.get(member.member_id)
        if old is member:
            return
        self.members[member.member_id] = member
        if (
            old is None
            or old.assigned is not member.assigned
            or old.pending_revocation is not member.pending_revocation
        ):
            if old is not None:
                self._release(old)
            for key in member.owned():
                self.owner_of[key] = member.member_id
        if (
            old is None
            or old.subscribed_topic_names is not member.subscribed_topic_names
            or old.subscribed_topic_regex != member.subscribed_topic_regex
            or old.server_assignor != member.server_assignor
        ):
            if old is not None:
                self._count(old, -1)
            elif self.target_profile is not None:  # a new member, after the profiled target
                self.target_profile.joined(member.member_id)
            self._count(member, 1)
        if old is None or old.classic is not member.classic:
            self._count_classic(old, -1)
            self._count_classic(member, 1)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def advance_member(self, member: ConsumerGroupMember, epoch: int) -> None:
        """`update_member(member.advanced_to(epoch))` for a stored member: the new record shares
        every indexed field with it (partitions, subscription, assignor, classic metadata), so
        only the member map (and the static index, as update_member sets it) is written."""
        self.members[member.member_id] = member.advanced_to(epoch)
        if member.instance_id is not None:
            self.static_members[member.instance_id] = member.member_id

    def remove_member(self, member_id: str) -> ConsumerGroupMember | None:
        """ConsumerGroup.removeMember plus the target assignment tombstone (removeMember records)."""
        old = self.members.pop(member_id, None)
        target = self.target.pop(member_id, None)
        profile = self.target_profile
        if profile is not None and (old is not None or target is not None):
            if target is None or member_id == profile.pending:  # left before a target counted it
                self.target_profile = None
            else:
                profile.removed[member_id] = target
        self.plain_answers.pop(member_id, None)
        self.session_timers.pop(member_id, None)
        self.classic_kits.pop(member_id, None)
        self.wire_answers.pop(member_id, None)
        self.hash_spreads.pop(member_id, None)
        if old is None:
            return None
        self._release(old)
        self._count(old, -1)
        self._count_classic(old, -1)
        if old.instance_id is not None and self.static_members.get(old.instance_id) == member_id:
            del self.static_members[old.instance_id]
        return old

    def _count(self, member: ConsumerGroupMember, delta: int) -> None:
        for name in member.subscribed_topic_names:
            _bump(self.name_counts, name, delta)
        if member.subscribed_topic_regex:
            _bump(self.regex_counts, member.subscribed_topic_regex, delta)
        if member.server_assignor is not None:
            _bump(self.assignor_counts, member.server_assignor, delta)

    def _count_classic(self, member: ConsumerGroupMember | None, delta: int) -> None:
        if member is None or member.classic is None:
            return
        self.classic_members += delta
        for name in {name for name, _ in member.classic.protocols}:
            _bump(self.classic_protocol_counts, name, delta)

    def _release(self, member: ConsumerGroupMember) -> None:
        for key in member.owned():
            if self.owner_of.get(key) == member.member_id:
                del self.owner_of[key]

    def resolved_topics(self, regex: str | None) -> frozenset[str]:
        return self.resolved_regexes.get(regex, frozenset()) if regex else frozenset()

    def static_member(self, instance_id: str) -> ConsumerGroupMember | None:
        member_id = self.static_members.get(instance_id)
        return None if member_id is None else self.members.get(member_id)

    def target_of(self, member: ConsumerGroupMember) -> Partitions:
        """ConsumerGroup.targetAssignment(memberId, instanceId): a replacing static member gets
        the departed one's target until the next target assignment is computed."""
        found = self.target.get(member.member_id)
        if found is None and member.instance_id is not None:
            previous = self.static_members.get(member.instance_id)
            if previous is not None:
                found = self.target.get(previous)
        return EMPTY if found is None else found

    def validate_offset_commit(self, member_id: str, member_epoch: int, api_version: int) -> ErrorCode:
        """ConsumerGroup.validateOffsetCommit as an error code (0: accepted)."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if api_version < 9 and member.classic is None:  # classic members commit with any version
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:  # a classic member's generation: ILLEGAL_GENERATION
            return ErrorCode.illegal_generation if member.classic else ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, member_id: str, member_epoch: int) -> ErrorCode:
        """ConsumerGroup.validateOffsetFetch of a member (validateMemberEpoch)."""
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch == member.member_epoch:
            return ErrorCode.none
        return ErrorCode.illegal_generation if member.classic else ErrorCode.stale_member_epoch

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch != self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE


__all__ = [
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "ClassicMemberMetadata",
    "ConsumerGroup",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "FencedMemberEpoch",
    "HashOrderCache",
    "MemberState",
    "MigrationPolicy",
    "TargetProfile",
    "reconcile",
]
