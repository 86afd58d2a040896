"""Replay recorded consumer groups: capture -> per-member scripts -> a coordinator -> events.

1. `build_scripts(capture)` reconstructs each member from its group requests on the client leg:
   identity (the group.instance.id if static, else client id + connection ordinal), the JoinGroup
   it sent (protocols, timeouts) and the versions of each group API, its sessions (when it joined,
   whether it stopped and whether it sent LeaveGroup), its heartbeat interval, and the partitions
   the group's assignments covered.
2. `replay_reference(...)` drives those members against the in-process reference coordinator in
   virtual time: the loop jumps to the next member action or coordinator deadline, so an hour of
   heartbeats takes seconds and two runs are identical.
3. Members are client state machines, not byte players (GoReplay-style live remapping): the member
   id, generation and leader in every later request come from the responses this run got, never
   from the recording. A member answered differently than recorded follows the protocol the way
   the Java consumer does: MEMBER_ID_REQUIRED -> rejoin with the given id, UNKNOWN_MEMBER_ID ->
   forget the id and rejoin, REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION -> rejoin,
   FENCED_INSTANCE_ID -> stop for good (it is fatal in the Java consumer).
4. A scenario (`replay.scenario`) changes versions (requests are re-encoded with
   `proxy.wire.convert`), static/dynamic membership, adds rolling bounces and faults, and states
   expectations checked on the replayed run's events.

Events come from `replay.observe.GroupObserver`, the same observer that reads the recorded run, so
`recorded`, `reference` and `broker-<version>` rows compare like with like.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import statistics
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from kio.schema.errors import ErrorCode

from proxy.capture.reader import Capture, exchanges
from proxy.wire import CodecError, request_schema, response_schema
from proxy.wire.apis import ApiKey
from proxy.wire.consumer_protocol import decode_assignment, encode_assignment
from proxy.wire.convert import convert
from replay.coordinator import CoordinatorConfig, GroupCoordinator, RequestContext, Respond
from replay.events import EventName, RebalanceEvent
from replay.observe import Exchange, GroupObserver
from replay.scenario import (
    AS_RECORDED,
    BounceOrder,
    LeaveOnShutdown,
    MemberSelector,
    MemberSettings,
    Membership,
    Scenario,
    VersionRule,
)

JOIN, SYNC, HEARTBEAT, LEAVE = (
    int(ApiKey.JOIN_GROUP),
    int(ApiKey.SYNC_GROUP),
    int(ApiKey.HEARTBEAT),
    int(ApiKey.LEAVE_GROUP),
)
DRIVEN_APIS = (JOIN, SYNC, HEARTBEAT, LEAVE)
API_VERSIONS = int(ApiKey.API_VERSIONS)
NEWEST = {JOIN: 9, SYNC: 5, HEARTBEAT: 4, LEAVE: 5}
# What a member that never used an API in the capture sends, given its JoinGroup version (the
# pairs Kafka clients ship together: Java 3.2+ v9/v5/v4/v5, 2.4-2.8 v5-v7/v3-v5/v3-v4/v3-v4).
COMPANION_VERSIONS = {
    JOIN: {},
    SYNC: {9: 5, 8: 5, 7: 5, 6: 4, 5: 3, 4: 2, 3: 2, 2: 1, 1: 1, 0: 0},
    HEARTBEAT: {9: 4, 8: 4, 7: 4, 6: 4, 5: 3, 4: 2, 3: 2, 2: 1, 1: 1, 0: 0},
    LEAVE: {9: 5, 8: 5, 7: 4, 6: 4, 5: 3, 4: 2, 3: 2, 2: 1, 1: 1, 0: 0},
}
MEMBER_ID_REQUIRED = int(ErrorCode.member_id_required)
UNKNOWN_MEMBER_ID = int(ErrorCode.unknown_member_id)
REBALANCE_IN_PROGRESS = int(ErrorCode.rebalance_in_progress)
ILLEGAL_GENERATION = int(ErrorCode.illegal_generation)
FENCED_INSTANCE_ID = int(ErrorCode.fenced_instance_id)
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
RETRY_BACKOFF_MS = 100
REQUEST_TIMEOUT_MS = 30_000


class ReplayInputError(ValueError):
    """A capture that holds nothing to replay (no group members)."""


# ---------------------------------------------------------------------------------------------
# 1. Capture -> member scripts


@dataclass(frozen=True, slots=True)
class Session:
    """One connection's worth of a member: joined at `start_ms`, stopped at `stop_ms` (None: alive
    when the capture ended), with or without a LeaveGroup."""

    start_ms: int
    stop_ms: int | None
    left: bool


@dataclass(frozen=True, slots=True)
class MemberScript:
    member_key: str
    client_id: str
    ordinal: int  # order of first appearance among the group's members
    group_id: str
    group_instance_id: str | None
    join_template: Any  # the first JoinGroup request, as recorded
    api_versions: dict[int, int]  # recorded version per driven API
    heartbeat_interval_ms: int
    sessions: tuple[Session, ...]
    client_software: str | None = None  # ApiVersions v3+ `name/version` of the recorded client


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    session_id: str
    scripts: tuple[MemberScript, ...]
    partitions: dict[str, tuple[dict[str, tuple[int, ...]], ...]] = field(default_factory=dict)
    end_ms: int = 0  # last recorded frame, ms since the session start
    recorded: tuple[Exchange, ...] = ()  # the recorded exchanges, for the `recorded` run
    damage: str | None = None


def _member_key(client_id: str, ordinal_on_client: int, instance_id: str | None) -> str:
    return instance_id if instance_id else f"{client_id}#{ordinal_on_client}"


def build_plan(capture: Capture, session_id: str) -> ReplayPlan:
    """Member scripts of every group in the capture (client leg: what the clients really sent)."""
    client_exchanges = exchanges(capture, "client")
    pairs = [ex for ex in client_exchanges if ex.request.api_key in (*DRIVEN_APIS, 8)]
    software_by_conn = _client_software_by_connection(client_exchanges)
    if not pairs:
        raise ReplayInputError(f"{session_id}: the capture holds no group requests")
    t0 = min(ex.request.ts_ns for ex in pairs)
    decoded: list[tuple[Any, Any, Any]] = []
    for ex in pairs:
        try:
            request, response = ex.decode()
        except CodecError:
            continue
        decoded.append((ex, request, response))
    # A connection belongs to the member whose JoinGroup it carried.
    conn_identity: dict[int, tuple[str, str | None]] = {}
    per_client_ordinals: dict[str, int] = defaultdict(int)
    first_join: dict[int, tuple[Any, Any]] = {}
    for ex, request, _ in decoded:
        if ex.request.api_key == JOIN and ex.conn not in conn_identity:
            client_id = ex.request.client_id or ""
            instance_id = getattr(request, "group_instance_id", None)
            ordinal = per_client_ordinals[client_id]
            per_client_ordinals[client_id] += 1
            conn_identity[ex.conn] = (_member_key(client_id, ordinal, instance_id), instance_id)
            first_join[ex.conn] = (ex, request)
    recorded: list[Exchange] = []
    by_member: dict[str, list[tuple[Any, Any, Any]]] = defaultdict(list)
    partitions: dict[str, set[tuple[str, int]]] = defaultdict(set)
    for ex, request, response in decoded:
        identity = conn_identity.get(ex.conn)
        if identity is None:
            continue
        ts_ms = (ex.request.ts_ns - t0) // 1_000_000
        recorded.append(
            Exchange(ts_ms, identity[0], ex.request.api_key, ex.request.api_version, request, response)
        )
        by_member[identity[0]].append((ex, request, response))
        if ex.request.api_key == SYNC and response is not None and int(response.error_code) == 0:
            try:
                for tp in decode_assignment(response.assignment):
                    topic, _, partition = tp.rpartition("-")
                    partitions[request.group_id].add((topic, int(partition)))
            except (CodecError, ValueError):
                pass
    scripts: list[MemberScript] = []
    order = sorted(by_member, key=lambda key: by_member[key][0][0].request.ts_ns)
    for ordinal, key in enumerate(order):
        rows = by_member[key]
        conns = sorted({ex.conn for ex, _, _ in rows}, key=lambda c: first_join[c][0].request.ts_ns)
        join_ex, join_request = first_join[conns[0]]
        versions: dict[int, int] = {}
        for ex, _, _ in rows:
            if ex.request.api_key in DRIVEN_APIS:
                versions.setdefault(ex.request.api_key, ex.request.api_version)
        beats = [ex.request.ts_ns for ex, _, _ in rows if ex.request.api_key == HEARTBEAT]
        gaps = [(b - a) // 1_000_000 for a, b in itertools.pairwise(beats) if b > a]
        interval = int(statistics.median(gaps)) if gaps else DEFAULT_HEARTBEAT_INTERVAL_MS
        sessions = []
        for conn in conns:
            conn_rows = [r for r in rows if r[0].conn == conn]
            start = (first_join[conn][0].request.ts_ns - t0) // 1_000_000
            left = any(ex.request.api_key == LEAVE for ex, _, _ in conn_rows)
            closed = capture.connections.get(conn)
            stop: int | None = None
            if left:
                stop = (max(ex.request.ts_ns for ex, _, _ in conn_rows) - t0) // 1_000_000
            elif closed is not None and closed.closed_ns is not None:
                stop = (closed.closed_ns - t0) // 1_000_000
            sessions.append(Session(start, stop, left))
        scripts.append(
            MemberScript(
                member_key=key,
                client_id=join_ex.request.client_id or "",
                ordinal=ordinal,
                group_id=str(join_request.group_id),
                group_instance_id=getattr(join_request, "group_instance_id", None),
                join_template=join_request,
                api_versions=versions,
                heartbeat_interval_ms=max(interval, 1),
                sessions=tuple(sessions),
                client_software=next((software_by_conn[c] for c in conns if c in software_by_conn), None),
            )
        )
    if not scripts:
        raise ReplayInputError(f"{session_id}: the capture holds no JoinGroup, so no member to replay")
    end_ms = (max(ex.request.ts_ns for ex in pairs) - t0) // 1_000_000
    layout: dict[str, tuple[dict[str, tuple[int, ...]], ...]] = {}
    for group_id, tps in partitions.items():
        by_topic: dict[str, list[int]] = defaultdict(list)
        for topic_name, partition_index in sorted(tps):
            by_topic[topic_name].append(partition_index)
        layout[group_id] = ({t: tuple(p) for t, p in by_topic.items()},)
    return ReplayPlan(session_id, tuple(scripts), layout, end_ms, tuple(recorded), capture.damage)


def _client_software_by_connection(pairs: list[Any]) -> dict[int, str]:
    """conn -> `name/version` from ApiVersions v3+ (KIP-511), the client's own name for itself."""
    software: dict[int, str] = {}
    for ex in pairs:
        if ex.request.api_key != API_VERSIONS or ex.request.api_version < 3 or ex.conn in software:
            continue
        try:
            request, _ = ex.decode()
        except CodecError:
            continue
        name = getattr(request, "client_software_name", "") or ""
        version = getattr(request, "client_software_version", "") or ""
        if name:
            software[ex.conn] = f"{name}/{version}" if version else name
    return software


