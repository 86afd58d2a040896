"""What the reference coordinator's dispatch calls for consumer groups: kio requests in, kio
responses out, plus the answers the classic handlers need when a group id belongs to a consumer
group (OffsetCommit/OffsetFetch validation, ListGroups rows, JoinGroup refusal).

Kafka 4.3.1 (org.apache.kafka:kafka-group-coordinator:4.3.1) is the spec:
- GroupMetadataManager.getOrMaybeCreateConsumerGroup: a heartbeat with epoch 0 on an EMPTY classic
  group deletes it and creates a consumer group (maybeDeleteEmptyClassicGroup); on a non-empty
  classic group Kafka 4.3 converts it online (validateOnlineUpgrade / convertToConsumerGroup) when
  group.consumer.migration.policy allows. The online conversion is NOT modelled yet (issue 13):
  the reference answers GROUP_ID_NOT_FOUND there, which is what Kafka answers when the policy
  forbids the upgrade (`disabled`, `downgrade`). Any other epoch on a classic group id:
  GROUP_ID_NOT_FOUND "Group %s is not a consumer group.", as Kafka.
- a classic JoinGroup for a consumer group id: Kafka joins it as a classic member of the consumer
  group (classicGroupJoinToConsumerGroup) unless the policy is `disabled`
  (throwIfClassicMemberCannotJoinConsumerGroup: INCONSISTENT_GROUP_PROTOCOL). Not modelled yet:
  `classic_join_error` answers INCONSISTENT_GROUP_PROTOCOL, the `disabled` behaviour.
- ConsumerGroup.validateOffsetCommit / validateOffsetFetch (member epoch instead of generation).
  Deviation: an OLDER member epoch is refused (STALE_MEMBER_EPOCH); Kafka 4.3 accepts it for the
  partitions assigned at or before that epoch (per-partition assignment epochs, not modelled).
- ModernGroup.asListedGroup for ListGroups (protocol type "consumer", group type "consumer").

In short, until the migration is modelled the reference answers protocol clashes as Kafka 4.3.1
with group.consumer.migration.policy=disabled (tests/test_consumer_group_serve.py checks both
answers against such a broker), not as the default `bidirectional`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer.coordinator import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatResponse,
)
from replay.coordinator.consumer.wire import (
    describe_response_to_kio,
    heartbeat_from_kio,
    heartbeat_response_to_kio,
)
from replay.coordinator.timers import KeyedTimers
from replay.coordinator.types import RequestContext

# ClassicGroupState of a group id that is a classic group: None = no classic group by that id.
ClassicLookup = Callable[[str], str | None]


@dataclass(frozen=True, slots=True)
class _Runtime:
    classic_groups: Mapping[str, Any]
    now_ms: Callable[[], int]
    respond: Callable[[RequestContext, Any], None]
    drop_empty_classic_group: Callable[[str], None]


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
    ) -> None:
        """Plug into the classic coordinator's runtime: its groups (a consumer group id must not
        be a classic one), its timers, its clock and its output."""
        self.runtime = _Runtime(classic_groups, now_ms, respond, drop_empty_classic_group)
        self.coordinator.timers = timers

    def use_topics(self, topic_partitions: dict[str, int]) -> None:
        """The server's own topic map (it creates topics on Metadata requests)."""
        self.coordinator.topic_partitions = topic_partitions

    # -- route handlers (replay.coordinator.core.Route: handle(ctx, request, group)) --------------

    def handle_heartbeat(self, ctx: RequestContext, request: Any, _: Any) -> None:
        runtime = self._runtime()
        classic = runtime.classic_groups

        def classic_state(group_id: str) -> str | None:
            group = classic.get(group_id)
            return None if group is None else str(group.state.value)

        answer = self.heartbeat(
            runtime.now_ms(),
            request,
            ctx.api_version,
            ctx.client_id,
            ctx.client_host,
            classic_state,
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
        classic_state: ClassicLookup,
        drop_empty_classic_group: Callable[[str], None],
    ) -> Any:
        """ConsumerGroupHeartbeat: `classic_state` tells whether the group id is a classic group
        (and its state); `drop_empty_classic_group` deletes an empty one being replaced."""
        heartbeat = heartbeat_from_kio(request, api_version, client_id, client_host)
        state = classic_state(heartbeat.group_id)
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
                response = HeartbeatResponse(
                    error_code=int(ErrorCode.group_id_not_found),
                    error_message=(
                        f"Cannot upgrade classic group {heartbeat.group_id} to consumer group: the "
                        "reference coordinator does not model the online upgrade yet."
                    ),
                )
        elif state is not None:
            response = HeartbeatResponse(
                error_code=int(ErrorCode.group_id_not_found),
                error_message=f"Group {heartbeat.group_id} is not a consumer group.",
            )
        if response is None:
            response = self.coordinator.heartbeat(now_ms, heartbeat)
        return heartbeat_response_to_kio(response, api_version)

    def describe(self, request: Any, api_version: int) -> Any:
        names = {image.topic_id: name for name, image in self.coordinator.topics.items()}
        described = self.coordinator.describe(str(g) for g in request.group_ids)
        return describe_response_to_kio(described, api_version, names)

    # -- what the classic handlers ask ------------------------------------------------------------

    def classic_join_error(self, group_id: str) -> ErrorCode | None:
        """JoinGroup on a consumer group id: INCONSISTENT_GROUP_PROTOCOL (policy `disabled`)."""
        if group_id in self.coordinator.groups:
            return ErrorCode.inconsistent_group_protocol
        return None

    def validate_offset_commit(
        self, group_id: str, member_id: str, instance_id: str | None, member_epoch: int, api_version: int
    ) -> ErrorCode:
        """ConsumerGroup.validateOffsetCommit as an error code (0: accepted)."""
        group = self.coordinator.groups[group_id]
        if member_epoch < 0 and not group.members:
            return ErrorCode.none
        member = group.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if api_version < 9:
            return ErrorCode.unsupported_version
        if member_epoch != member.member_epoch:
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def validate_offset_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """ConsumerGroup.validateOffsetFetch as an error code (0: accepted)."""
        if member_id is None and member_epoch < 0:
            return ErrorCode.none
        group = self.coordinator.groups[group_id]
        member = group.members.get(member_id or "")
        if member is None:
            return ErrorCode.unknown_member_id
        return ErrorCode.none if member_epoch == member.member_epoch else ErrorCode.stale_member_epoch

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


__all__ = ["ClassicLookup", "ConsumerGroupService", "ListedGroup"]
