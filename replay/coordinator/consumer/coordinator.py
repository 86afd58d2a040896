"""The reference coordinator for KIP-848 consumer groups: ConsumerGroupHeartbeat and
ConsumerGroupDescribe, sans-IO, in virtual time (`heartbeat(now_ms, ...)`, `advance(now_ms)`,
`next_deadline()`).

The specification is Kafka 4.3.1's group-coordinator (sources jar
org.apache.kafka:kafka-group-coordinator:4.3.1):
- GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid -> `_validate`;
- GroupMetadataManager.consumerGroupHeartbeat -> `_heartbeat`: getOrMaybeCreateConsumerGroup,
  throwIfConsumerGroupIsFull, getOrMaybeSubscribeDynamicConsumerGroupMember /
  getOrMaybeSubscribeStaticConsumerGroupMember (UNRELEASED_INSTANCE_ID, FENCED_INSTANCE_ID,
  static replacement keeping the departed member's assignment), throwIfConsumerGroupMemberEpochIsInvalid
  (FENCED_MEMBER_EPOCH; the previous epoch is accepted with a subset of the assignment), the
  group epoch bump on a subscription change, maybeUpdateTargetAssignment (computed at most once per
  `group.consumer.assignment.interval.ms`, default 1000 ms: the "batches" of Kafka 4.3, so a member
  joining within the interval gets the last target and a later heartbeat brings the new one),
  maybeReconcile (+ the rebalance timeout while partitions are unrevoked), the session timeout,
  and when the response carries the assignment (epoch 0, a full request, or a changed assignment);
- consumerGroupLeave / consumerGroupStaticMemberGroupLeave / consumerGroupFenceMember(s): epoch -1
  removes the member and bumps the group epoch; epoch -2 keeps a static member at epoch -2 with
  its partitions (nobody else gets them) until it rejoins or its session expires;
- timers keyed like Kafka's: `session-timeout-{group}-{member}` (group.consumer.session.timeout.ms,
  45 s) and `rebalance-timeout-{group}-{member}` (the member's rebalance timeout, fires only if
  the member is still at the epoch it was given).

The online migration with classic groups lives in migration.py and service.py (a group id used by a classic
group answers GROUP_ID_NOT_FOUND here only when the caller says so), regex subscriptions
(accepted, resolved to nothing), rack-aware assignment, topic metadata changes after creation,
OffsetCommit member-epoch checks, the assignor offload thread.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any
from uuid import UUID

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer import assignors
from replay.coordinator.consumer import target as targets
from replay.coordinator.consumer.describe import describe_groups
from replay.coordinator.consumer.group import (
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    Partitions,
    reconcile,
)
from replay.coordinator.consumer.regex import (
    maybe_refresh_regexes,
    maybe_update_regexes,
)
from replay.coordinator.consumer.steady import steady_heartbeat
from replay.coordinator.consumer.types import (
    ConsumerGroupConfig,
    ConsumerGroupEvent,
    DescribedGroup,
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResponse,
    TopicImage,
    updated_member,
)
from replay.coordinator.timers import KeyedTimers

CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION = 1  # ConsumerGroupHeartbeatRequest (KIP-1082)


@lru_cache(maxsize=1 << 14)
def _serve_topic_id(name: str) -> UUID:
    """The topic id `coordinator serve` gives `name` in its Metadata answers."""
    return uuid.uuid5(uuid.NAMESPACE_URL, f"group-replay:{name}")


def _error(code: ErrorCode, message: str) -> HeartbeatError:
    return HeartbeatError(code, message)


@dataclass(slots=True)
class ConsumerGroupCoordinator:
    """All consumer groups of one coordinator.

    `topic_partitions` is the metadata image, name -> partition count; `coordinator serve` passes
    its own dict, so topics it creates (auto-creation on Metadata) are seen here at once. Topic ids
    are `uuid5(NAMESPACE_URL, "group-replay:<name>")` as serve's Metadata answers them, unless
    `add_topic` names one (the differential tests use the real broker's ids).
    """

    config: ConsumerGroupConfig = field(default_factory=ConsumerGroupConfig)
    topic_partitions: dict[str, int] = field(default_factory=dict)
    topic_id_overrides: dict[str, UUID] = field(default_factory=dict)
    groups: dict[str, ConsumerGroup] = field(default_factory=dict)
    timers: KeyedTimers = field(default_factory=KeyedTimers)
    # The latest events (bounded: `coordinator serve` runs for as long as clients come).
    events: deque[ConsumerGroupEvent] = field(default_factory=lambda: deque(maxlen=100_000))
    # Called with a group id when its last member goes (the runtime schedules its metadata cleanup).
    on_group_empty: Callable[[str], None] | None = None
    # consumerGroupFenceMembers' online downgrade: called before a member is fenced; True when it
    # converted the group to a classic group instead (the service owns both kinds of group).
    on_fence: Callable[[int, ConsumerGroup, ConsumerGroupMember], bool] | None = None
    member_id_seed: int = 0x848  # member ids this coordinator makes (v0 joins) are deterministic
    _ids: int = 0
    topic_ids_version: int = 0  # bumped when `add_topic` names a topic id (steady.py's cache)
    # classic_members._encoded_entry: id(assignment) -> (assignment, version, topic image, bytes,
    # answers, subscription bytes, topic names)
    encoded_assignments: dict[int, tuple[Any, ...]] = field(default_factory=dict)
    # classic_members.classic_timers_of: group id -> member id -> (consumer-join key, action,
    # consumer-sync key, action)
    classic_timers: dict[str, dict[str, tuple[str, Callable[[int], None], str, Callable[[int], None]]]] = (
        field(default_factory=dict)
    )

    # -- metadata ------------------------------------------------------------------------------

    def add_topic(self, name: str, partitions: int, topic_id: UUID | None = None) -> TopicImage:
        self.topic_partitions[name] = partitions
        if topic_id is not None:
            self.topic_id_overrides[name] = topic_id
            self.topic_ids_version += 1
        return TopicImage(name, self.topic_id(name), partitions)

    def topic_id(self, name: str) -> UUID:
        found = self.topic_id_overrides.get(name)
        return found if found is not None else _serve_topic_id(name)

    @property
    def topics(self) -> dict[str, TopicImage]:
        return {n: TopicImage(n, self.topic_id(n), p) for n, p in self.topic_partitions.items()}

    def topic_ids(self, names: Iterable[str]) -> frozenset[UUID]:
        """TopicIds: subscribed names that exist in the image (the others match nothing yet)."""
        return frozenset(self.topic_id(n) for n in names if n in self.topic_partitions)

    def member_topic_ids(self, group: ConsumerGroup, member: ConsumerGroupMember) -> frozenset[UUID]:
        """CurrentAssignmentBuilder.subscribedTopicIds: names plus what its regex resolved to (an
        unresolved regex matches nothing yet)."""
        return self.topic_ids(
            member.subscribed_topic_names | group.resolved_topics(member.subscribed_topic_regex)
        )

    def _partition_counts(self) -> dict[UUID, int]:
        return {self.topic_id(n): p for n, p in self.topic_partitions.items()}

    def _metadata_hash(self, names: Iterable[str]) -> frozenset[tuple[str, int]]:
        """ModernGroup.computeMetadataHash stand-in: what the image says of the subscribed topics."""
        return frozenset((n, self.topic_partitions[n]) for n in names if n in self.topic_partitions)

    @staticmethod
    def _counts_with(
        group: ConsumerGroup, updated: ConsumerGroupMember | None
    ) -> tuple[dict[str, int], dict[str, int]]:
        """The group's members per subscribed name and per regex, with `updated` in place of the
        stored member of that id (ConsumerGroup.computeSubscribedTopicNames(member, updatedMember))."""
        names, regexes = group.name_counts, group.regex_counts
        if updated is None:
            return names, regexes
        old = group.members.get(updated.member_id)
        if (
            old is not None
            and old.subscribed_topic_names == updated.subscribed_topic_names
            and old.subscribed_topic_regex == updated.subscribed_topic_regex
        ):
            return names, regexes
        names, regexes = dict(names), dict(regexes)
        for member, delta in ((old, -1), (updated, 1)):
            if member is None:
                continue
            for name in member.subscribed_topic_names:
                names[name] = names.get(name, 0) + delta
            if member.subscribed_topic_regex:
                regex = member.subscribed_topic_regex
                regexes[regex] = regexes.get(regex, 0) + delta
        return {k: v for k, v in names.items() if v > 0}, {k: v for k, v in regexes.items() if v > 0}

    def _subscribed_names(self, group: ConsumerGroup, updated: ConsumerGroupMember | None) -> set[str]:
        """ConsumerGroup.computeSubscribedTopicNames: by name and through resolved regexes."""
        names, regexes = self._counts_with(group, updated)
        subscribed = set(names)
        for regex in regexes:
            subscribed |= group.resolved_topics(regex)
        return subscribed

    # -- time ------------------------------------------------------------------------------------

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def advance(self, now_ms: int) -> None:
        """Fire every timer due at `now_ms` (session and rebalance timeouts)."""
        while (due := self.timers.pop_due(now_ms)) is not None:
            due[1](now_ms)

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------------

    def heartbeat(self, now_ms: int, request: HeartbeatRequest) -> HeartbeatResponse:
        """One ConsumerGroupHeartbeat. Timers due at `now_ms` fire first (as the classic core does)."""
        heap = self.timers.heap  # `advance`, when the heap's first entry (maybe stale) is due
        if heap and heap[0][0] <= now_ms:
            self.advance(now_ms)
        steady = steady_heartbeat(self, now_ms, request)
        if steady is not None:
            return steady
        try:
            self._validate(request)
            if request.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
                return self._leave(now_ms, request)
            return self._heartbeat(now_ms, request)
        except HeartbeatError as exc:
            return HeartbeatResponse(error_code=int(exc.code), error_message=exc.message)
        except assignors.PartitionAssignorError as exc:
            return HeartbeatResponse(
                error_code=int(ErrorCode.unknown_server_error),
                error_message=f"Failed to compute a new target assignment: {exc}",
            )

    def _validate(self, request: HeartbeatRequest) -> None:  # noqa: C901 - Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid: one check per field
        """GroupCoordinatorService.throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        invalid = ErrorCode.invalid_request
        if (
            request.api_version >= CONSUMER_GENERATED_MEMBER_ID_REQUIRED_VERSION
            or request.member_epoch > 0
            or request.member_epoch == LEAVE_GROUP_MEMBER_EPOCH
        ) and not request.member_id.strip():
            raise _error(invalid, "MemberId can't be empty.")
        if not request.group_id.strip():
            raise _error(invalid, "GroupId can't be empty.")
        if request.instance_id is not None and not request.instance_id.strip():
            raise _error(invalid, "InstanceId can't be empty.")
        if request.rack_id is not None and not request.rack_id.strip():
            raise _error(invalid, "RackId can't be empty.")
        if request.member_epoch == 0:
            if request.rebalance_timeout_ms == -1:
                raise _error(invalid, "RebalanceTimeoutMs must be provided in first request.")
            if request.owned is None or request.owned:
                raise _error(invalid, "TopicPartitions must be empty when (re-)joining.")
            if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
                raise _error(
                    invalid,
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.",
                )
        elif request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if request.instance_id is None:
                raise _error(invalid, "InstanceId can't be null.")
        elif request.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise _error(invalid, "MemberEpoch is invalid.")
        if request.server_assignor is not None and request.server_assignor not in self.config.assignors:
            raise _error(
                ErrorCode.unsupported_assignor,
                f"ServerAssignor {request.server_assignor} is not supported. Supported assignors: "
                f"{', '.join(self.config.assignors)}.",
            )

    def _group(self, group_id: str) -> ConsumerGroup:
        group = self.groups.get(group_id)
        if group is None:
            raise _error(ErrorCode.group_id_not_found, f"Consumer group {group_id} not found.")
        return group

    def _member(self, group: ConsumerGroup, member_id: str) -> ConsumerGroupMember:
        member = group.members.get(member_id)
        if member is None:
            raise _error(
                ErrorCode.unknown_member_id,
                f"Member {member_id} is not a member of group {group.group_id}.",
            )
        return member

    def _new_member_id(self) -> str:
        self._ids += 1
        return str(uuid.UUID(int=(self.member_id_seed << 64) | self._ids))

    def _check_epoch(self, member: ConsumerGroupMember, epoch: int, owned: Partitions | None) -> None:
        """throwIfConsumerGroupMemberEpochIsInvalid."""
        if epoch == 0 and self.config.behaviour.epoch_zero_rejoins:
            return
        if epoch > member.member_epoch:
            raise _error(
                ErrorCode.fenced_member_epoch,
                f"The consumer group member has a greater member epoch ({epoch}) than the one known by "
                f"the group coordinator ({member.member_epoch}). The member must abandon all its "
                "partitions and rejoin.",
            )
        if epoch < member.member_epoch:
            subset = owned is not None and all(
                parts <= member.assigned.get(topic_id, frozenset()) for topic_id, parts in owned.items()
            )
            if epoch != member.previous_member_epoch or not subset:
                raise _error(
                    ErrorCode.fenced_member_epoch,
                    f"The consumer group member has a smaller member epoch ({epoch}) than the one known "
                    f"by the group coordinator ({member.member_epoch}). The member must abandon all its "
                    "partitions and rejoin.",
                )

    def _heartbeat(self, now_ms: int, request: HeartbeatRequest) -> HeartbeatResponse:  # noqa: C901 - follows Kafka's consumerGroupHeartbeat step by step, to be read against it
        create = request.member_epoch == 0
        group = self.groups.get(request.group_id)
        if group is None:
            if not create:
                raise _error(ErrorCode.group_id_not_found, f"Consumer group {request.group_id} not found.")
            initial = self.config.behaviour.initial_epoch
            # materialised below, once the request succeeds
            group = ConsumerGroup(request.group_id, group_epoch=initial, assignment_epoch=initial)
        member_id = request.member_id or self._new_member_id()
        if len(group.members) >= self.config.max_size and member_id not in group.members:
            raise _error(
                ErrorCode.group_max_size_reached,
                f"The consumer group has reached its maximum capacity of {self.config.max_size} members.",
            )
        replaced: ConsumerGroupMember | None = None
        if request.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not create:
                    self._member(group, member_id)
                member = ConsumerGroupMember(member_id)
            self._check_epoch(member, request.member_epoch, request.owned)
        else:
            existing = group.static_member(request.instance_id)
            if create:
                if existing is None:
                    member = group.members.get(member_id) or ConsumerGroupMember(member_id)
                else:
                    if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH and existing.classic is None:
                        raise _error(
                            ErrorCode.unreleased_instance_id,
                            f"Static member {member_id} with instance id {request.instance_id} cannot join "
                            f"the group because the instance id is owned by {existing.member_id} member.",
                        )
                    member = existing._replace(member_id=member_id, member_epoch=0, previous_member_epoch=0)
                    replaced = existing
            else:
                if existing is None:
                    raise _error(
                        ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
                    )
                if existing.member_id != member_id:
                    raise _error(
                        ErrorCode.fenced_instance_id,
                        f"Static member {member_id} with instance id {request.instance_id} was fenced by "
                        f"member {existing.member_id}.",
                    )
                self._check_epoch(existing, request.member_epoch, request.owned)
                member = existing
        is_new = member_id not in group.members and replaced is None

        updated = updated_member(member, request)
        # hasMemberSubscriptionChanged: names only (a new member starts with none, so joining with
        # names bumps the group epoch and joining with only a regex waits for its resolution).
        names_changed = updated.subscribed_topic_names != member.subscribed_topic_names
        regex_changed = updated.subscribed_topic_regex != member.subscribed_topic_regex
        regex_resolved = (
            maybe_update_regexes(self, now_ms, group, member, updated) if regex_changed else False
        )
        if not regex_changed:
            maybe_refresh_regexes(self, now_ms, group, member, updated, require=False)
        self.groups[group.group_id] = group
        if replaced is not None:
            # replaceMember: the new id takes the departed member's target; timers stay (they no-op).
            target = self._last_target(group, replaced)
            group.remove_member(replaced.member_id)
            group.update_member(member)
            if target:
                group.target[member.member_id] = target
        # updateSubscriptionMetadata: a subscription change, or a change in what the metadata image
        # says of the subscribed topics (Kafka's metadata hash; a topic created after the members
        # subscribed to it), bumps the group epoch once.
        metadata_hash = self._metadata_hash(self._subscribed_names(group, updated))
        fresh = self.config.behaviour.moves_new_group_off_epoch_zero and group.group_epoch == 0
        if names_changed or regex_resolved or fresh or metadata_hash != group.metadata_hash:
            group.group_epoch += 1
            group.metadata_hash = metadata_hash
        group_epoch = group.group_epoch
        target_epoch, target = self._maybe_update_target(now_ms, group, group_epoch, member, updated)
        reconciled = updated
        if names_changed or regex_changed or not updated.is_reconciled_to(target_epoch):
            reconciled = reconcile(
                updated,
                target_epoch,
                target,
                self.member_topic_ids(group, updated),
                group.owner_of,
                request.owned,
                names_changed or regex_changed,
            )
            if reconciled != updated:
                key = f"rebalance-timeout-{group.group_id}-{member_id}"
                if reconciled.state is MemberState.UNREVOKED_PARTITIONS:
                    self._schedule_rebalance_timeout(
                        now_ms,
                        group.group_id,
                        member_id,
                        reconciled.member_epoch,
                        reconciled.rebalance_timeout_ms,
                    )
                else:
                    self.timers.cancel(key)
        group.update_member(reconciled)
        if is_new or replaced is not None:
            self.events.append(
                ConsumerGroupEvent(
                    now_ms, group.group_id, "member_joined", member_id, reconciled.member_epoch
                )
            )
        self._schedule_session_timeout(now_ms, group.group_id, member_id)
        full = (
            request.rebalance_timeout_ms != -1
            and (request.subscribed_topic_names is not None or request.subscribed_topic_regex is not None)
            and request.owned is not None
        )
        changed = dict(reconciled.assigned) != dict(member.assigned)
        return HeartbeatResponse(
            member_id=member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            assignment=dict(reconciled.assigned) if request.member_epoch == 0 or full or changed else None,
        )

    @staticmethod
    def _last_target(group: ConsumerGroup, member: ConsumerGroupMember) -> Partitions:
        return group.target.get(member.member_id, {})

    def _maybe_update_target(
        self,
        now_ms: int,
        group: ConsumerGroup,
        group_epoch: int,
        member: ConsumerGroupMember,
        updated: ConsumerGroupMember,
    ) -> tuple[int, Partitions]:
        """maybeUpdateTargetAssignment (target.py)."""
        return targets.maybe_update_target(self, now_ms, group, group_epoch, updated)

    def _preferred_assignor(
        self, group: ConsumerGroup, member: ConsumerGroupMember, updated: ConsumerGroupMember
    ) -> str:
        """ConsumerGroup.computePreferredServerAssignor (target.py)."""
        return targets.preferred_assignor(self, group, updated)

    def _schedule_session_timeout(
        self, now_ms: int, group_id: str, member_id: str, timeout_ms: int | None = None
    ) -> None:
        """scheduleConsumerGroupSessionTimeout; a classic member's own session timeout if given."""
        timeout = self.config.session_timeout_ms if timeout_ms is None else timeout_ms
        found = self.session_timer(group_id, member_id)
        self.timers.schedule(found[0], now_ms + timeout, found[1])

    def session_timer(self, group_id: str, member_id: str) -> tuple[str, Callable[[int], None], str]:
        """The key and action of a member's session timer, and its rebalance timer's key: made
        once and kept in its group (`ConsumerGroup.session_timers`) while the group exists."""
        group = self.groups.get(group_id)
        timers = None if group is None else group.session_timers
        found = None if timers is None else timers.get(member_id)
        if found is None:

            def expire(at_ms: int) -> None:
                why = "the member session expired"
                self._fence_operation(at_ms, group_id, member_id, "member_expired", why)

            key = f"session-timeout-{group_id}-{member_id}"
            found = (key, expire, f"rebalance-timeout-{group_id}-{member_id}")
            if timers is not None:  # the keys and action of a member's timers, made once
                timers[member_id] = found
        return found

    def _schedule_rebalance_timeout(
        self, now_ms: int, group_id: str, member_id: str, epoch: int, timeout_ms: int
    ) -> None:
        def expire(at_ms: int) -> None:
            group = self.groups.get(group_id)
            member = None if group is None else group.members.get(member_id)
            if member is not None and member.member_epoch == epoch:
                self._fence(
                    at_ms,
                    group,  # type: ignore[arg-type]
                    member,
                    "member_fenced",
                    f"it failed to transition from epoch {epoch} within {timeout_ms}ms",
                )

        self.timers.schedule(f"rebalance-timeout-{group_id}-{member_id}", now_ms + timeout_ms, expire)

    def _fence_operation(self, now_ms: int, group_id: str, member_id: str, kind: str, why: str) -> None:
        group = self.groups.get(group_id)
        member = None if group is None else group.members.get(member_id)
        if group is not None and member is not None:
            self._fence(now_ms, group, member, kind, why)

    def _fence(
        self, now_ms: int, group: ConsumerGroup, member: ConsumerGroupMember, kind: str, why: str
    ) -> None:
        """consumerGroupFenceMembers: the online downgrade (`on_fence`) first, else remove."""
        for key in ("session-timeout", "rebalance-timeout", "consumer-join", "consumer-sync"):
            self.timers.cancel(f"{key}-{group.group_id}-{member.member_id}")
        if self.on_fence is not None and self.on_fence(now_ms, group, member):
            self.events.append(
                ConsumerGroupEvent(now_ms, group.group_id, kind, member.member_id, group.group_epoch, why)
            )
            return
        group.remove_member(member.member_id)
        still = group.regex_counts  # the members left per regex (a walk over them, per leave, before)
        for regex in [r for r in group.resolved_regexes if r not in still]:
            del group.resolved_regexes[regex]  # maybeDeleteResolvedRegularExpressions
        group.group_epoch += 1
        group.metadata_hash = self._metadata_hash(self._subscribed_names(group, None))
        for key in ("session-timeout", "rebalance-timeout"):
            self.timers.cancel(f"{key}-{group.group_id}-{member.member_id}")
        self.events.append(
            ConsumerGroupEvent(now_ms, group.group_id, kind, member.member_id, group.group_epoch, why)
        )
        if not group.members and self.on_group_empty is not None:
            self.on_group_empty(group.group_id)

    def _leave(self, now_ms: int, request: HeartbeatRequest) -> HeartbeatResponse:
        """consumerGroupLeave."""
        group = self._group(request.group_id)
        if request.instance_id is None:
            member = self._member(group, request.member_id)
        else:
            found = group.static_member(request.instance_id)
            if found is None:
                raise _error(ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown.")
            if found.member_id != request.member_id:
                raise _error(
                    ErrorCode.fenced_instance_id,
                    f"Static member {request.member_id} with instance id {request.instance_id} was fenced by "
                    f"member {found.member_id}.",
                )
            member = found
            if request.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # consumerGroupStaticMemberGroupLeave: keeps its partitions, epoch -2, no epoch bump.
                group.update_member(
                    member._replace(member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
                )
                self.events.append(
                    ConsumerGroupEvent(now_ms, group.group_id, "member_left", member.member_id, -2, "static")
                )
                return HeartbeatResponse(
                    member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
                )
        self._fence(now_ms, group, member, "member_left", "the member left")
        return HeartbeatResponse(member_id=request.member_id, member_epoch=request.member_epoch)

    # -- ConsumerGroupDescribe -------------------------------------------------------------------
    def describe(self, group_ids: Iterable[str]) -> list[DescribedGroup]:
        """GroupMetadataManager.consumerGroupDescribe (`describe.describe_groups`)."""
        return describe_groups(self, group_ids)


__all__ = ["ConsumerGroupCoordinator"]  # its value types are `consumer.types`' (imported from there)