def recorded_events(plan: ReplayPlan, scenario_name: str = "as-recorded") -> list[RebalanceEvent]:
    observer = GroupObserver(plan.session_id, scenario_name, "recorded")
    observer.client_software.update(
        {script.member_key: script.client_software for script in plan.scripts if script.client_software}
    )
    for exchange in plan.recorded:
        observer.observe(exchange)
    return observer.events


# ---------------------------------------------------------------------------------------------
# 2. Members as client state machines


@dataclass(slots=True)
class _Incarnation:
    """What a member is during one process lifetime (a bounce starts a new one)."""

    instance_id: str | None
    versions: dict[int, int]


@dataclass(slots=True)
class _Pending:
    member: SimMember
    incarnation: int
    api_key: int
    api_version: int
    request: Any
    sent_ms: int
    correlation_id: int = -1


class SimMember:
    """One consumer: join -> sync -> heartbeat, reacting to errors like the Java consumer."""

    def __init__(self, engine: _Engine, script: MemberScript) -> None:
        self.engine = engine
        self.script = script
        self.member_id = ""
        self.generation_id = -1
        self.incarnation = 0
        self.running = False
        self.fenced = False
        self.state = "down"  # down | joining | syncing | stable
        self.is_leader = False
        versions = dict(script.api_versions)
        join_version = versions.setdefault(JOIN, int(type(script.join_template).__version__))
        for api_key in (SYNC, HEARTBEAT, LEAVE):
            versions.setdefault(api_key, COMPANION_VERSIONS[api_key][join_version])
        self.settings = _Incarnation(script.group_instance_id, versions)
        self.connection_id = 0
        self._heartbeat_cache: tuple[tuple[int, int, str, str | None], Any] | None = None

    # -- identity -----------------------------------------------------------------------------
    @property
    def member_key(self) -> str:
        if self.settings.instance_id:
            return self.settings.instance_id
        return (
            self.script.member_key
            if not self.script.group_instance_id
            else f"{self.script.client_id}#{self.script.ordinal}"
        )

    def version(self, api_key: int) -> int:
        return self.settings.versions[api_key]

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, now_ms: int) -> None:
        if self.fenced or self.running:
            return
        self.running = True
        self.incarnation += 1
        self.connection_id = self.engine.new_connection_id()
        self.member_id = ""
        self.generation_id = -1
        self.is_leader = False
        self.join(now_ms)

    def restart(self, now_ms: int) -> None:
        """A recorded reconnect: the process restarted (a static member sends no LeaveGroup)."""
        self.stop(now_ms, leave=False)
        self.start(now_ms)

    def stop(self, now_ms: int, leave: bool) -> None:
        if not self.running:
            return
        if leave and self.member_id:
            self.send(now_ms, LEAVE, self._leave_request())
        if self.engine.on_close is not None:
            self.engine.on_close(self.connection_id, now_ms)
        self.running = False
        self.state = "down"
        self.incarnation += 1  # responses still in flight belong to the old process

    def join(self, now_ms: int) -> None:
        self.state = "joining"
        self.send(now_ms, JOIN, self._join_request())

    # -- requests (built at the newest version, converted to the member's) ---------------------
    def _join_request(self) -> Any:
        template = self.script.join_template
        values = {
            "group_id": template.group_id,
            "session_timeout": template.session_timeout,
            "rebalance_timeout": getattr(template, "rebalance_timeout", template.session_timeout),
            "member_id": self.member_id,
            "group_instance_id": self.settings.instance_id,
            "protocol_type": template.protocol_type,
            "protocols": tuple({"name": p.name, "metadata": p.metadata} for p in template.protocols),
            "reason": None,
        }
        return values

    def _sync_request(self, assignments: list[tuple[str, bytes]], protocol_name: str | None) -> Any:
        return {
            "group_id": self.script.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.settings.instance_id,
            "protocol_type": self.script.join_template.protocol_type,
            "protocol_name": protocol_name,
            "assignments": tuple({"member_id": m, "assignment": a} for m, a in assignments),
        }

    def _heartbeat_request(self) -> Any:
        return {
            "group_id": self.script.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.settings.instance_id,
        }

    def _leave_request(self) -> Any:
        return {
            "group_id": self.script.group_id,
            "members": (
                {"member_id": self.member_id, "group_instance_id": self.settings.instance_id, "reason": None},
            ),
        }

    def send(self, now_ms: int, api_key: int, values: dict[str, Any]) -> None:
        api_version = self.version(api_key)
        if api_key == HEARTBEAT:
            # a heartbeat is the same request until the generation or identity changes
            key = (api_version, self.generation_id, self.member_id, self.settings.instance_id)
            if self._heartbeat_cache is not None and self._heartbeat_cache[0] == key:
                entity = self._heartbeat_cache[1]
            else:
                entity = self._build(api_key, api_version, values)
                self._heartbeat_cache = (key, entity)
        else:
            entity = self._build(api_key, api_version, values)
        self.engine.submit(now_ms, _Pending(self, self.incarnation, api_key, api_version, entity, now_ms))

    @staticmethod
    def _build(api_key: int, api_version: int, values: dict[str, Any]) -> Any:
        newest = request_schema(api_key, NEWEST[api_key])
        return convert(_entity_from_mapping(newest, values), api_version).entity

    # -- responses ----------------------------------------------------------------------------
    def on_response(self, now_ms: int, pending: _Pending, response: Any) -> None:
        if pending.incarnation != self.incarnation or not self.running:
            return
        code = int(response.error_code)
        if code == FENCED_INSTANCE_ID:
            self.fenced = True
            self.running = False
            self.state = "down"
            return
        match pending.api_key:
            case ApiKey.JOIN_GROUP:
                self._on_join(now_ms, code, response)
            case ApiKey.SYNC_GROUP:
                self._on_sync(now_ms, code)
            case ApiKey.HEARTBEAT:
                self._on_heartbeat(now_ms, code, pending)

    def _rejoin_after(self, now_ms: int, code: int) -> None:
        if code == UNKNOWN_MEMBER_ID:
            self.member_id = ""
            self.generation_id = -1
        self.engine.at(
            now_ms + (0 if code in (REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID) else RETRY_BACKOFF_MS),
            self,
            lambda t: self.join(t),
        )

    def _on_join(self, now_ms: int, code: int, response: Any) -> None:
        if code == MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            self.join(now_ms)
            return
        if code:
            self._rejoin_after(now_ms, code)
            return
        self.member_id = response.member_id
        self.generation_id = int(response.generation_id)
        skip = bool(getattr(response, "skip_assignment", False))
        self.is_leader = response.leader == response.member_id
        assignments: list[tuple[str, bytes]] = []
        if self.is_leader and not skip:
            assignments = self.engine.assign(self.script.group_id, response.members)
        self.state = "syncing"
        self.send(now_ms, SYNC, self._sync_request(assignments, response.protocol_name))

    def _on_sync(self, now_ms: int, code: int) -> None:
        if code:
            self._rejoin_after(now_ms, code)
            return
        self.state = "stable"
        self._schedule_heartbeat(now_ms)

    def _schedule_heartbeat(self, now_ms: int) -> None:
        incarnation, generation = self.incarnation, self.generation_id

        def beat(t: int) -> None:
            if (
                self.incarnation == incarnation
                and self.state == "stable"
                and self.generation_id == generation
            ):
                self.send(t, HEARTBEAT, self._heartbeat_request())

        self.engine.at(now_ms + self.script.heartbeat_interval_ms, self, beat)

    def _on_heartbeat(self, now_ms: int, code: int, pending: _Pending) -> None:
        if code:
            if self.state == "stable":
                self.state = "joining"
                self._rejoin_after(now_ms, code)
            return
        if self.state == "stable":
            self._schedule_heartbeat(now_ms)


