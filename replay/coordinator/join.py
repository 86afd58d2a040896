"""JoinGroup: GroupCoordinator.scala handleJoinGroup, doNewMemberJoinGroup,
doStaticNewMemberJoinGroup, doDynamicNewMemberJoinGroup, doCurrentMemberJoinGroup,
addMemberAndRebalance, updateStaticMemberAndRebalance (GroupMetadataManager.java: classicGroupJoin,
classicGroupJoinNewMember, classicGroupJoinExistingMember,
updateStaticMemberThenRebalanceOrCompleteJoin)."""

from __future__ import annotations

from replay.coordinator import parse as P
from replay.coordinator import responses as R
from replay.coordinator.codes import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_MAX_SIZE_REACHED,
    INCONSISTENT_GROUP_PROTOCOL,
    INVALID_GROUP_ID,
    INVALID_SESSION_TIMEOUT,
    MEMBER_ID_REQUIRED,
    NONE,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_SERVER_ERROR,
)
from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.persist import store_group
from replay.coordinator.rebalance import Rebalancing
from replay.coordinator.records import MemberIdentity
from replay.coordinator.runtime import UNKNOWN_MEMBER, heartbeat_key
from replay.coordinator.types import GroupEventKind, GroupState, RequestContext


class JoinGroupHandling(Rebalancing):
    def join_group(self, ctx: RequestContext, request: P.JoinGroup, group: ClassicGroup | None) -> None:
        """GroupCoordinator.handleJoinGroup (+ KafkaApis.handleJoinGroupRequest version rules)."""
        group_id, member_id, session_timeout_ms = (
            request.group_id,
            request.member_id,
            request.session_timeout_ms,
        )
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
        consumer = self.consumer_groups
        if group is None and consumer is not None and consumer.classic_join(ctx, request):
            return  # classicGroupJoinToConsumerGroup (KIP-848: a consumer group's id)
        if group is None:
            if not is_unknown_member:
                self._join_error(ctx, member_id, UNKNOWN_MEMBER_ID)
                return
            group = self._create_group(group_id)

        if not self._accept_joining_member(group, member_id):
            group.remove(member_id)
            self._join_error(ctx, UNKNOWN_MEMBER, GROUP_MAX_SIZE_REACHED)
        elif is_unknown_member:
            self._join_new_member(ctx, request, group)
        else:
            self._join_current_member(ctx, request, group)
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

    def _join_refused(
        self, ctx: RequestContext, request: P.JoinGroup, group: ClassicGroup, member_id: str
    ) -> bool:
        """The checks both join paths open with (doNewMemberJoinGroup and doCurrentMemberJoinGroup):
        a dead group answers COORDINATOR_NOT_AVAILABLE, protocols the group cannot share answer
        INCONSISTENT_GROUP_PROTOCOL. True when the join was answered with one of them."""
        if group.is_in(GroupState.DEAD):
            self._join_error(ctx, member_id, COORDINATOR_NOT_AVAILABLE)
            return True
        if not group.supports_protocols(request.protocol_type, {name for name, _ in request.protocols}):
            self._join_error(ctx, member_id, INCONSISTENT_GROUP_PROTOCOL)
            return True
        return False

    def _join_new_member(self, ctx: RequestContext, request: P.JoinGroup, group: ClassicGroup) -> None:
        """GroupCoordinator.doNewMemberJoinGroup / GroupMetadataManager.classicGroupJoinNewMember."""
        if self._join_refused(ctx, request, group, UNKNOWN_MEMBER):
            return
        group_instance_id = request.group_instance_id
        new_member_id = self._generate_member_id(ctx.client_id, group_instance_id)
        if group_instance_id is not None:
            old_member_id = group.static_member_id(group_instance_id)
            if old_member_id is not None:
                self._update_static_member_and_rebalance(
                    ctx, request, group, old_member_id, new_member_id, group_instance_id
                )
            else:
                self._add_member_and_rebalance(ctx, request, group, new_member_id)
        elif ctx.api_version >= 4:
            # doDynamicNewMemberJoinGroup with requireKnownMemberId (JoinGroup v4+, KIP-394).
            group.pending_members.add(new_member_id)
            group_id = group.group_id
            self.timers.schedule(
                heartbeat_key(group_id, new_member_id),
                self._now_ms + request.session_timeout_ms,
                lambda now: self._expire_heartbeat(group_id, new_member_id),
            )
            self._join_error(ctx, new_member_id, MEMBER_ID_REQUIRED)
        else:
            self._add_member_and_rebalance(ctx, request, group, new_member_id)

    def _join_current_member(  # noqa: C901 - follows Kafka's classicGroupJoinExistingMember branch by branch
        self, ctx: RequestContext, request: P.JoinGroup, group: ClassicGroup
    ) -> None:
        """GroupCoordinator.doCurrentMemberJoinGroup / classicGroupJoinExistingMember."""
        member_id, group_instance_id, protocols = (
            request.member_id,
            request.group_instance_id,
            request.protocols,
        )
        if self._join_refused(ctx, request, group, member_id):
            return
        if group.is_pending_member(member_id):
            if group_instance_id is not None:
                # Kafka throws IllegalStateException here (-> UNKNOWN_SERVER_ERROR); a pending
                # member is always dynamic.
                self._join_error(ctx, member_id, UNKNOWN_SERVER_ERROR)
                return
            self._add_member_and_rebalance(ctx, request, group, member_id)
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
                self._update_member_and_rebalance(ctx, request, group, member, "rejoin")
            case GroupState.COMPLETING_REBALANCE:
                if member.matches(protocols):
                    # The member lost its JoinGroup response: answer with the current generation.
                    self._respond(ctx, self._join_result(ctx.api_version, group, member, leader_view=True))
                else:
                    self._update_member_and_rebalance(ctx, request, group, member, "metadata changed")
            case GroupState.STABLE:
                if group.is_leader(member_id):
                    # The leader's JoinGroup forces a rebalance (topic metadata changes).
                    self._update_member_and_rebalance(ctx, request, group, member, "leader rejoin")
                elif not member.matches(protocols):
                    self._update_member_and_rebalance(ctx, request, group, member, "metadata changed")
                else:
                    self._respond(ctx, self._join_result(ctx.api_version, group, member, leader_view=False))
            case _:
                self._join_error(ctx, member_id, UNKNOWN_MEMBER_ID)

    def _add_member_and_rebalance(
        self, ctx: RequestContext, request: P.JoinGroup, group: ClassicGroup, member_id: str
    ) -> None:
        """GroupCoordinator.addMemberAndRebalance (the member's group.instance.id is the request's:
        a pending member, the only other caller, is always dynamic)."""
        member = Member(
            member_id=member_id,
            identity=MemberIdentity(request.group_instance_id, ctx.client_id, ctx.client_host),
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            session_timeout_ms=request.session_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
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
        request: P.JoinGroup,
        group: ClassicGroup,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
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
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms, ctx
        )
        self._event(
            GroupEventKind.MEMBER_JOINED, group, member, reason=f"static member replaces {old_member_id}"
        )
        match group.state:
            case GroupState.STABLE:
                if group.protocol_name == group.select_protocol():
                    # No rebalance: the member gets the current generation and its old assignment.
                    parked = group.take_join(member)
                    assert parked is not None
                    # KIP-814 (v9+): the rejoining leader learns it leads, with every member's
                    # metadata, and skips the assignment. Before v9 the old leader id is returned so
                    # that a rejoining leader does not assign (a Stable group would not propagate it).
                    kip_814 = ctx.api_version >= 9
                    is_leader = kip_814 and group.is_leader(new_member_id)
                    response = R.join_group(
                        ctx.api_version,
                        NONE,
                        member_id=new_member_id,
                        generation_id=group.generation_id,
                        protocol_type=group.protocol_type,
                        protocol_name=group.protocol_name,
                        leader=(group.leader_id if kip_814 else current_leader) or "",
                        skip_assignment=is_leader,
                        members=group.current_member_metadata() if is_leader else [],
                    )
                    store_group(self, group)  # the new member id is persisted (storeGroup)
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
        self, ctx: RequestContext, request: P.JoinGroup, group: ClassicGroup, member: Member, reason: str
    ) -> None:
        group.update_member(
            member, request.protocols, request.rebalance_timeout_ms, request.session_timeout_ms, ctx
        )
        self._maybe_prepare_rebalance(group, f"{reason}: {member.member_id}")
