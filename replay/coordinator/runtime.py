"""What every part of the classic group coordinator shares: its state, its clock, its outputs.

Kafka's GroupMetadataManager holds the groups, a CoordinatorTimer keyed by
`heartbeat-{group}-{member}`, `join-{group}`, `sync-{group}` (classicGroupHeartbeatKey /
classicGroupJoinKey / classicGroupSyncKey) and appends records; the handlers of the other modules
(join.py, classic.py, offsets.py) run against one `CoordinatorRuntime`. Nothing here reads a clock:
`now_ms` is whatever the last `handle`/`advance` call passed in.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

from proxy.wire.errors import ErrorCode as E
from replay.coordinator import responses as R
from replay.coordinator.codes import (
    FENCED_INSTANCE_ID,
    NONE,
    UNKNOWN_MEMBER_ID,
)
from replay.coordinator.consumer.service import ConsumerGroupService
from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.hashorder import MemberMapKind
from replay.coordinator.records import Append, GroupMetadataRecord
from replay.coordinator.timers import KeyedTimers
from replay.coordinator.types import (
    CoordinatorConfig,
    GroupEvent,
    GroupEventKind,
    GroupState,
    KafkaBehaviour,
    Output,
    RequestContext,
    respond,
)

UNKNOWN_MEMBER = ""  # JoinGroupRequest.UNKNOWN_MEMBER_ID
CLEANUP_KEY = "cleanup-group-metadata"

log = logging.getLogger("group_replay.coordinator")


def heartbeat_key(group_id: str, member_id: str) -> str:
    return f"heartbeat-{group_id}-{member_id}"


def join_key(group_id: str) -> str:
    return f"join-{group_id}"


def sync_key(group_id: str) -> str:
    return f"sync-{group_id}"


class CoordinatorRuntime:
    """Groups, timers and the outputs of the request or timer being processed.

    Time only moves forward: `now_ms` smaller than a previous call is treated as that call's time.
    """

    def __init__(self, config: CoordinatorConfig) -> None:
        self.config = config
        self.groups: dict[str, ClassicGroup] = {}
        self.timers = KeyedTimers()
        self._out: list[Output] = []
        self._now_ms = 0
        self._member_seq = 0
        # Which start of a persisted coordinator this is (records.CoordinatorEpochRecord): part
        # of every member id issued, so that ids never repeat across a restart.
        self.epoch = 0
        self._issued_member_ids: set[str] = set()
        # Groups whose `join-` timer is an InitialDelayedJoin (it never completes early).
        self._initial_join_pending: set[str] = set()
        # The last faults (a handler or timer that raised): what `log` also reports.
        self.faults: deque[str] = deque(maxlen=100)
        self.fault_count = 0
        # The periodic group metadata cleanup (set by the coordinator, which owns the offsets).
        self.cleanup_action: Callable[[int], None] | None = None
        # KIP-848 consumer groups (set by the coordinator): JoinGroup and ListGroups ask it.
        self.consumer_groups: ConsumerGroupService | None = None

    def take_outputs(self) -> list[Output]:
        out, self._out = self._out, []
        return out

    # --- time --------------------------------------------------------------------------------
    def fire_due(self, now_ms: int) -> None:
        if now_ms > self._now_ms:
            self._now_ms = now_ms
        now = self._now_ms
        timers = self.timers
        heap = timers.heap
        if not heap or heap[0][0] > now:
            return  # the earliest entry, live or stale, is later: nothing is due
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
                self.fault(f"timer {key}", exc)

    def fault(self, where: str, exc: Exception) -> None:
        self.fault_count += 1
        message = f"{where} failed at {self._now_ms} ms: {type(exc).__name__}: {exc}"
        self.faults.append(message)
        # One line per fault; the traceback only when debugging (a hostile client can cause many).
        log.warning("%s", message)
        log.debug("%s", message, exc_info=exc)

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        raise NotImplementedError  # rebalance.Rebalancing

    # --- outputs -----------------------------------------------------------------------------
    def _respond(self, context: RequestContext, response: Any) -> None:
        self._out.append(respond(context, response))

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
                group_instance_id=member.identity.group_instance_id if member else None,
                client_id=member.identity.client_id if member else "",
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

    # --- groups and members ------------------------------------------------------------------
    def _create_group(self, group_id: str) -> ClassicGroup:
        """GroupMetadataManager.getOrMaybeCreateClassicGroup: a new group is Empty."""
        member_map = (
            MemberMapKind.JAVA_HASH_MAP
            if self.config.kafka_behaviour is KafkaBehaviour.NEW_COORDINATOR
            else MemberMapKind.SCALA_HASH_MAP
        )
        group = ClassicGroup(group_id, state_timestamp_ms=self._now_ms, member_map=member_map)
        self.groups[group_id] = group
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
        self.timers.schedule(CLEANUP_KEY, (self._now_ms // interval + 1) * interval, self._run_cleanup)

    def _delete_group(self, group: ClassicGroup, reason: str) -> None:
        """The group becomes Dead and is forgotten (GroupMetadataManager's group removal); the
        caller has dropped its offsets."""
        self._transition(group, GroupState.DEAD, reason)
        if self.config.write_records:
            self._out.append(Append(GroupMetadataRecord(group.group_id, None)))  # the tombstone
        del self.groups[group.group_id]
        self._initial_join_pending.discard(group.group_id)

    def _run_cleanup(self, now_ms: int) -> None:
        if self.cleanup_action is not None:
            self.cleanup_action(now_ms)

    def _generate_member_id(self, client_id: str, group_instance_id: str | None) -> str:
        """GroupMetadata.generateMemberId: `{instance id or client id}-{uuid}`; the uuid is a
        counter here so that runs are reproducible (with the coordinator's epoch: a restarted
        coordinator never issues an id twice), or the one `config.member_ids` gives (a
        replay reusing the ids the recorded broker issued, so that the members map iterates as
        it did there) unless that one is already taken."""
        if self.config.member_ids is not None:
            given = self.config.member_ids(client_id, group_instance_id)
            if given is not None and given not in self._issued_member_ids:
                self._issued_member_ids.add(given)
                return given
        self._member_seq += 1
        prefix = group_instance_id if group_instance_id is not None else client_id
        return f"{prefix}-{self._member_seq:08x}-{self.epoch:04x}-4000-8000-000000000000"

    def _validate_member(self, group: ClassicGroup, member_id: str, group_instance_id: str | None) -> E:
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
                client_id=member.identity.client_id if member else "",
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                error_code=int(FENCED_INSTANCE_ID),
                reason=why,
            )
        )

    def _join_error(self, ctx: RequestContext, member_id: str, code: int) -> None:
        self._respond(ctx, R.join_group(ctx.api_version, code, member_id=member_id))

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