def _entity_from_mapping(cls: type[Any], values: dict[str, Any]) -> Any:
    """A kio entity of the newest version from plain values (nested entries as mappings)."""
    result = convert_from_mapping(cls, values)
    return result


def convert_from_mapping(cls: type[Any], values: dict[str, Any]) -> Any:
    from proxy.wire.convert import _build

    return _build(cls, values, "", [])


# ---------------------------------------------------------------------------------------------
# 3. The engine: scenario timeline + virtual-time loop against the reference coordinator


@dataclass(frozen=True, slots=True)
class RunResult:
    run: str
    events: tuple[RebalanceEvent, ...]
    rpcs: int
    simulated_ms: int
    failures: tuple[str, ...]  # unmet expectations


def _apply_settings(
    member: SimMember, settings: MemberSettings, broker_caps: tuple[VersionRule, ...]
) -> None:
    script = member.script
    match settings.membership:
        case Membership.STATIC:
            template = settings.instance_id or script.group_instance_id or "{client_id}-{ordinal}"
            member.settings.instance_id = _instance_id(template, member)
        case Membership.DYNAMIC:
            member.settings.instance_id = None
        case Membership.AS_RECORDED:
            member.settings.instance_id = script.group_instance_id
        case None:
            if settings.instance_id is not None:
                member.settings.instance_id = _instance_id(settings.instance_id, member)
    for rule in settings.api_versions:
        if rule.api_key == JOIN:
            member.settings.versions[JOIN] = rule.apply(member.settings.versions[JOIN])
            # companions follow the JoinGroup version unless the member recorded them
            for api_key in (SYNC, HEARTBEAT, LEAVE):
                if rule.exact:
                    member.settings.versions[api_key] = COMPANION_VERSIONS[api_key][
                        member.settings.versions[JOIN]
                    ]
        elif rule.api_key in member.settings.versions:
            member.settings.versions[rule.api_key] = rule.apply(member.settings.versions[rule.api_key])
    for rule in broker_caps:
        if rule.api_key in member.settings.versions:
            member.settings.versions[rule.api_key] = min(
                member.settings.versions[rule.api_key], rule.api_version
            )


