"""What the reference coordinator's dispatch calls for consumer groups: kio requests in, kio
responses out, plus the answers the classic handlers need when a group id belongs to a consumer
group (OffsetCommit/OffsetFetch validation, ListGroups rows, JoinGroup refusal).

Kafka 4.3.1 (org.apache.kafka:kafka-group-coordinator:4.3.1) is the spec:
- GroupMetadataManager.getOrMaybeCreateConsumerGroup: a heartbeat with epoch 0 on an EMPTY classic
  group deletes it and creates a consumer group (maybeDeleteEmptyClassicGroup); on a non-empty
  classic group it converts it online (validateOnlineUpgrade / convertToConsumerGroup, migration.py)
  when group.consumer.migration.policy allows (upgrade, bidirectional), else GROUP_ID_NOT_FOUND.
  Any other epoch on a classic group id: GROUP_ID_NOT_FOUND "Group %s is not a consumer group.".
- classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup on a consumer group id: classicGroupJoinToConsumerGroup
  (INCONSISTENT_GROUP_PROTOCOL under `disabled`: throwIfClassicMemberCannotJoinConsumerGroup),
  classicGroupSyncToConsumerGroup, classicGroupHeartbeatToConsumerGroup,
  classicGroupLeaveToConsumerGroup; a JoinGroup on an EMPTY consumer group replaces it with a
  classic group (maybeDeleteEmptyConsumerGroup).
- the online downgrade: when the last consumer-protocol member leaves or is fenced and the policy
  allows it (downgrade, bidirectional), consumerGroupFenceMembers converts the group back
  (convertToClassicGroup, `_maybe_downgrade`) and starts a rebalance. So does a classic static member
  taking the instance id of the last consumer-protocol member (validateOnlineDowngradeWithReplacedMember).
- ConsumerGroup.validateOffsetCommit / validateOffsetFetch (member epoch instead of generation).
  Deviation: an OLDER member epoch is refused (STALE_MEMBER_EPOCH); Kafka 4.3 accepts it for the
  partitions assigned at or before that epoch (per-partition assignment epochs, not modelled).
- ModernGroup.asListedGroup for ListGroups (protocol type "consumer", group type "consumer").

The reference's default policy is `disabled` (Kafka's is `bidirectional`):
`coordinator serve --consumer-group-migration-policy` chooses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer import classic_members, migration
from replay.coordinator.consumer.assignors import PartitionAssignorError
from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
from replay.coordinator.consumer.group import ConsumerGroup, ConsumerGroupMember, MigrationPolicy
from replay.coordinator.consumer.types import (
    ConsumerGroupConfig,
    ConsumerGroupEvent,
    HeartbeatError,
    HeartbeatResponse,
)
from replay.coordinator.consumer.wire import (
    describe_response_to_kio,
    heartbeat_from_kio,
    heartbeat_response_to_kio,
    steady_from_kio,
    wire_answer,
)
from replay.coordinator.timers import KeyedTimers
from replay.coordinator.types import RequestContext

# ClassicGroupState of a group id that is a classic group: None = no classic group by that id.
_NONE = ErrorCode.none  # an enum attribute is looked up in Python on 3.11


@dataclass(frozen=True, slots=True)
class _Runtime:
    classic_groups: Mapping[str, Any]
    now_ms: Callable[[], int]
    respond: Callable[[RequestContext, Any], None]
    drop_empty_classic_group: Callable[[str], None]
    classic_manager: Any = None  # replay.coordinator.classic.ClassicGroupManager (the migration)


@dataclass(frozen=True, slots=True)
class ListedGroup:
    group_id: str
    protocol_type: str
    group_state: str
    group_type: str


class ConsumerGroupService:
    """Consumer groups behind the coordinator's dispatch (ApiKey 68 and 69).

    Attached to a runtime (`attach`), the consumer groups' session and rebalance timers live in
    the runtime's KeyedTimers, so `advance`/`next_deadline` of the coordinator cover them."""

    def __init__(
        self,
        config: ConsumerGroupConfig | None = None,
        topic_partitions: dict[str, int] | None = None,
    ) -> None:
        self.coordinator = ConsumerGroupCoordinator(config or ConsumerGroupConfig())
        if topic_partitions is not None:
            self.coordinator.topic_partitions = topic_partitions  # shared with the server
        self.runtime: _Runtime | None = None

    def attach(
        self,
        classic_groups: Mapping[str, Any],
        timers: KeyedTimers,
        now_ms: Callable[[], int],
        respond: Callable[[RequestContext, Any], None],
        drop_empty_classic_group: Callable[[str], None],
        classic_manager: Any = None,
    ) -> None:
        """Plug into the classic coordinator's runtime: its groups (a consumer group id must not
        be a classic one), its timers, its clock and its output; `classic_manager` (the classic
        group manager) lets the online migration convert groups both ways."""
        self.runtime = _Runtime(classic_groups, now_ms, respond, drop_empty_classic_group, classic_manager)
        self.coordinator.timers = timers
        self.coordinator.on_fence = self._maybe_downgrade

    def use_topics(self, topic_partitions: dict[str, int]) -> None:
        """The server's own topic map (it creates topics on Metadata requests)."""
        self.coordinator.topic_partitions = topic_partitions

    # -- route handlers (replay.coordinator.core.Route: handle(ctx, request, group)) --------------

    def handle_heartbeat(self, ctx: RequestContext, request: Any, _: Any) -> None:
        runtime = self._runtime()
        classic = runtime.classic_groups.get(request.group_id)
        answer = self.heartbeat(
            runtime.now_ms(),
            request,
            ctx.api_version,
            ctx.client_id,
            ctx.client_host,
            None if classic is None else str(classic.state.value),
            runtime.drop_empty_classic_group,
        )
        runtime.respond(ctx, answer)

    def handle_describe(self, ctx: RequestContext, request: Any, _: Any) -> None:
        runtime = self._runtime()
        runtime.respond(ctx, self.describe(request, ctx.api_version))

    @staticmethod
    def heartbeat_error(api_version: int, error: ErrorCode) -> Any:
        """ConsumerGroupHeartbeatRequest.getErrorResponse."""
        return heartbeat_response_to_kio(HeartbeatResponse(error_code=int(error)), api_version)

    def _runtime_or_none(self) -> _Runtime | None:
        return self.runtime

    def _runtime(self) -> _Runtime:
        if self.runtime is None:
            raise RuntimeError("ConsumerGroupService.attach(runtime) was not called")
        return self.runtime

    # -- time ---------------------------------------------------------------------------------

    def advance(self, now_ms: int) -> None:
        self.coordinator.advance(now_ms)

    def next_deadline(self) -> int | None:
        return self.coordinator.next_deadline()

    def is_consumer_group(self, group_id: str) -> bool:
        return group_id in self.coordinator.groups

    # -- the two APIs ---------------------------------------------------------------------------

    def heartbeat(
        self,
        now_ms: int,
        request: Any,
        api_version: int,
        client_id: str,
        client_host: str,
        state: str | None,
        drop_empty_classic_group: Callable[[str], None],
    ) -> Any:
        """ConsumerGroupHeartbeat: `state` is the state of the classic group the group id names
        (None: no classic group); `drop_empty_classic_group` deletes an empty one being replaced."""
        if state is None:
            answer = steady_from_kio(self.coordinator, now_ms, request, client_id, client_host)
            if answer is not None:
                return wire_answer(self.coordinator, request.group_id, answer, api_version)
        heartbeat = heartbeat_from_kio(request, api_version, client_id, client_host)
        response: HeartbeatResponse | None = None
        if state is not None and heartbeat.member_epoch not in (-1, -2):
            if heartbeat.member_epoch != 0:
                response = HeartbeatResponse(
                    error_code=int(ErrorCode.group_id_not_found),
                    error_message=f"Group {heartbeat.group_id} is not a consumer group.",
                )
            elif state in ("Empty", "Dead"):
                drop_empty_classic_group(heartbeat.group_id)
            else:
                try:
                    self._upgrade(now_ms, heartbeat.group_id)
                except HeartbeatError as exc:
                    response = HeartbeatResponse(error_code=int(exc.code), error_message=exc.message)
        elif state is not None:
            response = HeartbeatResponse(
                error_code=int(ErrorCode.group_id_not_found),
                error_message=f"Group {heartbeat.group_id} is not a consumer group.",
            )
        if response is None:
            response = self.coordinator.heartbeat(now_ms, heartbeat)
        return heartbeat_response_to_kio(response, api_version)

    # -- the online migration (replay.coordinator.consumer.migration) ------------------------------

    def _upgrade(self, now_ms: int, group_id: str) -> None:
        """getOrMaybeCreateConsumerGroup on a non-empty classic group: validateOnlineUpgrade and
        convertToConsumerGroup. Parked JoinGroup/SyncGroup requests are answered
        REBALANCE_IN_PROGRESS (completeAllJoinFutures/completeAllSyncFutures), the classic group
        and its timers go (its offsets stay), and each converted member gets a session timeout of
        its classic session timeout. The heartbeat that triggered it then runs on the new group.
        Deviation: Kafka reverts the conversion if that heartbeat fails; here it stays."""
        runtime = self._runtime_or_none()
        classic = None if runtime is None else runtime.classic_manager
        coordinator = self.coordinator
        if classic is None or group_id not in classic.groups:  # no classic manager attached
            migration.validate_online_upgrade(coordinator, group_id, migration.CONSUMER_PROTOCOL_TYPE, 0)
            raise HeartbeatError(ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group.")
        assert runtime is not None
        old = classic.groups[group_id]
        migration.validate_online_upgrade(coordinator, group_id, old.protocol_type, len(old.members))
        views = migration.member_views(old, runtime.respond)
        group = migration.from_classic_group(
            coordinator, group_id, old.generation_id, old.protocol_name or "", views
        )
        # createGroupTombstoneRecords: the classic group and its timers go (offsets stay).
        from replay.coordinator.runtime import heartbeat_key, join_key, sync_key

        for m in old.members.values():
            classic.timers.cancel(heartbeat_key(group_id, m.member_id))
        classic.timers.cancel(join_key(group_id))
        classic.timers.cancel(sync_key(group_id))
        classic._delete_group(old, "converted to a consumer group (KIP-848 online upgrade)")
        coordinator.groups[group_id] = group
        for view in views:
            coordinator._schedule_session_timeout(now_ms, group_id, view.member_id, view.session_timeout_ms)
        coordinator.events.append(
            ConsumerGroupEvent(now_ms, group_id, "group_upgraded", None, group.group_epoch, "")
        )

    def _maybe_downgrade(self, now_ms: int, group: ConsumerGroup, leaving: ConsumerGroupMember) -> bool:
        """consumerGroupFenceMembers' online downgrade: when every member left uses the classic
        protocol (validateOnlineDowngradeWithFencedMembers: not empty, policy downgrade or
        bidirectional, at most group.max.size members), convertToClassicGroup: a Stable classic
        group at the group epoch, protocol type "consumer", members in the consumer group's order
        (the first is the leader) with their target assignment serialised in the version of their
        own subscription (ClassicGroup.fromConsumerGroup), session timeouts rescheduled, then
        prepareRebalance ("Downgrade group %s from consumer to classic for member leaving.")."""
        runtime = self.runtime
        classic = None if runtime is None else runtime.classic_manager
        config = self.coordinator.config
        if classic is None or not config.migration_policy.downgrade_enabled:
            return False  # before the walk over the members (every fence asks)
        others = [m for m in group.members.values() if m.member_id != leaving.member_id]
        if not others or any(m.classic is None for m in others) or len(others) > config.classic_max_size:
            return False
        self._convert_to_classic(
            now_ms,
            group,
            others,
            f"Downgrade group {group.group_id} from consumer to classic for member leaving.",
            leaving.member_id,
        )
        return True

    def _convert_to_classic(
        self,
        now_ms: int,
        group: ConsumerGroup,
        members: list[ConsumerGroupMember],
        rebalance_reason: str | None,
        why: str | None,
    ) -> None:
        """convertToClassicGroup: the consumer group and its timers go, the classic group takes
        its id with the members' session timeouts (rescheduleClassicGroupMemberHeartbeat) and, if
        asked, prepareRebalance."""
        classic = self._runtime().classic_manager
        coordinator = self.coordinator
        converted = migration.classic_group_from(coordinator, group, members, now_ms)
        for m in group.members.values():
            for key in ("session-timeout", "rebalance-timeout", "consumer-join", "consumer-sync"):
                coordinator.timers.cancel(f"{key}-{group.group_id}-{m.member_id}")
        del coordinator.groups[group.group_id]
        classic.groups[group.group_id] = converted
        for member in converted.members.values():
            classic._schedule_heartbeat(converted, member, member.session_timeout_ms)
        if rebalance_reason is not None:
            classic._prepare_rebalance(converted, rebalance_reason)
        coordinator.events.append(
            ConsumerGroupEvent(now_ms, group.group_id, "group_downgraded", why, group.group_epoch)
        )

    def handles_classic(self, group_id: str) -> bool:
        """Whether a classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup for `group_id` is served here
        (GroupMetadataManager routes those of a consumer group to the *ToConsumerGroup methods)."""
        return group_id in self.coordinator.groups

    def classic_join(self, ctx: RequestContext, request: Any) -> bool:  # noqa: C901 - routes a classic JoinGroup as GroupMetadataManager.classicGroupJoin does, case by case
        """classicGroupJoin: JoinGroup on a consumer group id. An empty consumer group is deleted
        and the join goes to a classic group (maybeDeleteEmptyConsumerGroup, returns False);
        otherwise classicGroupJoinToConsumerGroup answers here (returns True)."""
        coordinator = self.coordinator
        group = coordinator.groups.get(request.group_id)
        if group is None:
            return False
        if not group.members:
            self.forget(request.group_id)
            return False
        runtime = self._runtime()
        api_version = ctx.api_version
        member_id = request.member_id
        try:
            if coordinator.config.migration_policy is MigrationPolicy.DISABLED:
                raise HeartbeatError(  # throwIfClassicMemberCannotJoinConsumerGroup
                    ErrorCode.inconsistent_group_protocol,
                    f"Cannot join the consumer group {group.group_id} with the classic protocol because "
                    "the group migration is disabled.",
                )
            unknown = member_id == ""
            if unknown:
                member_id = coordinator._new_member_id()
            if len(group.members) >= coordinator.config.max_size and member_id not in group.members:
                raise HeartbeatError(ErrorCode.group_max_size_reached, "The consumer group is full.")
            if not classic_members.supports_classic_protocols(
                group, request.protocol_type, request.protocols
            ):
                raise HeartbeatError(
                    ErrorCode.inconsistent_group_protocol,
                    f"Member {member_id}'s protocols are not supported.",
                )
            if unknown and api_version >= 4 and request.group_instance_id is None:
                # JoinGroupRequest.requiresKnownMemberId
                runtime.respond(
                    ctx,
                    classic_members.join_error_response(api_version, ErrorCode.member_id_required, member_id),
                )
                return True
            now_ms = runtime.now_ms()
            downgrade = classic_members.downgrade_by_replacement(
                coordinator.config, group, request.group_instance_id
            )
            member = classic_members.classic_join(
                coordinator,
                now_ms,
                group,
                member_id,
                unknown,
                request.group_instance_id,
                request.rebalance_timeout_ms,
                request.session_timeout_ms,
                tuple(request.protocols),
                ctx.client_id,
                ctx.client_host,
                downgrade,
            )
        except HeartbeatError as exc:
            runtime.respond(
                ctx, classic_members.join_error_response(api_version, exc.code, request.member_id)
            )
            return True
        except PartitionAssignorError:
            runtime.respond(
                ctx,
                classic_members.join_error_response(
                    api_version, ErrorCode.unknown_server_error, request.member_id
                ),
            )
            return True
        group_id = group.group_id
        coordinator.timers.cancel(
            classic_members.classic_timer(coordinator, "consumer-join", group_id, member.member_id)[0]
        )
        assert member.classic is not None
        if downgrade:
            stale = group.assignment_epoch < group.group_epoch
            reason = f"Downgrade group {group_id} from consumer to classic with stale assignment."
            self._convert_to_classic(
                now_ms, group, list(group.members.values()), reason if stale else None, member.member_id
            )
            runtime.respond(
                ctx,
                classic_members.join_ok_response(
                    api_version, member.member_id, member.member_epoch, member.classic.protocol_name
                ),
            )
            return True
        coordinator._schedule_session_timeout(now_ms, group_id, member.member_id, request.session_timeout_ms)
        self._schedule_classic_timeout(now_ms, "consumer-sync", group, member, request.rebalance_timeout_ms)
        runtime.respond(
            ctx,
            classic_members.join_ok_response(
                api_version, member.member_id, member.member_epoch, member.classic.protocol_name
            ),
        )
        return True

    def _schedule_classic_timeout(
        self,
        now_ms: int,
        kind: str,
        group: ConsumerGroup,
        member: ConsumerGroupMember,
        timeout_ms: int,
        if_absent: bool = False,
    ) -> None:
        """scheduleConsumerGroupSyncTimeout / scheduleConsumerGroupJoinTimeoutIfAbsent: the member
        is fenced if it does not sync (rejoin) within its rebalance timeout."""
        key, expire = classic_members.classic_timer(self.coordinator, kind, group.group_id, member.member_id)
        if not (if_absent and self.coordinator.timers.is_scheduled(key)):
            self.coordinator.timers.schedule(key, now_ms + timeout_ms, expire)

    def classic_sync(self, ctx: RequestContext, request: Any) -> bool:
        """classicGroupSyncToConsumerGroup: the member's current assignment, unless a new
        rebalance started (REBALANCE_IN_PROGRESS)."""
        coordinator = self.coordinator
        group = coordinator.groups.get(request.group_id)
        if group is None:
            return False
        runtime = self._runtime()
        api_version = ctx.api_version
        try:
            member = classic_members.classic_member(group, request.member_id, request.group_instance_id)
            classic_members.throw_if_generation_unmatched(member, request.generation_id)
            assert member.classic is not None
            name = member.classic.protocol_name
            if (
                request.protocol_type is not None
                and request.protocol_type != migration.CONSUMER_PROTOCOL_TYPE
            ) or (request.protocol_name is not None and request.protocol_name != name):
                raise HeartbeatError(ErrorCode.inconsistent_group_protocol, "protocol mismatch")
            now_ms = runtime.now_ms()
            if classic_members.rebalance_in_progress(group, member):
                self._schedule_classic_timeout(
                    now_ms, "consumer-join", group, member, member.rebalance_timeout_ms, if_absent=True
                )
                raise HeartbeatError(ErrorCode.rebalance_in_progress, "rejoin")
        except HeartbeatError as exc:
            runtime.respond(ctx, classic_members.sync_error_response(api_version, exc.code))
            return True
        coordinator.timers.cancel(
            classic_members.classic_timer(coordinator, "consumer-sync", group.group_id, member.member_id)[0]
        )
        coordinator._schedule_session_timeout(
            now_ms, group.group_id, member.member_id, member.classic.session_timeout_ms
        )
        answer = classic_members.sync_ok_answer(
            coordinator, member, api_version, request.protocol_type, request.protocol_name
        )
        runtime.respond(ctx, answer)
        return True

    def classic_heartbeat(self, ctx: RequestContext, request: Any) -> bool:
        """classicGroupHeartbeatToConsumerGroup: REBALANCE_IN_PROGRESS while the member is behind
        the target epoch, must revoke, or may now collect released partitions."""
        coordinator = self.coordinator
        group = coordinator.groups.get(request.group_id)
        if group is None:
            return False
        runtime = self._runtime()
        code = _NONE
        try:
            member = classic_members.classic_member(group, request.member_id, request.group_instance_id)
            classic_members.throw_if_generation_unmatched(member, request.generation_id)
        except HeartbeatError as exc:
            code = exc.code
        else:
            now_ms = runtime.now_ms()
            assert member.classic is not None
            coordinator._schedule_session_timeout(
                now_ms, group.group_id, member.member_id, member.classic.session_timeout_ms
            )
            if classic_members.must_rejoin(group, member):
                code = ErrorCode.rebalance_in_progress
                self._schedule_classic_timeout(
                    now_ms, "consumer-join", group, member, member.rebalance_timeout_ms, if_absent=True
                )
        runtime.respond(ctx, classic_members.heartbeat_response(ctx.api_version, code))
        return True

    def classic_leave(self, ctx: RequestContext, request: Any) -> bool:
        """classicGroupLeaveToConsumerGroup: each member fenced (consumerGroupFenceMembers; the
        online downgrade may convert the group back)."""
        runtime = self._runtime()
        coordinator = self.coordinator
        group = coordinator.groups.get(request.group_id)
        if group is None:
            return False
        results: list[tuple[str, str | None, int]] = []
        leaving: list[ConsumerGroupMember] = []
        for member_id, instance_id in request.members:
            try:
                leaving.append(classic_members.leaving_member(group, member_id, instance_id))
                results.append((member_id, instance_id, 0))
            except HeartbeatError as exc:
                results.append((member_id, instance_id, int(exc.code)))
        now_ms = runtime.now_ms()
        for member in leaving:
            current = group.members.get(member.member_id)
            if coordinator.groups.get(group.group_id) is group and current is not None:
                coordinator._fence(now_ms, group, current, "member_left", "the classic member left")
        runtime.respond(ctx, classic_members.leave_response(ctx.api_version, results))
        return True

    def describe(self, request: Any, api_version: int) -> Any:
        """consumerGroupDescribe: a classic group's id (or an unknown one) is GROUP_ID_NOT_FOUND."""
        names = {image.topic_id: name for name, image in self.coordinator.topics.items()}
        described = self.coordinator.describe(str(g) for g in request.group_ids)
        return describe_response_to_kio(described, api_version, names)

    # -- what the classic handlers ask ------------------------------------------------------------

    def validate_offset_commit(
        self, group_id: str, member_id: str, instance_id: str | None, member_epoch: int, api_version: int
    ) -> ErrorCode:
        """ConsumerGroup.validateOffsetCommit as an error code (0: accepted)."""
        return self.coordinator.groups[group_id].validate_offset_commit(member_id, member_epoch, api_version)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """ConsumerGroup.validateOffsetFetch as an error code (0: accepted)."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        return self.coordinator.groups[group_id].validate_offset_fetch(member_id or "", member_epoch)

    def empty_groups(self) -> list[str]:
        """Consumer groups without members (GroupMetadataManager.cleanupGroupMetadata deletes
        those that hold no offsets either: ConsumerGroup.isEmpty)."""
        return [group_id for group_id, group in self.coordinator.groups.items() if not group.members]

    def forget(self, group_id: str) -> None:
        self.coordinator.groups.pop(group_id, None)

    def delete_group(self, group_id: str) -> ErrorCode | None:
        """DeleteGroups of a consumer group (ConsumerGroup.validateDeleteGroup: only an Empty one;
        the caller deletes its offsets); None when `group_id` is not a consumer group."""
        group = self.coordinator.groups.get(group_id)
        if group is None:
            return None
        if group.members:
            return ErrorCode.non_empty_group
        del self.coordinator.groups[group_id]
        return ErrorCode.none

    def listed_groups(self) -> list[ListedGroup]:
        return [
            ListedGroup(group_id, "consumer", group.state.value, "consumer")
            for group_id, group in self.coordinator.groups.items()
        ]


__all__ = ["ConsumerGroupService", "ListedGroup"]
