"""The rebalance itself: prepare, complete the join phase, propagate the assignment, expire.

GroupCoordinator.scala prepareRebalance / onCompleteJoin / propagateAssignment / onExpireHeartbeat /
removeMemberAndUpdateGroup (GroupMetadataManager.java: prepareRebalance,
completeClassicGroupJoin, propagateAssignment, expireClassicGroupMemberHeartbeat,
removeMemberAndUpdateClassicGroup). Kafka's purgatory operations are keyed timers:
DelayedJoin/InitialDelayedJoin -> `join-...`, DelayedSync -> `sync-...`, DelayedHeartbeat ->
`heartbeat-...`. Parked JoinGroup/SyncGroup requests are answered here with a `Respond` carrying
the parked request's context.
"""

from __future__ import annotations

from typing import Any

from replay.coordinator import responses as R
from replay.coordinator.codes import (
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.persist import store_group
from replay.coordinator.runtime import (
    UNKNOWN_MEMBER,
    CoordinatorRuntime,
    heartbeat_key,
    join_key,
    sync_key,
)
from replay.coordinator.types import GroupEventKind, GroupState, KafkaBehaviour


class Rebalancing(CoordinatorRuntime):
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
            protocol_name = group.protocol_name
            group.generation_metadata = tuple([m.metadata(protocol_name) for m in group.members.values()])
            self._transition(group, GroupState.COMPLETING_REBALANCE, "join phase complete")
        else:
            group.protocol_name = None
            group.generation_metadata = None
            self._transition(group, GroupState.EMPTY, "join phase complete with no members")
        group.pending_sync_members.clear()
        if group.is_in(GroupState.EMPTY):
            store_group(self, group)  # completeClassicGroupJoin writes the empty generation
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