def _instance_id(template: str, member: SimMember) -> str:
    return template.format(
        client_id=member.script.client_id, ordinal=member.script.ordinal, member_key=member.script.member_key
    )


def _matches(selector: MemberSelector, member: SimMember) -> bool:
    return selector.matches(
        client_id=member.script.client_id,
        ordinal=member.script.ordinal,
        instance_id=member.script.group_instance_id,
        member_key=member.script.member_key,
        is_leader=member.is_leader,
    )


def _stop_at(member: SimMember, leave: bool, now_ms: int) -> None:
    member.stop(now_ms, leave)


class _Engine:
    """Virtual-time loop: a heap of member actions, the coordinator's deadlines between them."""

    def __init__(
        self, plan: ReplayPlan, scenario: Scenario, run: str, config: CoordinatorConfig | None
    ) -> None:
        self.plan = plan
        self.scenario = scenario
        self.coordinator = GroupCoordinator(config)
        self.observer = GroupObserver(plan.session_id, scenario.name, run)
        self._heap: list[tuple[int, int, Callable[[int], None]]] = []
        self._seq = 0
        self._connections = 0
        self._correlation = 0
        self._pending: dict[tuple[int, int], _Pending] = {}
        self.rpcs = 0
        self.now_ms = 0
        self._fault_budget = [f.count for f in scenario.faults]
        self.members = [SimMember(self, script) for script in plan.scripts]
        self.window_start_ms = 0
        # (kind, now_ms, pending, response): a synthetic capture records the run through this
        self.recorder: Callable[[str, int, _Pending, Any], None] | None = None
        self.on_close: Callable[[int, int], None] | None = None  # (connection_id, now_ms)

    def new_connection_id(self) -> int:
        self._connections += 1
        return self._connections

    def at(self, when_ms: int, _member: SimMember | None, action: Callable[[int], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when_ms, self._seq, action))

    def assign(self, group_id: str, members: Iterable[Any]) -> list[tuple[str, bytes]]:
        """Round-robin of the recorded partitions over members sorted by instance id, then member id."""
        ordered = sorted(members, key=lambda m: (getattr(m, "group_instance_id", None) or "", m.member_id))
        layout = self.plan.partitions.get(group_id, ({},))[0]
        all_partitions = [(t, p) for t, parts in sorted(layout.items()) for p in parts]
        shares: dict[str, dict[str, list[int]]] = {m.member_id: defaultdict(list) for m in ordered}
        for i, (topic, partition) in enumerate(all_partitions):
            if ordered:
                shares[ordered[i % len(ordered)].member_id][topic].append(partition)
        return [(m.member_id, encode_assignment(dict(shares[m.member_id]))) for m in ordered]

    # -- requests through faults to the coordinator ------------------------------------------
    def submit(self, now_ms: int, pending: _Pending) -> None:
        for index, fault in enumerate(self.scenario.faults):
            if (
                self._fault_budget[index] > 0
                and fault.api_key == pending.api_key
                and now_ms >= self.window_start_ms + fault.at_ms
                and _matches(fault.match, pending.member)
            ):
                self._fault_budget[index] -= 1
                if fault.kind == "delay":
                    self.at(now_ms + fault.delay_ms, pending.member, partial(self._send_at, pending))
                elif fault.kind == "error":
                    response = _error_response(pending, fault.error_code)
                    self.at(now_ms, pending.member, partial(self._deliver_at, pending, response))
                # drop: the request never arrives; the member retries after its request timeout
                else:
                    self.at(
                        now_ms + REQUEST_TIMEOUT_MS,
                        pending.member,
                        partial(self._timed_out_at, pending),
                    )
                return
        self._send(now_ms, pending)

    def _send_at(self, pending: _Pending, now_ms: int) -> None:
        self._send(now_ms, pending)

    def _deliver_at(self, pending: _Pending, response: Any, now_ms: int) -> None:
        self._deliver(now_ms, pending, response)

    def _timed_out_at(self, pending: _Pending, now_ms: int) -> None:
        self._timed_out(now_ms, pending)

    def _bounce_at(self, index: int, now_ms: int) -> None:
        self._bounce(now_ms, index)

    def _timed_out(self, now_ms: int, pending: _Pending) -> None:
        member = pending.member
        if pending.incarnation == member.incarnation and member.running:
            member.state = "joining"
            member.join(now_ms)

    def _send(self, now_ms: int, pending: _Pending) -> None:
        self.rpcs += 1
        self._correlation += 1
        member = pending.member
        context = RequestContext(
            connection_id=member.connection_id,
            client_id=member.script.client_id,
            client_host="/127.0.0.1",
            api_version=pending.api_version,
            correlation_id=self._correlation,
        )
        self._pending[(member.connection_id, self._correlation)] = pending
        if self.recorder is not None:
            pending.correlation_id = self._correlation
            self.recorder("request", now_ms, pending, None)
        self._outputs(now_ms, self.coordinator.handle(now_ms, context, pending.request))

    def _outputs(self, now_ms: int, outputs: list[Any]) -> None:
        for output in outputs:
            if isinstance(output, Respond):
                pending = self._pending.pop(
                    (output.context.connection_id, output.context.correlation_id), None
                )
                if pending is None:
                    continue
                if pending.api_key == HEARTBEAT:
                    # a heartbeat answer only schedules the next beat: deliver it now (the hot path)
                    self._deliver(now_ms, pending, output.response)
                else:
                    self.at(now_ms, pending.member, partial(self._deliver_at, pending, output.response))

    def _deliver(self, now_ms: int, pending: _Pending, response: Any) -> None:
        member = pending.member
        if self.recorder is not None and pending.correlation_id >= 0:
            self.recorder("response", now_ms, pending, response)
        # The observer derives nothing from a successful heartbeat (replay.observe): skip building
        # the exchange on the hot path.
        if pending.api_key != HEARTBEAT or response.error_code != 0:
            if member.script.client_software:
                self.observer.client_software.setdefault(member.member_key, member.script.client_software)
            self.observer.observe(
                Exchange(
                    now_ms, member.member_key, pending.api_key, pending.api_version, pending.request, response
                )
            )
        member.on_response(now_ms, pending, response)

    # -- the timeline -------------------------------------------------------------------------
    def schedule(self) -> int:
        """Queue sessions, bounces and stops; returns when the run ends (virtual ms)."""
        scenario = self.scenario
        for member in self.members:
            settings = MemberSettings(membership=None, api_versions=())
            _apply_settings(member, settings, scenario.broker_api_versions)
            for rule in scenario.members:
                if _matches(rule.match, member):
                    _apply_settings(member, rule.settings, scenario.broker_api_versions)
                    break
        end_ms = self.plan.end_ms
        first_joins = [m.script.sessions[0].start_ms for m in self.members]
        settle_ms = max(first_joins) if first_joins else 0
        for member in self.members:
            for index, session in enumerate(member.script.sessions):
                self.at(session.start_ms, member, member.start if index == 0 else member.restart)
                if session.stop_ms is not None:
                    self.at(session.stop_ms, member, partial(_stop_at, member, session.left))
        rolling = scenario.rolling
        if rolling is not None:
            first_bounce = settle_ms + rolling.start_ms
            self.window_start_ms = first_bounce
            count = len(self.members)
            for index in range(count):
                when = first_bounce + index * rolling.interval_ms
                self.at(when, None, partial(self._bounce_at, index))
            end_ms = max(end_ms, first_bounce + count * rolling.interval_ms + rolling.downtime_ms)
        else:
            self.window_start_ms = settle_ms if scenario is not AS_RECORDED else 0
        return end_ms + scenario.duration_ms

    def _bounce_order(self) -> list[SimMember]:
        rolling = self.scenario.rolling
        assert rolling is not None
        candidates = [
            m for m in self.members if not rolling.members or any(_matches(s, m) for s in rolling.members)
        ]
        match rolling.order:
            case BounceOrder.REVERSE:
                candidates.reverse()
            case BounceOrder.LEADER_FIRST:
                candidates.sort(key=lambda m: not m.is_leader)
            case BounceOrder.LEADER_LAST:
                candidates.sort(key=lambda m: m.is_leader)
        return candidates

    def _bounce(self, now_ms: int, index: int) -> None:
        """The index-th bounce: the order is decided when the first bounce starts (the leader then)."""
        if index == 0:
            self._order = self._bounce_order()
        order: list[SimMember] = getattr(self, "_order", [])
        if index >= len(order):
            return
        member = order[index]
        rolling = self.scenario.rolling
        assert rolling is not None
        static = member.settings.instance_id is not None
        leave = rolling.leave_on_shutdown == LeaveOnShutdown.ALWAYS or (
            rolling.leave_on_shutdown == LeaveOnShutdown.DYNAMIC and not static
        )
        member.stop(now_ms, leave)

        def restart(t: int) -> None:
            _apply_settings(member, rolling.after, self.scenario.broker_api_versions)
            member.start(t)

        self.at(now_ms + rolling.downtime_ms, member, restart)

    def run(self, progress: Callable[[int, int], None] | None = None) -> int:
        end_ms = self.schedule()
        coordinator = self.coordinator
        heap = self._heap
        last_report = 0
        while True:
            next_action = heap[0][0] if heap else None
            deadline = coordinator.next_deadline()
            if next_action is None and deadline is None:
                break
            if deadline is not None and (next_action is None or deadline < next_action):
                if deadline > end_ms:
                    break
                self.now_ms = max(self.now_ms, deadline)
                self._outputs(self.now_ms, coordinator.advance(self.now_ms))
                continue
            assert next_action is not None
            if next_action > end_ms:
                break
            when, _, action = heapq.heappop(heap)
            self.now_ms = max(self.now_ms, when)
            action(self.now_ms)
            if progress is not None and self.now_ms - last_report >= 10_000:
                last_report = self.now_ms
                progress(self.now_ms, end_ms)
        if progress is not None:
            progress(end_ms, end_ms)
        return end_ms


