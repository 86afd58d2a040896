"""The classic group manager: JoinGroup (join.py) plus SyncGroup, Heartbeat, LeaveGroup,
DescribeGroups and ListGroups (GroupCoordinator.scala handleSyncGroup/doSyncGroup,
handleHeartbeat, handleLeaveGroup, handleDescribeGroup, handleListGroups; GroupMetadataManager.java
classicGroupSync, classicGroupHeartbeat, classicGroupLeave, describeGroups, listGroups).

Every handler takes (ctx, request, group): the request parsed once (parse.py), and the group its
group id names, or None when there is none (or the API names several).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from proxy.wire.apis import ApiKey
from replay.coordinator import parse as P
from replay.coordinator import responses as R
from replay.coordinator.codes import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from replay.coordinator.consumer.service import ConsumerGroupService
from replay.coordinator.group import ClassicGroup
from replay.coordinator.join import JoinGroupHandling
from replay.coordinator.persist import store_group
from replay.coordinator.runtime import UNKNOWN_MEMBER, heartbeat_key
from replay.coordinator.types import GroupEventKind, GroupState, KafkaBehaviour, RequestContext, respond


class ClassicGroupManager(JoinGroupHandling):
    # --- SyncGroup ---------------------------------------------------------------------------
    def sync_group(self, ctx: RequestContext, request: P.SyncGroup, group: ClassicGroup | None) -> None:  # noqa: C901 - follows Kafka's classicGroupSyncGroup branch by branch, to be read against it
        """GroupCoordinator.handleSyncGroup / doSyncGroup."""
        api_version = ctx.api_version
        group_id, generation_id, member_id, group_instance_id, protocol_type, protocol_name, _ = request
        if not group_id:
            self._respond(ctx, R.sync_group(api_version, INVALID_GROUP_ID))
            return
        if api_version >= 5 and (protocol_type is None or protocol_name is None):
            # KafkaApis: SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent
            self._respond(ctx, R.sync_group(api_version, INCONSISTENT_GROUP_PROTOCOL))
            return
        if group is None:
            self._not_classic(ctx, request, ConsumerGroupService.classic_sync, R.sync_group)
            return
        code = self._member_error(group, member_id, group_instance_id, generation_id, "sync-group")
        if code == NONE and (
            (protocol_type is not None and protocol_type != group.protocol_type)
            or (protocol_name is not None and protocol_name != group.protocol_name)
        ):
            code = INCONSISTENT_GROUP_PROTOCOL
        if code != NONE:
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
                    assignments = dict(request.assignments)
                    for m in group.members.values():
                        m.assignment = assignments.get(m.member_id, b"")
                    store_group(self, group)  # doSyncGroup's storeGroup, then propagate
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

    def heartbeat(self, ctx: RequestContext, request: P.Heartbeat, group: ClassicGroup | None) -> None:
        """GroupCoordinator.handleHeartbeat / validateHeartbeat. The common case first, measured
        (a large group sends little else): a current member at the group's generation, the group
        neither Empty nor Dead, passes every check of `_checked_heartbeat`: its session is
        renewed, and the answer is REBALANCE_IN_PROGRESS while the group prepares a rebalance."""
        group_id, generation_id, member_id, group_instance_id = request
        if (
            group is not None
            and generation_id == group.generation_id
            and (state := group.state) is not GroupState.EMPTY
            and state is not GroupState.DEAD
            and group_id
            and (group_instance_id is None or group.static_members.get(group_instance_id) == member_id)
        ):
            member = group.members.get(member_id)
            if member is not None and member.heartbeat_timer is not None:
                key, expire = member.heartbeat_timer
                self.timers.schedule(key, self._now_ms + member.session_timeout_ms, expire)
                code = REBALANCE_IN_PROGRESS if state is GroupState.PREPARING_REBALANCE else NONE
                self._out.append(respond(ctx, R.heartbeat(ctx.api_version, code)))
                return
        self._checked_heartbeat(ctx, request, group)

    def _checked_heartbeat(
        self, ctx: RequestContext, request: P.Heartbeat, group: ClassicGroup | None
    ) -> None:
        """Heartbeat with Kafka's checks in Kafka's order, one answer at the end (but for a
        group id no classic group has: `_not_classic` answers)."""
        group_id, generation_id, member_id, group_instance_id = request
        code: int
        if not group_id:
            code = INVALID_GROUP_ID
        elif group is None:
            self._not_classic(ctx, request, ConsumerGroupService.classic_heartbeat, R.heartbeat)
            return
        else:
            code = self._member_error(group, member_id, group_instance_id, generation_id, "heartbeat")
            if code == NONE:
                state = group.state
                if state is GroupState.EMPTY:
                    code = UNKNOWN_MEMBER_ID
                else:
                    member = group.members[member_id]
                    self._schedule_heartbeat(group, member, member.session_timeout_ms)
                    if state is GroupState.PREPARING_REBALANCE:
                        code = REBALANCE_IN_PROGRESS
        self._respond(ctx, R.heartbeat(ctx.api_version, code))

    def _member_error(
        self,
        group: ClassicGroup,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        operation: str,
    ) -> int:
        """The checks SyncGroup and Heartbeat share (GroupMetadataManager.validateSyncGroup's
        opening, validateClassicGroupHeartbeat): COORDINATOR_NOT_AVAILABLE for a dead group, then
        ClassicGroup.validateMember (a fenced static member is reported for `operation`), then
        ILLEGAL_GENERATION; NONE when the member may go on."""
        if group.is_in(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        code = self._validate_member(group, member_id, group_instance_id)
        if code == FENCED_INSTANCE_ID:
            self._fenced(group, member_id, group_instance_id, operation)
        elif code == NONE and generation_id != group.generation_id:
            code = ILLEGAL_GENERATION
        return code

    def _not_classic(
        self,
        ctx: RequestContext,
        request: Any,
        to_consumer_group: Callable[[ConsumerGroupService, RequestContext, Any], bool],
        answer: Callable[[int, int], Any],
    ) -> None:
        """No classic group has this id: the dispatch GroupMetadataManager's classicGroupSync,
        classicGroupHeartbeat and classicGroupLeave share. A consumer group (KIP-848) answers its
        classic members itself (`to_consumer_group`: classicGroup*ToConsumerGroup); no group is
        UNKNOWN_MEMBER_ID, in the API's `answer(api_version, code)`."""
        consumer_groups = self.consumer_groups
        if consumer_groups is None or not to_consumer_group(consumer_groups, ctx, request):
            self._respond(ctx, answer(ctx.api_version, UNKNOWN_MEMBER_ID))

    # --- LeaveGroup --------------------------------------------------------------------------
    def leave_group(self, ctx: RequestContext, request: P.LeaveGroup, group: ClassicGroup | None) -> None:
        """GroupCoordinator.handleLeaveGroup / GroupMetadataManager.classicGroupLeave."""
        api_version = ctx.api_version
        leaving = request.members
        if not request.group_id:
            self._respond(ctx, R.leave_group(api_version, INVALID_GROUP_ID, []))
            return
        if group is None:
            # Scala: per-member UNKNOWN_MEMBER_ID. The new coordinator's classicGroupLeave throws
            # UnknownMemberIdException, which GroupCoordinatorService.leaveGroup turns back into
            # the same per-member errors (checked against 3.9 and 4.x brokers).
            self._not_classic(
                ctx,
                request,
                ConsumerGroupService.classic_leave,
                lambda version, code: R.leave_group(version, NONE, [(m, i, code) for m, i in leaving]),
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

    # --- DescribeGroups and ListGroups --------------------------------------------------------
    def describe_groups(
        self, ctx: RequestContext, request: P.DescribeGroups, group: ClassicGroup | None
    ) -> None:
        """GroupCoordinator.handleDescribeGroup / GroupMetadata.summary (ClassicGroup.describe on
        the new coordinator): protocol data and member metadata only when Stable; an unknown
        group is described as Dead."""
        api_version = ctx.api_version
        group_cls = R.nested(ApiKey.DESCRIBE_GROUPS, api_version, "DescribedGroup")
        member_cls = R.nested(ApiKey.DESCRIBE_GROUPS, api_version, "DescribedGroupMember")
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
                            "group_instance_id": m.identity.group_instance_id,
                            "client_id": m.identity.client_id,
                            "client_host": m.identity.client_host,
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
        self._respond(ctx, R.make(ApiKey.DESCRIBE_GROUPS, api_version, groups=tuple(described)))

    def list_groups(self, ctx: RequestContext, request: P.ListGroups, group: ClassicGroup | None) -> None:
        """GroupCoordinator.handleListGroups with the v4 states filter (case-insensitive)."""
        api_version = ctx.api_version
        states, types = request
        listed_cls = R.nested(ApiKey.LIST_GROUPS, api_version, "ListedGroup")
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
        if self.consumer_groups is not None and (not types or "consumer" in types):
            for row in self.consumer_groups.listed_groups():  # ModernGroup.asListedGroup
                if not states or row.group_state.lower() in states:
                    listed.append(R.build(listed_cls, dataclasses.asdict(row)))
        self._respond(
            ctx, R.make(ApiKey.LIST_GROUPS, api_version, error_code=R.error(NONE), groups=tuple(listed))
        )
