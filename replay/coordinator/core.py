"""The reference classic group coordinator: Kafka's state machine, sans-IO, in virtual time.

The specification is Kafka's own code; each handler names the method it follows:
- core/src/main/scala/kafka/coordinator/group/GroupCoordinator.scala (pre-3.7 coordinator, the
  default on 3.9): handleJoinGroup, doNewMemberJoinGroup, doStaticNewMemberJoinGroup,
  doDynamicNewMemberJoinGroup, doCurrentMemberJoinGroup, updateStaticMemberAndRebalance,
  handleSyncGroup/doSyncGroup, handleHeartbeat, handleLeaveGroup, handleCommitOffsets,
  prepareRebalance, onCompleteJoin, onExpirePendingSync, onExpireHeartbeat;
- group-coordinator/.../GroupMetadataManager.java (new coordinator): classicGroupJoin*,
  updateStaticMemberThenRebalanceOrCompleteJoin, completeClassicGroupJoin, classicGroupSync,
  classicGroupHeartbeat, classicGroupLeave and its keyed timers `heartbeat-{group}-{member}`,
  `join-{group}`, `sync-{group}`, which this module uses as well.

Kafka's purgatory operations become keyed timers: DelayedHeartbeat -> `heartbeat-...`,
DelayedJoin/InitialDelayedJoin -> `join-...`, DelayedSync -> `sync-...`. Log appends
(storeGroup, storeOffsets) complete immediately. Parked JoinGroup/SyncGroup requests are answered
by a later `handle` or `advance` with a `Respond` carrying the parked request's context.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from proxy.wire.apis import ApiKey
from replay.coordinator import responses as R
from replay.coordinator.group import ClassicGroup, CommittedOffset, Member, Protocols
from replay.coordinator.timers import KeyedTimers
from replay.coordinator.types import (
    CoordinatorConfig,
    GroupEvent,
    GroupEventKind,
    GroupState,
    KafkaBehaviour,
    Output,
    RequestContext,
    Respond,
)

NONE = 0
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
UNSUPPORTED_VERSION = 35
INVALID_REQUEST = 42
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
GROUP_MAX_SIZE_REACHED = 81
FENCED_INSTANCE_ID = 82

UNKNOWN_SERVER_ERROR = -1

UNKNOWN_MEMBER = ""  # JoinGroupRequest.UNKNOWN_MEMBER_ID

log = logging.getLogger("group_replay.coordinator")

JOIN_GROUP, HEARTBEAT, LEAVE_GROUP, SYNC_GROUP = 11, 12, 13, 14
OFFSET_COMMIT, OFFSET_FETCH, FIND_COORDINATOR, DESCRIBE_GROUPS, LIST_GROUPS = 8, 9, 10, 15, 16

# The (api_key, min, max) versions this coordinator answers; the server adds its own APIs.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = {
    JOIN_GROUP: (0, 9),
    SYNC_GROUP: (0, 5),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    OFFSET_COMMIT: (2, 9),
    OFFSET_FETCH: (1, 9),
    FIND_COORDINATOR: (0, 6),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 5),
}


_MS: dict[Any, int] = {}


def _ms(duration: Any) -> int:
    """kio's i32Timedelta -> whole milliseconds (memoised: clients send a handful of values)."""
    ms = _MS.get(duration)
    if ms is None:
        ms = int(duration.days * 86_400_000 + duration.seconds * 1000 + duration.microseconds // 1000)
        if len(_MS) < 4096:
            _MS[duration] = ms
    return ms


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


CLEANUP_KEY = "cleanup-group-metadata"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


class UnsupportedRequest(ValueError):
    """A request whose API the coordinator does not implement (the server answers those)."""


class CoordinatorFault(RuntimeError):
    """A handler failed and no error response can be built for its API. `outputs` holds what
    the coordinator produced before the failure (answers to other connections); the caller
    delivers them and drops the failed request's connection."""

    def __init__(self, message: str, outputs: list[Output]) -> None:
        super().__init__(message)
        self.outputs = outputs


class GroupCoordinator:
    """`handle(now_ms, context, request)`, `advance(now_ms)`, `next_deadline()`.

    Time only moves forward: `now_ms` smaller than a previous call is treated as that call's
    time. Outputs come back in the order Kafka would produce them.
    """

    def __init__(self, config: CoordinatorConfig | None = None) -> None:
        self.config = config or CoordinatorConfig()
        self.groups: dict[str, ClassicGroup] = {}
        self.timers = KeyedTimers()
        self._out: list[Output] = []
        self._now_ms = 0
        self._member_seq = 0
        # Groups whose `join-` timer is an InitialDelayedJoin (it never completes early).
        self._initial_join_pending: set[str] = set()
        self._handlers: dict[int, Callable[[RequestContext, Any], None]] = {
            JOIN_GROUP: self._join_group,
            SYNC_GROUP: self._sync_group,
            HEARTBEAT: self._heartbeat,
            LEAVE_GROUP: self._leave_group,
            OFFSET_COMMIT: self._offset_commit,
            OFFSET_FETCH: self._offset_fetch,
            FIND_COORDINATOR: self._find_coordinator,
            DESCRIBE_GROUPS: self._describe_groups,
            LIST_GROUPS: self._list_groups,
        }
        self._handler_by_type: dict[type[Any], Callable[[RequestContext, Any], None]] = {}
        # The last faults (a handler or timer that raised): what `log` also reports.
        self.faults: deque[str] = deque(maxlen=100)
        self.fault_count = 0

    # --- public API --------------------------------------------------------------------------
    def handle(self, now_ms: int, context: RequestContext, request: Any) -> list[Output]:
        """Process one request. Timers due at `now_ms` fire first (Kafka's timer thread runs
        concurrently; firing them first keeps runs deterministic)."""
        self._fire_due(now_ms)
        request_type = type(request)
        handler = self._handler_by_type.get(request_type)
        if handler is None:
            api_key = int(request_type.__api_key__)
            handler = self._handlers.get(api_key)
            if handler is None:
                raise UnsupportedRequest(f"api_key {api_key} is not a group coordinator API")
            self._handler_by_type[request_type] = handler
        try:
            handler(context, request)
        except Exception as exc:
            self._request_failed(context, request, exc)
        out, self._out = self._out, []
        return out

    def advance(self, now_ms: int) -> list[Output]:
        """Fire every timer due at or before `now_ms`."""
        self._fire_due(now_ms)
        out, self._out = self._out, []
        return out

    def next_deadline(self) -> int | None:
        return self.timers.next_deadline()

    def supports(self, api_key: int) -> bool:
        return api_key in self._handlers

    # --- plumbing ----------------------------------------------------------------------------
    def _fire_due(self, now_ms: int) -> None:
        if now_ms > self._now_ms:
            self._now_ms = now_ms
        now = self._now_ms
        timers = self.timers
        next_deadline = timers.next_deadline()
        if next_deadline is None or next_deadline > now:
            return
        while True:
            due = timers.pop_due(now)
            if due is None:
                return
            key, action = due
            try:
                action(now)
            except Exception as exc:
                # Kafka runs expirations on a timer thread (Scala: SystemTimer's executor runs
                # DelayedOperation.run, which marks the operation completed before onComplete;
                # new coordinator: CoordinatorRuntime logs "Failed to run timer" and reverts the
                # operation's records). Either way the failed timer is gone, the group keeps the
                # state the exception left, and every other group's timers keep running.
                self._fault(f"timer {key}", exc)

    def _fault(self, where: str, exc: Exception) -> None:
        self.fault_count += 1
        message = f"{where} failed at {self._now_ms} ms: {type(exc).__name__}: {exc}"
        self.faults.append(message)
        log.warning("%s", message, exc_info=exc)

    def _request_failed(self, ctx: RequestContext, request: Any, exc: Exception) -> None:
        """A handler raised. Kafka's KafkaApis.handle catches any Throwable and answers the
        request with `request.getErrorResponse(UNKNOWN_SERVER_ERROR)` (RequestHandlerHelper.
        handleError), keeping the connection; the group keeps whatever state the exception left
        (Scala) or its records are reverted (new coordinator). The same error response is sent
        here for the membership APIs; for the others a `CoordinatorFault` tells the server to
        close this one connection."""
        api_key = int(type(request).__api_key__)
        self._fault(f"api_key {api_key} v{ctx.api_version} from connection {ctx.connection_id}", exc)
        v = ctx.api_version
        match api_key:
            case ApiKey.JOIN_GROUP:
                self._respond(ctx, R.join_group(v, UNKNOWN_SERVER_ERROR, member_id=UNKNOWN_MEMBER))
            case ApiKey.SYNC_GROUP:
                self._respond(ctx, R.sync_group(v, UNKNOWN_SERVER_ERROR))
            case ApiKey.HEARTBEAT:
                self._respond(ctx, R.heartbeat(v, UNKNOWN_SERVER_ERROR))
            case ApiKey.LEAVE_GROUP:
                self._respond(ctx, R.leave_group(v, UNKNOWN_SERVER_ERROR, []))
            case _:
                out, self._out = self._out, []
                raise CoordinatorFault(f"api_key {api_key}: {type(exc).__name__}: {exc}", out) from exc

    def _respond(self, context: RequestContext, response: Any) -> None:
        self._out.append(Respond(context, response))

    def _event(
        self,
        kind: GroupEventKind,
        group: ClassicGroup,
        member: Member | None = None,
        *,
        member_id: str | None = None,
        reason: str = "",
        error_code: int = 0,
        skip_assignment: bool | None = None,
        assignment: bytes | None = None,
        from_state: GroupState | None = None,
        to_state: GroupState | None = None,
    ) -> None:
        self._out.append(
            GroupEvent(
                ts_ms=self._now_ms,
                event=kind,
                group_id=group.group_id,
                generation_id=group.generation_id,
                member_id=member_id if member_id is not None else (member.member_id if member else ""),
                group_instance_id=member.group_instance_id if member else None,
                client_id=member.client_id if member else "",
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                is_leader=member is not None and group.is_leader(member.member_id),
                skip_assignment=skip_assignment,
                join_api_version=member.join_api_version if member else -1,
                error_code=error_code,
                assignment=assignment,
                from_state=from_state,
                to_state=to_state,
                reason=reason,
            )
        )

    def _transition(self, group: ClassicGroup, target: GroupState, reason: str = "") -> None:
        previous = group.transition_to(target, self._now_ms)
        self._event(GroupEventKind.STATE_CHANGED, group, from_state=previous, to_state=target, reason=reason)
        if target is GroupState.EMPTY:
            self._schedule_cleanup()

    # --- group metadata cleanup ---------------------------------------------------------------
    def _create_group(self, group_id: str) -> ClassicGroup:
        """GroupMetadataManager.getOrMaybeCreateClassicGroup: a new group is Empty."""
        group = self.groups[group_id] = ClassicGroup(group_id, state_timestamp_ms=self._now_ms)
        self._schedule_cleanup()
        return group

    def _schedule_cleanup(self) -> None:
        """Kafka runs cleanupGroupMetadata every offsets.retention.check.interval.ms from the
        coordinator's start (GroupMetadataManager.startup schedules "delete-expired-group-
        metadata" at a fixed rate). It can only change something while some group is Empty or
        holds a standalone consumer's offsets, so the timer is kept only while one does: an idle
        coordinator has no deadline."""
        if self.timers.is_scheduled(CLEANUP_KEY):
            return
        interval = self.config.offsets_retention_check_interval_ms
        if interval <= 0:
            return
        self.timers.schedule(
            CLEANUP_KEY, (self._now_ms // interval + 1) * interval, self._cleanup_group_metadata
        )

    def _cleanup_group_metadata(self, now_ms: int) -> None:
        """GroupMetadataManager.cleanupGroupMetadata (Scala) / GroupCoordinatorShard.
        cleanupGroupMetadata -> OffsetMetadataManager.cleanupExpiredOffsets and
        GroupMetadataManager.maybeDeleteGroup: expire offsets, then an Empty group without offsets
        becomes Dead and is removed."""
        retention_ms = self.config.offsets_retention_ms
        keep_checking = False
        for group_id, group in list(self.groups.items()):
            group.remove_expired_offsets(now_ms, retention_ms)
            if group.is_in(GroupState.EMPTY) and not group.offsets:
                self._transition(group, GroupState.DEAD, "empty group without offsets: metadata cleaned up")
                del self.groups[group_id]
                self._initial_join_pending.discard(group_id)
            elif group.is_in(GroupState.EMPTY) or group.protocol_type is None:
                keep_checking = True
        if keep_checking:
            self._schedule_cleanup()

    def _generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """GroupMetadata.generateMemberId: `{instance id or client id}-{uuid}`; the uuid is a
        counter here so that runs are reproducible."""
        self._member_seq += 1
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{self._member_seq:08x}-0000-4000-8000-000000000000"

    def _validate_member(self, group: ClassicGroup, member_id: str, group_instance_id: str | None) -> int:
        """GroupCoordinator.validateCurrentMember / ClassicGroup.validateMember."""
        if group_instance_id is not None:
            current = group.static_members.get(group_instance_id)
            if current is None:
                return UNKNOWN_MEMBER_ID
            if current != member_id:
                return FENCED_INSTANCE_ID
            return NONE
        return NONE if member_id in group.members else UNKNOWN_MEMBER_ID

    def _fenced(self, group: ClassicGroup, member_id: str, group_instance_id: str | None, why: str) -> None:
        current = group.static_members.get(group_instance_id or "")
        member = group.members.get(current) if current else None
        self._out.append(
            GroupEvent(
                ts_ms=self._now_ms,
                event=GroupEventKind.MEMBER_FENCED,
                group_id=group.group_id,
                generation_id=group.generation_id,
                member_id=member_id,
                group_instance_id=group_instance_id,
                client_id=member.client_id if member else "",
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                error_code=FENCED_INSTANCE_ID,
                reason=why,
            )
        )

    # --- JoinGroup ---------------------------------------------------------------------------
    def _join_error(self, ctx: RequestContext, member_id: str, code: int) -> None:
        self._respond(ctx, R.join_group(ctx.api_version, code, member_id=member_id))

    def _join_group(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleJoinGroup (+ KafkaApis.handleJoinGroupRequest version rules)."""
        api_version = ctx.api_version
        group_id: str = request.group_id
        member_id: str = request.member_id
        group_instance_id: str | None = request.group_instance_id if api_version >= 5 else None
        session_timeout_ms = _ms(request.session_timeout)
        # JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout (KafkaApis).
        rebalance_timeout_ms = _ms(request.rebalance_timeout) if api_version >= 1 else session_timeout_ms
        protocols: Protocols = tuple([(p.name, p.metadata) for p in request.protocols])
        protocol_type: str = request.protocol_type

        if not group_id:
            self._join_error(ctx, member_id, INVALID_GROUP_ID)
            return
        if not (
            self.config.group_min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.group_max_session_timeout_ms
        ):
            self._join_error(ctx, member_id, INVALID_SESSION_TIMEOUT)
            return
        is_unknown_member = member_id == UNKNOWN_MEMBER
        group = self.groups.get(group_id)
        if group is None:
            if not is_unknown_member:
                self._join_error(ctx, member_id, UNKNOWN_MEMBER_ID)
                return
            group = self._create_group(group_id)

        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            self._join_error(ctx, UNKNOWN_MEMBER, GROUP_MAX_SIZE_REACHED)
        elif is_unknown_member:
            self._join_new_member(
                ctx,
                group,
                group_instance_id,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
        else:
            self._join_current_member(
                ctx,
                group,
                member_id,
                group_instance_id,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _accept_joining_member(self, group: ClassicGroup, member_id: str) -> bool:
        """GroupCoordinator.acceptJoiningMember (group.max.size)."""
        max_size = self.config.group_max_size
        match group.state:
            case GroupState.EMPTY | GroupState.DEAD:
                return True
            case GroupState.PREPARING_REBALANCE:
                member = group.members.get(member_id)
                return (member is not None and member.awaiting_join is not None) or (
                    group.num_awaiting_join < max_size
                )
            case _:
                return member_id in group.members or len(group.members) < max_size

    def _join_new_member(
        self,
        ctx: RequestContext,
        group: ClassicGroup,
        group_instance_id: str | None,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
    ) -> None:
        """GroupCoordinator.doNewMemberJoinGroup / GroupMetadataManager.classicGroupJoinNewMember."""
        if group.is_in(GroupState.DEAD):
            self._join_error(ctx, UNKNOWN_MEMBER, COORDINATOR_NOT_AVAILABLE)
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            self._join_error(ctx, UNKNOWN_MEMBER, INCONSISTENT_GROUP_PROTOCOL)
            return
        new_member_id = self._generate_member_id(ctx.client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.static_member_id(group_instance_id)
            if old_member_id is not None:
                self._update_static_member_and_rebalance(
                    ctx,
                    group,
                    old_member_id,
                    new_member_id,
                    group_instance_id,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                )
            else:
                self._add_member_and_rebalance(
                    ctx,
                    group,
                    new_member_id,
                    group_instance_id,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    protocol_type,
                    protocols,
                )
        elif ctx.api_version >= 4:
            # doDynamicNewMemberJoinGroup with requireKnownMemberId (JoinGroup v4+, KIP-394).
            group.pending_members.add(new_member_id)
            group_id = group.group_id
            self.timers.schedule(
                heartbeat_key(group_id, new_member_id),
                self._now_ms + session_timeout_ms,
                lambda now: self._expire_heartbeat(group_id, new_member_id),
            )
            self._join_error(ctx, new_member_id, MEMBER_ID_REQUIRED)
        else:
            self._add_member_and_rebalance(
                ctx,
                group,
                new_member_id,
                None,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )

    def _join_current_member(
        self,
        ctx: RequestContext,
        group: ClassicGroup,
        member_id: str,
        group_instance_id: str | None,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
    ) -> None:
        """GroupCoordinator.doCurrentMemberJoinGroup / classicGroupJoinExistingMember."""
        if group.is_in(GroupState.DEAD):
            self._join_error(ctx, member_id, COORDINATOR_NOT_AVAILABLE)
            return
        if not group.supports_protocols(protocol_type, {name for name, _ in protocols}):
            self._join_error(ctx, member_id, INCONSISTENT_GROUP_PROTOCOL)
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                # Kafka throws IllegalStateException here (-> UNKNOWN_SERVER_ERROR); a pending
                # member is always dynamic.
                self._join_error(ctx, member_id, -1)
                return
            self._add_member_and_rebalance(
                ctx,
                group,
                member_id,
                None,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
            )
            return
        code = self._validate_member(group, member_id, group_instance_id)
        if code != NONE:
            if code == FENCED_INSTANCE_ID:
                self._fenced(group, member_id, group_instance_id, "join-group")
            self._join_error(ctx, member_id, code)
            return
        member = group.members[member_id]
        member.join_api_version = ctx.api_version
        match group.state:
            case GroupState.PREPARING_REBALANCE:
                self._update_member_and_rebalance(
                    ctx, group, member, protocols, rebalance_timeout_ms, session_timeout_ms, "rejoin"
                )
            case GroupState.COMPLETING_REBALANCE:
                if member.matches(protocols):
                    # The member lost its JoinGroup response: answer with the current generation.
                    self._respond(ctx, self._join_result(ctx.api_version, group, member, leader_view=True))
                else:
                    self._update_member_and_rebalance(
                        ctx,
                        group,
                        member,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        "metadata changed",
                    )
            case GroupState.STABLE:
                if group.is_leader(member_id):
                    # The leader's JoinGroup forces a rebalance (topic metadata changes).
                    self._update_member_and_rebalance(
                        ctx,
                        group,
                        member,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        "leader rejoin",
                    )
                elif not member.matches(protocols):
                    self._update_member_and_rebalance(
                        ctx,
                        group,
                        member,
                        protocols,
                        rebalance_timeout_ms,
                        session_timeout_ms,
                        "metadata changed",
                    )
                else:
                    self._respond(ctx, self._join_result(ctx.api_version, group, member, leader_view=False))
            case _:
                self._join_error(ctx, member_id, UNKNOWN_MEMBER_ID)

    def _join_result(
        self, api_version: int, group: ClassicGroup, member: Member, *, leader_view: bool
    ) -> Any:
        members = group.current_member_metadata() if leader_view and group.is_leader(member.member_id) else []
        return R.join_group(
            api_version,
            NONE,
            member_id=member.member_id,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader_id or "",
            members=members,
        )

    def _add_member_and_rebalance(
        self,
        ctx: RequestContext,
        group: ClassicGroup,
        member_id: str,
        group_instance_id: str | None,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: Protocols,
    ) -> None:
        """GroupCoordinator.addMemberAndRebalance."""
        member = Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=ctx.client_id,
            client_host=ctx.client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            join_api_version=ctx.api_version,
            is_new=True,
        )
        if group.is_in(GroupState.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, ctx)
        self._event(GroupEventKind.MEMBER_JOINED, group, member, reason="new member")
        # New members cannot heartbeat yet: their JoinGroup times out after
        # group.new.member.join.timeout (NewMemberJoinTimeoutMs, 5 minutes).
        self._schedule_heartbeat(group, member, self.config.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance(group, f"adding new member {member_id}")

    def _update_static_member_and_rebalance(
        self,
        ctx: RequestContext,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
    ) -> None:
        """GroupCoordinator.updateStaticMemberAndRebalance /
        GroupMetadataManager.updateStaticMemberThenRebalanceOrCompleteJoin."""
        current_leader = group.leader_id
        old = group.members[old_member_id]
        # replaceStaticMember fences a duplicate that is parked in JoinGroup or SyncGroup.
        parked_join = group.take_join(old)
        if parked_join is not None:
            self._join_error(parked_join, old_member_id, FENCED_INSTANCE_ID)
        parked_sync = group.take_sync(old)
        if parked_sync is not None:
            self._respond(parked_sync, R.sync_group(parked_sync.api_version, FENCED_INSTANCE_ID))
        if parked_join is not None or parked_sync is not None:
            self._fenced(group, old_member_id, group_instance_id, "replaced while parked")
        self.timers.cancel(heartbeat_key(group.group_id, old_member_id))
        # The replacement keeps the old client id and host (MemberMetadata.clientId is a val;
        # ClassicGroup.replaceStaticMember copies them), so DescribeGroups shows the first ones.
        member = group.replace_static_member(group_instance_id, old_member_id, new_member_id)
        member.join_api_version = ctx.api_version
        self._schedule_heartbeat(group, member, member.session_timeout_ms)
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, ctx)
        self._event(
            GroupEventKind.MEMBER_JOINED, group, member, reason=f"static member replaces {old_member_id}"
        )
        match group.state:
            case GroupState.STABLE:
                if group.protocol_name == group.select_protocol():
                    # No rebalance: the member gets the current generation and its old assignment.
                    parked = group.take_join(member)
                    assert parked is not None
                    if ctx.api_version >= 9:
                        # KIP-814: the rejoining leader learns it leads, with every member's
                        # metadata, and skips the assignment.
                        is_leader = group.is_leader(new_member_id)
                        response = R.join_group(
                            ctx.api_version,
                            NONE,
                            member_id=new_member_id,
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=group.leader_id or "",
                            skip_assignment=is_leader,
                            members=group.current_member_metadata() if is_leader else [],
                        )
                    else:
                        # Before v9 the old leader id is returned so that a rejoining leader does
                        # not assign (its assignment would not be propagated by a Stable group).
                        response = R.join_group(
                            ctx.api_version,
                            NONE,
                            member_id=new_member_id,
                            generation_id=group.generation_id,
                            protocol_type=group.protocol_type,
                            protocol_name=group.protocol_name,
                            leader=current_leader or "",
                            members=[],
                        )
                    self._respond(parked, response)
                else:
                    self._maybe_prepare_rebalance(group, "static member rejoined with a protocol change")
            case GroupState.COMPLETING_REBALANCE:
                # The leader may already have been sent the old member id: rebalance again.
                self._prepare_rebalance(group, f"static member {group_instance_id} rejoined during sync")
            case GroupState.PREPARING_REBALANCE:
                pass
            case _:
                raise AssertionError(
                    f"group {group.group_id} in {group.state} when static member {group_instance_id} rejoined"
                )

    def _update_member_and_rebalance(
        self,
        ctx: RequestContext,
        group: ClassicGroup,
        member: Member,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        reason: str,
    ) -> None:
        group.update_member(member, protocols, rebalance_timeout_ms, session_timeout_ms, ctx)
        self._maybe_prepare_rebalance(group, f"{reason}: {member.member_id}")

    def _maybe_prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: ClassicGroup, reason: str) -> None:
        """GroupCoordinator.prepareRebalance."""
        if group.is_in(GroupState.COMPLETING_REBALANCE):
            self._reset_and_propagate_assignment_error(group, REBALANCE_IN_PROGRESS)
        group.pending_sync_members.clear()
        self.timers.cancel(sync_key(group.group_id))
        was_empty = group.is_in(GroupState.EMPTY)
        rebalance_timeout_ms = group.rebalance_timeout_ms()
        self._transition(group, GroupState.PREPARING_REBALANCE, reason)
        self._event(GroupEventKind.REBALANCE_STARTED, group, reason=reason)
        if was_empty:
            delay = self.config.group_initial_rebalance_delay_ms
            self._schedule_initial_join(group, delay, delay, max(rebalance_timeout_ms - delay, 0))
        else:
            self._schedule_join(group, rebalance_timeout_ms)
            self._try_complete_join(group)

    def _schedule_join(self, group: ClassicGroup, timeout_ms: int) -> None:
        """DelayedJoin: completes when everyone rejoined, or at the rebalance timeout."""
        group_id = group.group_id
        self._initial_join_pending.discard(group_id)
        self.timers.schedule(
            join_key(group_id), self._now_ms + timeout_ms, lambda now: self._on_join_timeout(group_id)
        )

    def _schedule_initial_join(
        self, group: ClassicGroup, configured: int, delay_ms: int, remaining_ms: int
    ) -> None:
        """InitialDelayedJoin (group.initial.rebalance.delay.ms): never completes early; at expiry
        it waits again while new members keep arriving, up to the rebalance timeout."""
        group_id = group.group_id

        def fire(now: int) -> None:
            current = self.groups.get(group_id)
            if current is None:
                return
            if current.new_member_added and remaining_ms != 0:
                current.new_member_added = False
                self._schedule_initial_join(
                    current, configured, min(configured, remaining_ms), max(remaining_ms - delay_ms, 0)
                )
            else:
                self._complete_join(current)

        self.timers.schedule(join_key(group_id), self._now_ms + delay_ms, fire)
        self._initial_join_pending.add(group_id)

    def _on_join_timeout(self, group_id: str) -> None:
        group = self.groups.get(group_id)
        if group is not None:
            self._complete_join(group)

    def _try_complete_join(self, group: ClassicGroup) -> None:
        """DelayedJoin.tryComplete -> GroupCoordinator.tryCompleteJoin."""
        if group.group_id in self._initial_join_pending:
            return
        if not self.timers.is_scheduled(join_key(group.group_id)):
            return
        if group.has_all_members_joined():
            self._complete_join(group)

    def _complete_join(self, group: ClassicGroup) -> None:
        """GroupCoordinator.onCompleteJoin / GroupMetadataManager.completeClassicGroupJoin."""
        self.timers.cancel(join_key(group.group_id))
        self._initial_join_pending.discard(group.group_id)
        # Dynamic members that did not rejoin in time are removed; static ones stay (KIP-345).
        for member in [m for m in group.members.values() if m.awaiting_join is None and not m.is_static]:
            group.remove(member.member_id)
            self.timers.cancel(heartbeat_key(group.group_id, member.member_id))
            self._event(
                GroupEventKind.MEMBER_EXPIRED,
                group,
                member,
                reason="did not rejoin before the rebalance timeout",
            )
        if group.is_in(GroupState.DEAD):
            return
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: wait another rebalance timeout for session expiry to clean up.
            self._schedule_join(group, group.rebalance_timeout_ms())
            return
        # GroupMetadata.initNextGeneration
        group.generation_id += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            self._transition(group, GroupState.COMPLETING_REBALANCE, "join phase complete")
        else:
            group.protocol_name = None
            self._transition(group, GroupState.EMPTY, "join phase complete with no members")
        group.pending_sync_members.clear()
        if group.is_in(GroupState.EMPTY):
            return
        for member in group.members.values():
            parked = group.take_join(member)
            if parked is not None:
                self._respond(parked, self._join_result(parked.api_version, group, member, leader_view=True))
            self._schedule_heartbeat(group, member, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync_members.add(member.member_id)
        generation_id = group.generation_id
        group_id = group.group_id
        self.timers.schedule(
            sync_key(group_id),
            self._now_ms + group.rebalance_timeout_ms(),
            lambda now: self._expire_pending_sync(group_id, generation_id),
        )

    def _expire_pending_sync(self, group_id: str, generation_id: int) -> None:
        """GroupCoordinator.onExpirePendingSync: members that never sent SyncGroup are removed."""
        group = self.groups.get(group_id)
        if group is None or group.generation_id != generation_id:
            return
        if group.state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE):
            return
        if not group.pending_sync_members:
            return
        # A replaced static member's old id can still be pending (replaceStaticMember does not
        # clear it, in Kafka either); it sorts last and removing it is a no-op, but the group
        # still rebalances, as Kafka's does.
        order = {member_id: index for index, member_id in enumerate(group.members)}
        for member_id in sorted(group.pending_sync_members, key=lambda m: (order.get(m, len(order)), m)):
            member = group.remove(member_id)
            self.timers.cancel(heartbeat_key(group_id, member_id))
            if member is not None:
                self._event(
                    GroupEventKind.MEMBER_EXPIRED, group, member, reason="no SyncGroup before the timeout"
                )
        self._prepare_rebalance(group, "pending SyncGroup expired")

    # --- heartbeats and removal --------------------------------------------------------------
    def _schedule_heartbeat(self, group: ClassicGroup, member: Member, timeout_ms: int) -> None:
        """completeAndScheduleNextExpiration: replaces the member's `heartbeat-` timer."""
        timer = member.heartbeat_timer
        if timer is None:
            group_id = group.group_id
            member_id = member.member_id
            timer = member.heartbeat_timer = (
                heartbeat_key(group_id, member_id),
                lambda now: self._expire_heartbeat(group_id, member_id),
            )
        self.timers.schedule(timer[0], self._now_ms + timeout_ms, timer[1])

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        """GroupCoordinator.onExpireHeartbeat."""
        group = self.groups.get(group_id)
        if group is None or group.is_in(GroupState.DEAD):
            return
        if group.is_pending_member(member_id):
            self._remove_pending_member(group, member_id)
            return
        member = group.members.get(member_id)
        if member is None or member.has_satisfied_heartbeat():
            return
        self._remove_member_and_update_group(group, member, GroupEventKind.MEMBER_EXPIRED, "session timeout")

    def _remove_pending_member(self, group: ClassicGroup, member_id: str) -> None:
        group.remove(member_id)
        if group.is_in(GroupState.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_member_and_update_group(
        self, group: ClassicGroup, member: Member, kind: GroupEventKind, reason: str
    ) -> None:
        """GroupCoordinator.removeMemberAndUpdateGroup. A parked JoinGroup gets UNKNOWN_MEMBER_ID;
        a parked SyncGroup is not answered (Kafka drops the callback with the member)."""
        parked = group.take_join(member)
        if parked is not None:
            self._join_error(parked, UNKNOWN_MEMBER, UNKNOWN_MEMBER_ID)
        self._event(kind, group, member, reason=reason)
        group.remove(member.member_id)
        self.timers.cancel(heartbeat_key(group.group_id, member.member_id))
        match group.state:
            case GroupState.STABLE | GroupState.COMPLETING_REBALANCE:
                self._maybe_prepare_rebalance(group, f"{reason}: {member.member_id}")
            case GroupState.PREPARING_REBALANCE:
                if (
                    self.config.kafka_behaviour is KafkaBehaviour.NEW_COORDINATOR
                    and group.has_all_members_joined()
                ):
                    # removeMemberAndUpdateClassicGroup completes the join phase at once, even
                    # during the initial rebalance delay (the Scala InitialDelayedJoin waits).
                    self._complete_join(group)
                else:
                    self._try_complete_join(group)
            case _:
                pass

    # --- SyncGroup ---------------------------------------------------------------------------
    def _sync_group(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleSyncGroup / doSyncGroup."""
        api_version = ctx.api_version
        group_instance_id: str | None = request.group_instance_id if api_version >= 3 else None
        protocol_type: str | None = request.protocol_type if api_version >= 5 else None
        protocol_name: str | None = request.protocol_name if api_version >= 5 else None
        if not request.group_id:
            self._respond(ctx, R.sync_group(api_version, INVALID_GROUP_ID))
            return
        if api_version >= 5 and (protocol_type is None or protocol_name is None):
            # KafkaApis: SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent
            self._respond(ctx, R.sync_group(api_version, INCONSISTENT_GROUP_PROTOCOL))
            return
        group = self.groups.get(request.group_id)
        if group is None:
            self._respond(ctx, R.sync_group(api_version, UNKNOWN_MEMBER_ID))
            return
        member_id: str = request.member_id
        generation_id = int(request.generation_id)
        if group.is_in(GroupState.DEAD):
            self._respond(ctx, R.sync_group(api_version, COORDINATOR_NOT_AVAILABLE))
            return
        code = self._validate_member(group, member_id, group_instance_id)
        if code == NONE:
            if generation_id != group.generation_id:
                code = ILLEGAL_GENERATION
            elif (protocol_type is not None and protocol_type != group.protocol_type) or (
                protocol_name is not None and protocol_name != group.protocol_name
            ):
                code = INCONSISTENT_GROUP_PROTOCOL
        if code != NONE:
            if code == FENCED_INSTANCE_ID:
                self._fenced(group, member_id, group_instance_id, "sync-group")
            self._respond(ctx, R.sync_group(api_version, code))
            return
        match group.state:
            case GroupState.EMPTY:
                self._respond(ctx, R.sync_group(api_version, UNKNOWN_MEMBER_ID))
            case GroupState.PREPARING_REBALANCE:
                self._respond(ctx, R.sync_group(api_version, REBALANCE_IN_PROGRESS))
            case GroupState.COMPLETING_REBALANCE:
                member = group.members[member_id]
                member.awaiting_sync = ctx
                self._remove_pending_sync_member(group, member_id)
                if group.is_leader(member_id):
                    assignments = {a.member_id: a.assignment for a in request.assignments}
                    for m in group.members.values():
                        m.assignment = assignments.get(m.member_id, b"")
                    self._propagate_assignment(group, NONE)
                    self._transition(group, GroupState.STABLE, "leader sent the assignment")
            case GroupState.STABLE:
                self._remove_pending_sync_member(group, member_id)
                member = group.members[member_id]
                self._respond(
                    ctx,
                    R.sync_group(
                        api_version,
                        NONE,
                        assignment=member.assignment,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                    ),
                )
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
            case _:
                raise AssertionError(f"SyncGroup reached group {group.group_id} in {group.state}")

    def _remove_pending_sync_member(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync_members.discard(member_id)
        if not group.pending_sync_members:
            self.timers.cancel(sync_key(group.group_id))

    def _reset_and_propagate_assignment_error(self, group: ClassicGroup, code: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate_assignment(group, code)

    def _propagate_assignment(self, group: ClassicGroup, code: int) -> None:
        """GroupCoordinator.propagateAssignment: answer every parked SyncGroup, restart its heartbeat."""
        ok = code == NONE
        for member in group.members.values():
            if ok:
                self._event(GroupEventKind.GENERATION_COMPLETED, group, member, assignment=member.assignment)
            parked = group.take_sync(member)
            if parked is None:
                continue
            self._respond(
                parked,
                R.sync_group(
                    parked.api_version,
                    code,
                    assignment=member.assignment,
                    protocol_type=group.protocol_type if ok else None,
                    protocol_name=group.protocol_name if ok else None,
                ),
            )
            self._schedule_heartbeat(group, member, member.session_timeout_ms)

    # --- Heartbeat ---------------------------------------------------------------------------
    def _heartbeat(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleHeartbeat / validateHeartbeat."""
        api_version = ctx.api_version
        if not request.group_id:
            self._respond(ctx, R.heartbeat(api_version, INVALID_GROUP_ID))
            return
        group = self.groups.get(request.group_id)
        if group is None:
            self._respond(ctx, R.heartbeat(api_version, UNKNOWN_MEMBER_ID))
            return
        if group.is_in(GroupState.DEAD):
            self._respond(ctx, R.heartbeat(api_version, COORDINATOR_NOT_AVAILABLE))
            return
        member_id: str = request.member_id
        group_instance_id: str | None = request.group_instance_id if api_version >= 3 else None
        code = self._validate_member(group, member_id, group_instance_id)
        if code == NONE and int(request.generation_id) != group.generation_id:
            code = ILLEGAL_GENERATION
        if code == NONE:
            state = group.state
            if state is GroupState.EMPTY:
                code = UNKNOWN_MEMBER_ID
            else:
                member = group.members[member_id]
                self._schedule_heartbeat(group, member, member.session_timeout_ms)
                if state is GroupState.PREPARING_REBALANCE:
                    code = REBALANCE_IN_PROGRESS
        elif code == FENCED_INSTANCE_ID:
            self._fenced(group, member_id, group_instance_id, "heartbeat")
        self._respond(ctx, R.heartbeat(api_version, code))

    # --- LeaveGroup --------------------------------------------------------------------------
    def _leave_group(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleLeaveGroup / GroupMetadataManager.classicGroupLeave."""
        api_version = ctx.api_version
        if api_version >= 3:
            leaving: list[tuple[str, str | None]] = [
                (m.member_id, m.group_instance_id) for m in request.members
            ]
        else:
            leaving = [(request.member_id, None)]
        if not request.group_id:
            self._respond(ctx, R.leave_group(api_version, INVALID_GROUP_ID, []))
            return
        group = self.groups.get(request.group_id)
        if group is None:
            # Scala: per-member UNKNOWN_MEMBER_ID. The new coordinator's classicGroupLeave throws
            # UnknownMemberIdException, which GroupCoordinatorService.leaveGroup turns back into
            # the same per-member errors (checked against 3.9 and 4.x brokers).
            self._respond(
                ctx, R.leave_group(api_version, NONE, [(m, i, UNKNOWN_MEMBER_ID) for m, i in leaving])
            )
            return
        if group.is_in(GroupState.DEAD):
            self._respond(ctx, R.leave_group(api_version, COORDINATOR_NOT_AVAILABLE, []))
            return
        results: list[tuple[str, str | None, int]] = []
        for member_id, group_instance_id in leaving:
            if member_id == UNKNOWN_MEMBER:
                current = group.static_member_id(group_instance_id) if group_instance_id is not None else None
                if current is not None:
                    self._remove_current_member(group, current)
                    results.append((member_id, group_instance_id, NONE))
                else:
                    results.append((member_id, group_instance_id, UNKNOWN_MEMBER_ID))
            elif group.is_pending_member(member_id):
                self._remove_pending_member(group, member_id)
                self.timers.cancel(heartbeat_key(group.group_id, member_id))
                results.append((member_id, group_instance_id, NONE))
            else:
                code = self._validate_member(group, member_id, group_instance_id)
                if code == NONE:
                    self._remove_current_member(group, member_id)
                elif code == FENCED_INSTANCE_ID:
                    self._fenced(group, member_id, group_instance_id, "leave-group")
                results.append((member_id, group_instance_id, code))
        self._respond(ctx, R.leave_group(api_version, NONE, results))

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self._remove_member_and_update_group(group, member, GroupEventKind.MEMBER_LEFT, "LeaveGroup")

    # --- offsets -----------------------------------------------------------------------------
    def _offset_commit(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleCommitOffsets / validateOffsetCommit / doCommitOffsets."""
        api_version = ctx.api_version
        group_id: str = request.group_id
        generation_id = int(request.generation_id_or_member_epoch)
        member_id: str = request.member_id
        group_instance_id: str | None = request.group_instance_id if api_version >= 7 else None
        group = self.groups.get(group_id)
        code = NONE
        if group is None:
            if generation_id < 0:
                group = self._create_group(group_id)
            elif api_version >= 9 and self.config.kafka_behaviour is KafkaBehaviour.NEW_COORDINATOR:
                # OffsetMetadataManager.validateOffsetCommit: v9+ says GROUP_ID_NOT_FOUND.
                code = GROUP_ID_NOT_FOUND
            else:
                code = ILLEGAL_GENERATION
        if group is not None and code == NONE:
            code = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
            if code == NONE:
                match group.state:
                    case GroupState.STABLE | GroupState.PREPARING_REBALANCE:
                        member = group.members[member_id]
                        self._schedule_heartbeat(group, member, member.session_timeout_ms)
                    case GroupState.COMPLETING_REBALANCE:
                        code = REBALANCE_IN_PROGRESS
                    case _:
                        pass
            elif code == FENCED_INSTANCE_ID:
                self._fenced(group, member_id, group_instance_id, "offset-commit")
        topic_cls = R.nested(OFFSET_COMMIT, api_version, "OffsetCommitResponseTopic")
        partition_cls = R.nested(OFFSET_COMMIT, api_version, "OffsetCommitResponsePartition")
        by_id = api_version >= 10
        topics = []
        err = R.error(code)
        for topic in request.topics:
            name = topic.topic_id if by_id else topic.name
            for p in topic.partitions:
                if code == NONE and group is not None:
                    group.offsets[(str(name), int(p.partition_index))] = CommittedOffset(
                        offset=int(p.committed_offset),
                        leader_epoch=int(getattr(p, "committed_leader_epoch", -1)),
                        metadata=p.committed_metadata,
                        commit_ts_ms=self._now_ms,
                    )
            partitions = tuple(
                partition_cls(partition_index=p.partition_index, error_code=err) for p in topic.partitions
            )
            if by_id:
                topics.append(topic_cls(topic_id=name, partitions=partitions))
            else:
                topics.append(topic_cls(name=name, partitions=partitions))
        self._respond(ctx, R.make(OFFSET_COMMIT, api_version, topics=tuple(topics)))

    def _validate_offset_commit(
        self, group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> int:
        if group.is_in(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return NONE
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER or group_instance_id is not None:
            code = self._validate_member(group, member_id, group_instance_id)
            if code == NONE and generation_id != group.generation_id:
                code = ILLEGAL_GENERATION
            return code
        if not group.is_in(GroupState.EMPTY):
            return UNKNOWN_MEMBER_ID
        return NONE

    def _offset_fetch(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleFetchOffsets: committed offsets regardless of the group state
        (-1 when none); v8+ batches groups."""
        api_version = ctx.api_version
        if api_version >= 8:
            group_cls = R.nested(OFFSET_FETCH, api_version, "OffsetFetchResponseGroup")
            groups = tuple(
                group_cls(
                    group_id=g.group_id,
                    topics=self._fetch_topics(
                        api_version,
                        g.group_id,
                        g.topics,
                        "OffsetFetchResponseTopics",
                        "OffsetFetchResponsePartitions",
                    ),
                    error_code=R.error(NONE),
                )
                for g in request.groups
            )
            self._respond(ctx, R.make(OFFSET_FETCH, api_version, groups=groups))
            return
        topics = self._fetch_topics(
            api_version,
            request.group_id,
            request.topics,
            "OffsetFetchResponseTopic",
            "OffsetFetchResponsePartition",
        )
        self._respond(ctx, R.make(OFFSET_FETCH, api_version, topics=topics, error_code=R.error(NONE)))

    def _fetch_topics(
        self, api_version: int, group_id: str, requested: Any, topic_name: str, partition_name: str
    ) -> tuple[Any, ...]:
        topic_cls = R.nested(OFFSET_FETCH, api_version, topic_name)
        partition_cls = R.nested(OFFSET_FETCH, api_version, partition_name)
        group = self.groups.get(group_id)
        offsets = group.offsets if group is not None else {}
        wanted: list[tuple[str, list[int]]]
        if requested is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            wanted = list(by_topic.items())
        else:
            wanted = [(t.name, [int(p) for p in t.partition_indexes]) for t in requested]
        none = R.error(NONE)
        out = []
        for topic, partitions in wanted:
            entries = []
            for partition in partitions:
                committed = offsets.get((topic, partition))
                entries.append(
                    R.build(
                        partition_cls,
                        {
                            "partition_index": partition,
                            "committed_offset": committed.offset if committed else -1,
                            "committed_leader_epoch": committed.leader_epoch if committed else -1,
                            "metadata": committed.metadata if committed else "",
                            "error_code": none,
                        },
                    )
                )
            out.append(topic_cls(name=topic, partitions=tuple(entries)))
        return tuple(out)

    # --- lookups -----------------------------------------------------------------------------
    def _find_coordinator(self, ctx: RequestContext, request: Any) -> None:
        """FindCoordinator: this coordinator serves every group (and transactional id)."""
        cfg = self.config
        none = R.error(NONE)
        if ctx.api_version >= 4:
            coordinator_cls = R.nested(FIND_COORDINATOR, ctx.api_version, "Coordinator")
            coordinators = tuple(
                coordinator_cls(
                    key=key,
                    node_id=cfg.node_id,
                    host=cfg.host,
                    port=cfg.port,
                    error_code=none,
                    error_message=None,
                )
                for key in request.coordinator_keys
            )
            self._respond(ctx, R.make(FIND_COORDINATOR, ctx.api_version, coordinators=coordinators))
            return
        self._respond(
            ctx,
            R.make(
                FIND_COORDINATOR,
                ctx.api_version,
                error_code=none,
                error_message=None,
                node_id=cfg.node_id,
                host=cfg.host,
                port=cfg.port,
            ),
        )

    def _describe_groups(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleDescribeGroup / GroupMetadata.summary (ClassicGroup.describe on
        the new coordinator): protocol data and member metadata only when Stable; an unknown
        group is described as Dead."""
        api_version = ctx.api_version
        group_cls = R.nested(DESCRIBE_GROUPS, api_version, "DescribedGroup")
        member_cls = R.nested(DESCRIBE_GROUPS, api_version, "DescribedGroupMember")
        described = []
        for group_id in request.groups:
            group = self.groups.get(group_id)
            values: dict[str, Any] = {
                "error_code": R.error(NONE),
                "group_id": group_id,
                "authorized_operations": -(2**31),
            }
            if group is None:
                values |= {"group_state": "Dead", "protocol_type": "", "protocol_data": "", "members": ()}
                if api_version >= 6:
                    values["error_code"] = R.error(GROUP_ID_NOT_FOUND)
            else:
                stable = group.is_in(GroupState.STABLE)
                # Outside Stable, Scala's MemberMetadata.summaryNoMetadata blanks metadata and
                # assignment; the new coordinator's ClassicGroupMember.describeNoMetadata keeps the
                # assignment (seen on 3.9-new and 4.x brokers in batch-leave-static).
                keep_assignment = self.config.kafka_behaviour is KafkaBehaviour.NEW_COORDINATOR
                members = tuple(
                    R.build(
                        member_cls,
                        {
                            "member_id": m.member_id,
                            "group_instance_id": m.group_instance_id,
                            "client_id": m.client_id,
                            "client_host": m.client_host,
                            "member_metadata": m.metadata(group.protocol_name)
                            if stable and group.protocol_name
                            else b"",
                            "member_assignment": m.assignment if stable or keep_assignment else b"",
                        },
                    )
                    for m in group.members.values()
                )
                values |= {
                    "group_state": group.state.value,
                    "protocol_type": group.protocol_type or "",
                    "protocol_data": (group.protocol_name or "") if stable else "",
                    "members": members,
                }
            described.append(R.build(group_cls, values))
        self._respond(ctx, R.make(DESCRIBE_GROUPS, api_version, groups=tuple(described)))

    def _list_groups(self, ctx: RequestContext, request: Any) -> None:
        """GroupCoordinator.handleListGroups with the v4 states filter (case-insensitive)."""
        api_version = ctx.api_version
        states = {s.lower() for s in getattr(request, "states_filter", ())}
        types = {t.lower() for t in getattr(request, "types_filter", ())}
        listed_cls = R.nested(LIST_GROUPS, api_version, "ListedGroup")
        listed = []
        if not types or "classic" in types:
            for group in self.groups.values():
                if group.is_in(GroupState.DEAD):
                    continue
                if states and group.state.value.lower() not in states:
                    continue
                listed.append(
                    R.build(
                        listed_cls,
                        {
                            "group_id": group.group_id,
                            "protocol_type": group.protocol_type or "",
                            "group_state": group.state.value,
                            "group_type": "classic",
                        },
                    )
                )
        self._respond(ctx, R.make(LIST_GROUPS, api_version, error_code=R.error(NONE), groups=tuple(listed)))