def _error_response(pending: _Pending, error_code: int) -> Any:

    cls = response_schema(pending.api_key, pending.api_version)
    values: dict[str, Any] = {"error_code": ErrorCode(error_code)}
    return convert_from_mapping(cls, values)


# ---------------------------------------------------------------------------------------------
# 4. Expectations


def check_expectations(
    scenario: Scenario, events: Iterable[RebalanceEvent], window_start_ms: int
) -> list[str]:
    rows = list(events)
    in_window = [e for e in rows if e.ts_ms >= window_start_ms]
    expect = scenario.expect
    failures: list[str] = []
    if expect.rebalances is not None:
        seen = [e.member_key for e in in_window if e.event == EventName.REBALANCE_STARTED]
        why = expect.rebalances.check(seen)
        if why:
            failures.append(f"rebalances: {why}")
    if expect.fenced is not None:
        why = expect.fenced.check([e.member_key for e in rows if e.event == EventName.MEMBER_FENCED])
        if why:
            failures.append(f"fenced: {why}")
    if expect.expired is not None:
        why = expect.expired.check([e.member_key for e in rows if e.event == EventName.MEMBER_EXPIRED])
        if why:
            failures.append(f"expired: {why}")
    if expect.leader_skips_assignment is not None:
        skipped = any(
            e.event == EventName.MEMBER_JOINED and e.is_leader and e.skip_assignment for e in in_window
        )
        if skipped != expect.leader_skips_assignment:
            failures.append(
                f"leader_skips_assignment: expected {str(expect.leader_skips_assignment).lower()}, "
                f"saw {str(skipped).lower()}"
            )
    codes = {e.error_code for e in rows}
    for code in expect.errors:
        if code not in codes:
            failures.append(f"errors: expected error code {code} ({ErrorCode(code).name}), not seen")
    return failures


