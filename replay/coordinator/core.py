"""The reference group coordinator: Kafka's state machines, sans-IO, in virtual time.

`GroupCoordinator` plays Kafka's GroupCoordinatorShard: it routes each request, by API key, to
the manager that owns it (the classic group manager for membership, the offset manager for
offsets), as KafkaApis -> GroupCoordinatorService -> GroupCoordinatorShard do. The specification is
Kafka's own code; each handler names the method it follows:
- core/src/main/scala/kafka/coordinator/group/GroupCoordinator.scala (pre-3.7 coordinator, the
  default on 3.9);
- group-coordinator/.../GroupMetadataManager.java and OffsetMetadataManager.java (the new
  coordinator: 3.9 with group.coordinator.new.enable=true, the only one on 4.x).

A route is (parse, handle, error response): the request is parsed once into a frozen value
(parse.py), its group looked up, and `handle(ctx, request, group)` called. A second group type
(KIP-848's consumer groups) plugs in with `register` for its own API keys.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from proxy.wire.apis import ApiKey
from proxy.wire.errors import ErrorCode as E
from replay.coordinator import parse as P
from replay.coordinator import responses as R
from replay.coordinator.classic import ClassicGroupManager
from replay.coordinator.codes import (
    GROUP_ID_NOT_FOUND,
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    UNKNOWN_SERVER_ERROR,
)
from replay.coordinator.consumer import classic_cycle
from replay.coordinator.consumer.service import ConsumerGroupService
from replay.coordinator.group import ClassicGroup
from replay.coordinator.offsets import OffsetMetadataManager
from replay.coordinator.persist import LoadedState, loaded_group, replay_records
from replay.coordinator.records import Append, CoordinatorEpochRecord, Record
from replay.coordinator.runtime import UNKNOWN_MEMBER, heartbeat_key, join_key, sync_key
from replay.coordinator.timers import KeyedTimers
from replay.coordinator.types import CoordinatorConfig, GroupState, Output, RequestContext, respond

Handler = Callable[[RequestContext, Any, ClassicGroup | None], None]
ConsumerFirst = Callable[[RequestContext, Any], Any]  # the answer, or None
ErrorResponse = Callable[[int, E], Any]  # (api_version, error) -> response entity


@dataclass(frozen=True, slots=True)
class Route:
    """How the coordinator serves one API: versions, parser, handler and, where Kafka's
    `getErrorResponse` is simple, the response that answers a request whose handler failed."""

    api_key: ApiKey
    min_version: int
    max_version: int
    parse: Callable[[Any, int], Any]
    handle: Handler
    by_group: bool  # the parsed request has a `group_id` whose group the handler gets
    error_response: ErrorResponse | None = None
    # Asked first when no classic group has the request's group id (by_group routes): the answer
    # to send (a consumer group's classic member, classic_cycle), or None with nothing changed.
    consumer_first: ConsumerFirst | None = None


# (parse, handle, by_group, consumer_first, route): a route unpacked for `handle`.
Served = tuple[Callable[[Any, int], Any], Handler, bool, ConsumerFirst | None, Route]


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
        self.classic = ClassicGroupManager(config or CoordinatorConfig())
        self.offsets = OffsetMetadataManager(self.classic)
        self.classic.cleanup_action = self._cleanup_group_metadata
        classic, offsets = self.classic, self.offsets
        self.routes: dict[int, Route] = {}
        # Per kio request class: (parse, handle, by_group, consumer_first, route), unpacked once
        # per request.
        self._route_by_type: dict[type[Any], Served] = {}
        # KIP-848 consumer groups (replay.coordinator.consumer), sharing the runtime's timers.
        self.consumer = consumer = ConsumerGroupService()
        consumer.attach(
            classic.groups,
            classic.timers,
            lambda: classic._now_ms,
            classic._respond,
            self._drop_classic_group,
            classic,
        )
        classic.consumer_groups = offsets.consumer_groups = consumer
        consumer.coordinator.on_group_empty = lambda _: classic._schedule_cleanup()
        join, sync, heartbeat = self._consumer_join, self._consumer_sync, self._consumer_heartbeat
        for route in (
            Route(ApiKey.JOIN_GROUP, 0, 9, P.join_group, classic.join_group, True, _join_error, join),
            Route(ApiKey.SYNC_GROUP, 0, 5, P.sync_group, classic.sync_group, True, _sync_error, sync),
            Route(ApiKey.HEARTBEAT, 0, 4, P.heartbeat, classic.heartbeat, True, R.heartbeat, heartbeat),
            Route(ApiKey.LEAVE_GROUP, 0, 5, P.leave_group, classic.leave_group, True, _leave_error),
            Route(ApiKey.OFFSET_COMMIT, 2, 9, P.offset_commit, offsets.commit_offset, True),
            Route(ApiKey.OFFSET_FETCH, 1, 9, P.offset_fetch, offsets.fetch_offsets, False),
            Route(ApiKey.FIND_COORDINATOR, 0, 6, P.find_coordinator, self._find_coordinator, False),
            Route(ApiKey.DESCRIBE_GROUPS, 0, 5, P.describe_groups, classic.describe_groups, False),
            Route(ApiKey.LIST_GROUPS, 0, 5, P.list_groups, classic.list_groups, False, _list_error),
            Route(ApiKey.DELETE_GROUPS, 0, 2, P.delete_groups, self._delete_groups, False),
            Route(ApiKey.OFFSET_DELETE, 0, 0, P.offset_delete, offsets.delete_offsets, True),
        ):
            self.register(route)
        self.register(
            Route(
                ApiKey.CONSUMER_GROUP_HEARTBEAT,
                0,
                1,
                _as_is,
                consumer.handle_heartbeat,
                False,
                consumer.heartbeat_error,
            )
        )
        self.register(Route(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, 1, _as_is, consumer.handle_describe, False))

    # --- public API --------------------------------------------------------------------------
    def register(self, route: Route) -> None:
        """Serve `route.api_key` with this route (replacing any route it had)."""
        self.routes[int(route.api_key)] = route
        self._route_by_type.clear()

    @property
    def config(self) -> CoordinatorConfig:
        return self.classic.config

    @config.setter
    def config(self, config: CoordinatorConfig) -> None:
        self.classic.config = config

    @property
    def groups(self) -> dict[str, ClassicGroup]:
        return self.classic.groups

    @property
    def timers(self) -> KeyedTimers:
        return self.classic.timers

    @property
    def fault_count(self) -> int:
        return self.classic.fault_count

    @property
    def faults(self) -> Any:
        return self.classic.faults

    def handle(self, now_ms: int, context: RequestContext, request: Any) -> list[Output]:
        """Process one request. Timers due at `now_ms` fire first (Kafka's timer thread runs
        concurrently; firing them first keeps runs deterministic)."""
        classic = self.classic
        # fire_due's clock and "is anything due?" test, inline: a request rarely finds a timer due.
        if now_ms > classic._now_ms:
            classic._now_ms = now_ms
        heap = classic.timers.heap
        if heap and heap[0][0] <= classic._now_ms:
            classic.fire_due(now_ms)
        served = self._route_by_type.get(type(request))
        if served is None:
            served = self._resolve(type(request))
        parse, handler, by_group, consumer_first, route = served
        try:
            parsed = parse(request, context.api_version)
            if not by_group:
                handler(context, parsed, None)
            elif (group := classic.groups.get(parsed.group_id)) is not None or consumer_first is None:
                handler(context, parsed, group)
            elif (answer := consumer_first(context, parsed)) is not None:
                classic._out.append(respond(context, answer))
            else:
                handler(context, parsed, None)
        except Exception as exc:
            self._request_failed(route, context, exc)
        out = classic._out
        classic._out = []
        return out

    def _resolve(self, request_type: type[Any]) -> Served:
        api_key = int(request_type.__api_key__)
        route = self.routes.get(api_key)
        if route is None:
            raise UnsupportedRequest(f"api_key {api_key} is not a group coordinator API")
        served = (route.parse, route.handle, route.by_group, route.consumer_first, route)
        self._route_by_type[request_type] = served
        return served

    # --- a consumer group's classic members (KIP-848 migration), asked before the full path ---
    # A classic request whose group id no classic group has reaches classic_cycle in one call
    # here when the checks Kafka makes before GroupMetadataManager looks the group up pass;
    # anything else (None, nothing changed) goes the full path: the classic handler, which
    # makes those checks and asks the consumer group service (service.classic_join/_sync/
    # _heartbeat), which runs Kafka's sequence (classic_cycle was asked here, once).

    def _consumer_join(self, ctx: RequestContext, request: P.JoinGroup) -> Any:
        """GroupCoordinatorService.joinGroup's checks (a group id, the session timeout within
        group.{min,max}.session.timeout.ms), then GroupMetadataManager.classicGroupJoin's first
        branch (a non-empty consumer group: classicGroupJoinToConsumerGroup) for the classic
        cycle's rejoin (`classic_cycle.rejoin`)."""
        group_id = request.group_id
        group = self.consumer.coordinator.groups.get(group_id)
        if group is None or not group_id:
            return None
        config = self.classic.config
        timeout_ms = request.session_timeout_ms
        if not config.group_min_session_timeout_ms <= timeout_ms <= config.group_max_session_timeout_ms:
            return None
        return classic_cycle.rejoin(self.consumer, self.classic._now_ms, ctx, request, group)

    def _consumer_sync(self, ctx: RequestContext, request: P.SyncGroup) -> Any:
        """GroupCoordinatorService.syncGroup's group id check and KafkaApis' v5+ mandatory
        protocol type and name (SyncGroupRequest.areMandatoryProtocolTypeAndNamePresent), then
        GroupMetadataManager.classicGroupSync's consumer-group branch
        (classicGroupSyncToConsumerGroup) for the classic cycle's sync (`classic_cycle.sync`)."""
        group_id = request.group_id
        group = self.consumer.coordinator.groups.get(group_id)
        if group is None or not group_id:
            return None
        if ctx.api_version >= 5 and (request.protocol_type is None or request.protocol_name is None):
            return None
        return classic_cycle.sync(self.consumer, self.classic._now_ms, ctx, request, group)

    def _consumer_heartbeat(self, ctx: RequestContext, request: P.Heartbeat) -> Any:
        """GroupCoordinatorService.heartbeat's group id check, then GroupMetadataManager.
        classicGroupHeartbeat's consumer-group branch (classicGroupHeartbeatToConsumerGroup) for
        its two common answers (`classic_cycle.heartbeat`)."""
        group_id = request.group_id
        group = self.consumer.coordinator.groups.get(group_id)
        if group is None or not group_id:
            return None
        return classic_cycle.heartbeat(self.consumer, self.classic._now_ms, ctx, request, group)

    def advance(self, now_ms: int) -> list[Output]:
        """Fire every timer due at or before `now_ms`."""
        self.classic.fire_due(now_ms)
        return self.classic.take_outputs()

    def next_deadline(self) -> int | None:
        return self.classic.timers.next_deadline()

    def load(self, records: Iterable[Record], now_ms: int) -> LoadedState:
        """Rebuild the groups and offsets `records` (this coordinator's log, oldest first) hold,
        before serving: GroupMetadataManager.replay / OffsetMetadataManager.replay for each record,
        then GroupMetadataManager.onLoaded (GroupCoordinator.onGroupLoaded on Scala): every loaded
        member's session timeout starts now, a group over `group_max_size` rebalances. The next
        outputs carry a `CoordinatorEpochRecord` for this start; member ids carry its epoch."""
        classic = self.classic
        classic.fire_due(now_ms)
        records = list(records)
        groups, offsets, epoch = replay_records(records)
        for group_id, value in groups.items():
            loaded_group(value, classic._create_group(group_id))
        for group_id, stored in offsets.items():
            if group_id not in classic.groups:
                classic._create_group(group_id)  # a "simple" group: offsets without membership
            self.offsets.offsets[group_id] = dict(stored)
        max_size = classic.config.group_max_size
        for group in list(classic.groups.values()):
            for member in group.members.values():
                classic._schedule_heartbeat(group, member, member.session_timeout_ms)
            if len(group.members) > max_size:
                classic._prepare_rebalance(group, f"freshly-loaded group is over capacity ({max_size})")
        # A log without an epoch record was written by a coordinator that never loaded one: epoch 0.
        classic.epoch = epoch + 1 if epoch is not None else (1 if records else 0)
        classic._out.append(Append(CoordinatorEpochRecord(classic.epoch)))
        return LoadedState(
            groups={g.group_id: len(g.members) for g in classic.groups.values()},
            offsets=sum(len(o) for o in self.offsets.offsets.values()),
            epoch=classic.epoch,
        )

    def unload(self, now_ms: int) -> list[Output]:
        """The log's partition moves to another broker (GroupMetadataManager.onUnloaded;
        GroupCoordinator.onResignation on Scala): every classic group becomes Dead, and the
        JoinGroup and SyncGroup requests it holds are answered NOT_COORDINATOR, sending the
        clients to the new coordinator. Nothing is written; this coordinator serves no more."""
        classic = self.classic
        classic.fire_due(now_ms)
        for group in list(classic.groups.values()):
            for member in group.members.values():
                joined = group.take_join(member)
                if joined is not None:
                    classic._join_error(joined, member.member_id, NOT_COORDINATOR)
                synced = group.take_sync(member)
                if synced is not None:
                    classic._respond(synced, R.sync_group(synced.api_version, NOT_COORDINATOR))
            classic._transition(group, GroupState.DEAD, "coordinator unloaded")
        classic.timers = KeyedTimers()
        return classic.take_outputs()

    def supports(self, api_key: int) -> bool:
        return api_key in self.routes

    def supported_versions(self) -> dict[int, tuple[int, int]]:
        """(min, max) version per API key served (what ApiVersions advertises)."""
        return {key: (r.min_version, r.max_version) for key, r in self.routes.items()}

    # --- failures ----------------------------------------------------------------------------
    def _request_failed(self, route: Route, ctx: RequestContext, exc: Exception) -> None:
        """A handler raised. Kafka's KafkaApis.handle catches any Throwable and answers the
        request with `request.getErrorResponse(UNKNOWN_SERVER_ERROR)` (RequestHandlerHelper.
        handleError), keeping the connection; the group keeps whatever state the exception left
        (Scala) or its records are reverted (new coordinator). The same error response is sent
        here where the route has one; otherwise a `CoordinatorFault` tells the server to close
        this one connection."""
        classic = self.classic
        where = f"{route.api_key.name} v{ctx.api_version} from connection {ctx.connection_id}"
        classic.fault(where, exc)
        if route.error_response is None:
            raise CoordinatorFault(f"{where}: {type(exc).__name__}: {exc}", classic.take_outputs()) from exc
        classic._respond(ctx, route.error_response(ctx.api_version, UNKNOWN_SERVER_ERROR))

    # --- FindCoordinator ---------------------------------------------------------------------
    def _find_coordinator(
        self, ctx: RequestContext, request: P.FindCoordinator, _: ClassicGroup | None
    ) -> None:
        """FindCoordinator: this coordinator serves every group (and transactional id)."""
        cfg = self.config
        none = R.error(NONE)
        api_version = ctx.api_version
        if request.batched:
            coordinator_cls = R.nested(ApiKey.FIND_COORDINATOR, api_version, "Coordinator")
            coordinators = tuple(
                coordinator_cls(
                    key=key,
                    node_id=cfg.node_id,
                    host=cfg.host,
                    port=cfg.port,
                    error_code=none,
                    error_message=None,
                )
                for key in request.keys
            )
            answer = R.make(ApiKey.FIND_COORDINATOR, api_version, coordinators=coordinators)
        else:
            answer = R.make(
                ApiKey.FIND_COORDINATOR,
                api_version,
                error_code=none,
                error_message=None,
                node_id=cfg.node_id,
                host=cfg.host,
                port=cfg.port,
            )
        self.classic._respond(ctx, answer)

    # --- DeleteGroups ------------------------------------------------------------------------
    def _delete_groups(self, ctx: RequestContext, request: P.DeleteGroups, _: ClassicGroup | None) -> None:
        """GroupCoordinator.handleDeleteGroups (GroupCoordinatorShard.deleteGroups ->
        OffsetMetadataManager.deleteAllOffsets + GroupMetadataManager.deleteGroup): an Empty
        group is deleted with its offsets; a live one answers NON_EMPTY_GROUP, an unknown (or
        Dead) one GROUP_ID_NOT_FOUND."""
        classic = self.classic
        result_cls = R.nested(ApiKey.DELETE_GROUPS, ctx.api_version, "DeletableGroupResult")
        results = []
        for group_id in request.groups:
            group = classic.groups.get(group_id)
            consumer_code = self.consumer.delete_group(group_id)  # a KIP-848 group of that id
            if consumer_code is not None:
                code = consumer_code
                if code == NONE:
                    self.offsets.delete_group(group_id)
            elif group is None or group.is_in(GroupState.DEAD):
                code = GROUP_ID_NOT_FOUND
            elif group.is_in(GroupState.EMPTY):
                self.offsets.delete_group(group_id)
                classic._delete_group(group, "DeleteGroups")
                code = NONE
            else:
                code = NON_EMPTY_GROUP
            results.append(result_cls(group_id=group_id, error_code=R.error(code)))
        classic._respond(ctx, R.make(ApiKey.DELETE_GROUPS, ctx.api_version, results=tuple(results)))

    def _drop_classic_group(self, group_id: str) -> None:
        """maybeDeleteEmptyClassicGroup: an empty classic group gives its id to a consumer group
        (its committed offsets stay)."""
        group = self.classic.groups.get(group_id)
        if group is not None and group.is_in(GroupState.EMPTY):
            self.classic._delete_group(group, "replaced by a consumer group (KIP-848)")
        else:
            self.classic.groups.pop(group_id, None)
            self.classic._initial_join_pending.discard(group_id)

    # --- group metadata cleanup ---------------------------------------------------------------
    def _cleanup_group_metadata(self, now_ms: int) -> None:
        """GroupMetadataManager.cleanupGroupMetadata (Scala) / GroupCoordinatorShard.
        cleanupGroupMetadata -> OffsetMetadataManager.cleanupExpiredOffsets, then
        GroupMetadataManager.maybeDeleteGroup: an Empty group without offsets becomes Dead and is
        removed."""
        classic, offsets = self.classic, self.offsets
        retention_ms = classic.config.offsets_retention_ms
        keep_checking = False
        for group_id, group in list(classic.groups.items()):
            offsets.remove_expired_offsets(group, now_ms, retention_ms)
            if group.is_in(GroupState.EMPTY) and not offsets.has_offsets(group_id):
                classic._delete_group(group, "empty group without offsets: metadata cleaned up")
            elif group.is_in(GroupState.EMPTY) or group.protocol_type is None:
                keep_checking = True
        for group_id in self.consumer.empty_groups():  # maybeDeleteGroup for consumer groups
            # ConsumerGroup's offset expiration: an empty group's offsets expire `retention_ms`
            # after their commit.
            stored = offsets.of(group_id)
            expired = [tp for tp, o in stored.items() if now_ms - o.commit_ts_ms >= retention_ms]
            offsets.remove(group_id, expired)
            if offsets.has_offsets(group_id):
                keep_checking = True
            else:
                self.consumer.forget(group_id)
        if keep_checking:
            classic._schedule_cleanup()


def _as_is(request: Any, api_version: int) -> Any:
    return request  # the consumer group service reads the kio entity itself


# KafkaApis answers a request whose handling threw with `getErrorResponse(error)`: these are the
# JoinGroupRequest/SyncGroupRequest/LeaveGroupRequest/ListGroupsRequest versions of it.
def _join_error(api_version: int, error: E) -> Any:
    return R.join_group(api_version, error, member_id=UNKNOWN_MEMBER)


def _sync_error(api_version: int, error: E) -> Any:
    return R.sync_group(api_version, error)


def _leave_error(api_version: int, error: E) -> Any:
    return R.leave_group(api_version, error, [])


def _list_error(api_version: int, error: E) -> Any:
    return R.make(ApiKey.LIST_GROUPS, api_version, error_code=R.error(error), groups=())


# The (api_key, min, max) versions this coordinator answers; the server adds its own APIs.
SUPPORTED_VERSIONS: dict[int, tuple[int, int]] = GroupCoordinator().supported_versions()

__all__ = [
    "SUPPORTED_VERSIONS",
    "CoordinatorFault",
    "GroupCoordinator",
    "Route",
    "UnsupportedRequest",
    "heartbeat_key",
    "join_key",
    "sync_key",
]