def replay_reference(
    plan: ReplayPlan,
    scenario: Scenario = AS_RECORDED,
    *,
    config: CoordinatorConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Replay against the in-process reference coordinator in virtual time."""
    engine = _Engine(plan, scenario, "reference", config)
    end_ms = engine.run(progress)
    events = tuple(engine.observer.events)
    failures = tuple(check_expectations(scenario, events, engine.window_start_ms))
    return RunResult("reference", events, engine.rpcs, end_ms, failures)


# ---------------------------------------------------------------------------------------------
# 5. Synthetic captures (tests, benchmark): a reference run recorded through the proxy's writer


def synthesize_capture(
    path: Any,
    *,
    members: int = 3,
    group_id: str = "replay-group",
    client_id: str = "consumer",
    static: bool = False,
    join_api_version: int = 9,
    topic: str = "orders",
    partitions: int = 6,
    duration_ms: int = 60_000,
    heartbeat_interval_ms: int = 3_000,
    session_timeout_ms: int = 45_000,
    rebalance_timeout_ms: int = 300_000,
    stagger_ms: int = 200,
    rolling_bounce: bool = False,
    client_software: str | None = None,
) -> ReplayPlan:
    """Write a capture of `members` consumers running against the reference coordinator.

    With `client_software` ("name/version"), every connection opens with an ApiVersions v3
    exchange naming it, as KIP-511 clients do.

    Frames go through `proxy.capture.writer.CaptureWriter` exactly as the proxy records them
    (client leg = upstream leg, nothing rewritten); the returned plan is what was driven.
    """
    import datetime

    from kio.static.primitive import i32Timedelta

    from proxy.capture.writer import CaptureWriter
    from proxy.session import Record
    from proxy.wire import encode_request, encode_response
    from proxy.wire.consumer_protocol import encode_subscription

    def ms(value: int) -> Any:
        return i32Timedelta.parse(datetime.timedelta(milliseconds=value))

    join_cls = request_schema(JOIN, NEWEST[JOIN])
    scripts = []
    for ordinal in range(members):
        instance_id = f"{client_id}-{ordinal}" if static else None
        template = convert_from_mapping(
            join_cls,
            {
                "group_id": group_id,
                "session_timeout": ms(session_timeout_ms),
                "rebalance_timeout": ms(rebalance_timeout_ms),
                "member_id": "",
                "group_instance_id": instance_id,
                "protocol_type": "consumer",
                "protocols": ({"name": "range", "metadata": encode_subscription([topic])},),
            },
        )
        template = convert(template, join_api_version).entity
        versions = {
            JOIN: join_api_version,
            **{k: COMPANION_VERSIONS[k][join_api_version] for k in (SYNC, HEARTBEAT, LEAVE)},
        }
        key = instance_id or f"{client_id}-{ordinal}#0"
        scripts.append(
            MemberScript(
                key,
                f"{client_id}-{ordinal}",
                ordinal,
                group_id,
                instance_id,
                template,
                versions,
                heartbeat_interval_ms,
                (Session(ordinal * stagger_ms, None, False),),
            )
        )
    plan = ReplayPlan("synthetic", tuple(scripts), {group_id: ({topic: tuple(range(partitions))},)}, 0)
    scenario = AS_RECORDED
    if rolling_bounce:
        from replay.scenario import RollingBounce

        scenario = replace(
            AS_RECORDED,
            name="synthetic-bounce",
            rolling=RollingBounce(
                start_ms=10_000,
                interval_ms=max(1, (duration_ms - 20_000) // max(members, 1)),
                downtime_ms=1_000,
            ),
        )
    engine = _Engine(plan, replace(scenario, duration_ms=duration_ms), "recorded", None)
    writer = CaptureWriter(path, upstream="reference:0", policy="pass-through")
    base_ns = 1_700_000_000_000_000_000
    opened: set[int] = set()

    def record(kind: str, now_ms: int, pending: _Pending, response: Any) -> None:
        member = pending.member
        conn = member.connection_id
        ts_ns = base_ns + now_ms * 1_000_000
        if conn not in opened:
            opened.add(conn)
            writer.open_connection(
                conn, ts_ns, f"10.0.0.{member.script.ordinal % 250 + 1}:5{conn:04d}", "reference:0"
            )
            if client_software is not None:
                name, _, software_version = client_software.partition("/")
                hello = convert_from_mapping(
                    request_schema(API_VERSIONS, 3),
                    {"client_software_name": name, "client_software_version": software_version},
                )
                hello_reply = convert_from_mapping(
                    response_schema(API_VERSIONS, 3), {"error_code": ErrorCode.none}
                )
                for direction, frame in (
                    ("request", encode_request(hello, 0, member.script.client_id)[4:]),
                    ("response", encode_response(hello_reply, 0)[4:]),
                ):
                    writer.record(
                        Record(
                            conn,
                            direction,
                            ts_ns,
                            API_VERSIONS,
                            3,
                            3,
                            0,
                            member.script.client_id,
                            None,
                            frame,
                            frame,
                        )
                    )
        if kind == "request":
            payload = encode_request(pending.request, pending.correlation_id, member.script.client_id)[4:]
        else:
            payload = encode_response(response, pending.correlation_id)[4:]
        writer.record(
            Record(
                conn,
                kind,
                ts_ns,
                pending.api_key,
                pending.api_version,
                pending.api_version,
                pending.correlation_id,
                member.script.client_id,
                group_id,
                payload,
                payload,
            )
        )

    def closed(conn: int, now_ms: int) -> None:
        if conn in opened:
            writer.close_connection(conn, base_ns + now_ms * 1_000_000, "client closed")

    engine.recorder = record
    engine.on_close = closed
    try:
        engine.run()
    finally:
        writer.close()
    return plan


# ---------------------------------------------------------------------------------------------
# 6. Live brokers over TCP, in real time scaled by `speed`


class _LiveEngine(_Engine):
    """The same members, scenario and observer, against a real broker over TCP.

    Each member incarnation has its own connection (a restarted process reconnects). Versions are
    clamped to what the broker advertises in ApiVersions, as a client negotiates them. Time runs on
    the wall clock times `speed`: recorded and scenario times are divided by it; the broker's own
    timeouts (session, rebalance) are real, so a large speed shortens gaps but not those waits.
    """

    def __init__(
        self, plan: ReplayPlan, scenario: Scenario, run: str, host: str, port: int, speed: float
    ) -> None:
        super().__init__(plan, scenario, run, None)
        self.host = host
        self.port = port
        self.speed = speed
        self._writers: dict[int, Any] = {}
        self._inflight: dict[int, dict[int, _Pending]] = defaultdict(dict)
        self._wake: Any = None
        self._loop: Any = None
        self._start = 0.0
        self._tasks: list[Any] = []
        self.error: BaseException | None = None

    def clock_ms(self) -> int:
        return int((self._loop.time() - self._start) * 1000 * self.speed)

    def at(self, when_ms: int, _member: SimMember | None, action: Callable[[int], None]) -> None:
        super().at(when_ms, _member, action)
        if self._wake is not None:
            self._wake.set()

    def _send(self, now_ms: int, pending: _Pending) -> None:
        self.rpcs += 1
        self._correlation += 1
        correlation_id = self._correlation
        member = pending.member
        self._inflight[member.connection_id][correlation_id] = pending
        task = self._loop.create_task(self._write(member.connection_id, correlation_id, pending))
        self._tasks.append(task)

    async def _connection(self, connection_id: int) -> Any:
        import asyncio

        writer = self._writers.get(connection_id)
        if writer is None:
            reader, writer = await asyncio.open_connection(self.host, self.port)
            self._writers[connection_id] = writer
            self._tasks.append(self._loop.create_task(self._read(connection_id, reader)))
        return writer

    async def _write(self, connection_id: int, correlation_id: int, pending: _Pending) -> None:
        from proxy.wire import encode_request

        try:
            writer = await self._connection(connection_id)
            writer.write(encode_request(pending.request, correlation_id, pending.member.script.client_id))
            await writer.drain()
        except OSError as exc:
            self.error = exc
            self._wake.set()

    async def _read(self, connection_id: int, reader: Any) -> None:
        import asyncio

        from proxy.wire import FrameDecoder, decode_response, peek_correlation_id

        decoder = FrameDecoder()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    return
                for response_frame in decoder.feed(data):
                    correlation_id = peek_correlation_id(response_frame)
                    pending = self._inflight[connection_id].pop(correlation_id, None)
                    if pending is None:
                        continue
                    _, response = decode_response(response_frame, pending.api_key, pending.api_version)
                    now_ms = max(self.clock_ms(), self.now_ms)
                    self.now_ms = now_ms
                    self._deliver(now_ms, pending, response)
                    if pending.api_key == LEAVE:
                        self._close(connection_id)
                    self._wake.set()
        except (OSError, asyncio.CancelledError):
            return

    def _close(self, connection_id: int) -> None:
        writer = self._writers.pop(connection_id, None)
        if writer is not None:
            writer.close()

    async def run_live(self, progress: Callable[[int, int], None] | None) -> int:
        import asyncio

        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        await self._negotiate()
        end_ms = self.schedule()
        self._start = self._loop.time()
        heap = self._heap
        last_report = 0
        try:
            while self.error is None:
                now_ms = self.clock_ms()
                if now_ms >= end_ms:
                    break
                if heap and heap[0][0] <= now_ms:
                    _, _, action = heapq.heappop(heap)
                    self.now_ms = max(self.now_ms, now_ms)
                    action(self.now_ms)
                    continue
                wait_ms = (heap[0][0] if heap else end_ms) - now_ms
                self._wake.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        self._wake.wait(), timeout=min(wait_ms, end_ms - now_ms) / 1000 / self.speed
                    )
                if progress is not None and now_ms - last_report >= 1_000:
                    last_report = now_ms
                    progress(now_ms, end_ms)
        finally:
            for member in self.members:
                member.running = False
            for connection_id in list(self._writers):
                self._close(connection_id)
            for task in self._tasks:
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
        if self.error is not None:
            raise OSError(f"{self.host}:{self.port}: {self.error}")
        if progress is not None:
            progress(end_ms, end_ms)
        return end_ms

    async def _find_coordinator(self, ranges: dict[int, tuple[int, int]]) -> None:
        groups = sorted({m.script.group_id for m in self.members})
        coordinators = {await _find_coordinator_of(self.host, self.port, g, ranges) for g in groups}
        if len(coordinators) == 1:
            self.host, self.port = next(iter(coordinators))

    async def _negotiate(self) -> None:
        """Clamp every member's versions to the broker's ApiVersions ranges."""
        import asyncio

        from kio.schema.api_versions.v0.request import ApiVersionsRequest

        from proxy.wire import FrameDecoder, decode_response, encode_request

        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(encode_request(ApiVersionsRequest(), 1, "group-replay"))
            await writer.drain()
            decoder = FrameDecoder()
            frames: list[bytes] = []
            while not frames:
                data = await asyncio.wait_for(reader.read(65536), timeout=10)
                if not data:
                    raise OSError("connection closed during ApiVersions")
                frames = decoder.feed(data)
            _, response = decode_response(frames[0], 18, 0)
        finally:
            writer.close()
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}
        await self._find_coordinator(ranges)
        for member in self.members:
            for api_key, version in list(member.settings.versions.items()):
                low, high = ranges.get(api_key, (0, -1))
                if high < 0 or min(version, high) < low:
                    raise ValueError(
                        f"the broker does not support {ApiKey(api_key).name} v{version} "
                        f"(it has v{low}..v{high})"
                    )
                member.settings.versions[api_key] = min(version, high)
        self.broker_ranges = ranges


async def _find_coordinator_of(
    host: str, port: int, group_id: str, ranges: dict[int, tuple[int, int]], timeout_s: float = 60.0
) -> tuple[str, int]:
    """FindCoordinator until the broker names one (the offsets topic is created on first ask)."""
    import asyncio

    from proxy.wire import FrameDecoder, decode_response, encode_request

    api_version = min(3, ranges.get(10, (0, 3))[1])
    request = convert_from_mapping(request_schema(10, api_version), {"key": group_id, "key_type": 0})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = "no answer"
    while loop.time() < deadline:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(encode_request(request, 1, "group-replay"))
            await writer.drain()
            decoder = FrameDecoder()
            frames: list[bytes] = []
            while not frames:
                data = await asyncio.wait_for(reader.read(65536), timeout=10)
                if not data:
                    raise OSError("connection closed during FindCoordinator")
                frames = decoder.feed(data)
            _, response = decode_response(frames[0], 10, api_version)
        finally:
            writer.close()
        if int(response.error_code) == 0:
            return str(response.host), int(response.port)
        last = ErrorCode(int(response.error_code)).name
        await asyncio.sleep(0.5)
    raise OSError(f"{host}:{port}: no coordinator for group {group_id!r} ({last})")


def replay_live(
    plan: ReplayPlan,
    scenario: Scenario = AS_RECORDED,
    *,
    address: str,
    run: str | None = None,
    speed: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Replay against a live broker at HOST:PORT (the group coordinator of a one-node cluster)."""
    import asyncio

    host, _, port = address.rpartition(":")
    engine = _LiveEngine(plan, scenario, run or f"broker-{address}", host, int(port), speed)
    end_ms = asyncio.run(engine.run_live(progress))
    events = tuple(engine.observer.events)
    failures = tuple(check_expectations(scenario, events, engine.window_start_ms))
    return RunResult(engine.observer.run, events, engine.rpcs, end_ms, failures)


def replay_broker_version(
    plan: ReplayPlan,
    scenario: Scenario = AS_RECORDED,
    *,
    kafka_version: str,
    speed: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Start a real broker of `kafka_version` (harness, Maven jars), replay against it, stop it."""
    from harness.broker import start_broker

    with start_broker(kafka_version=kafka_version) as broker:
        return replay_live(
            plan,
            scenario,
            address=broker.bootstrap,
            run=f"broker-{kafka_version}",
            speed=speed,
            progress=progress,
        )


__all__ = [
    "MemberScript",
    "ReplayInputError",
    "ReplayPlan",
    "RunResult",
    "Session",
    "SimMember",
    "build_plan",
    "check_expectations",
    "recorded_events",
    "replay_broker_version",
    "replay_live",
    "replay_reference",
    "synthesize_capture",
]
