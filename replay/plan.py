"""Capture -> replay plan: each recorded member's identity, JoinGroup, API versions and sessions.

`build_plan(capture)` reconstructs each member from its group requests on the client leg (what
the clients really sent): identity (`member_key`: the group.instance.id if static, else client
id + ordinal among that client id's members, AGREED #3: one name in every run and scenario), the
JoinGroup it sent (protocols, timeouts), the versions of each group API, its sessions (when it
joined, whether it stopped and whether it sent LeaveGroup), its heartbeat interval, and the
partitions the group's assignments covered. `recorded_events(plan)` is the `recorded` run: the
recorded exchanges through the same observer every run uses.

Members of both protocols: a session (one connection) is classic (JoinGroup/SyncGroup/Heartbeat)
or consumer (KIP-848 ConsumerGroupHeartbeat), so a capture of a migration - members restarted
with `group.protocol=consumer` one by one - plans each member with the protocol of each of its
sessions (`Session.protocol`); what the consumer protocol adds is `replay.consumer_plan`'s.
"""

from __future__ import annotations

import dataclasses
import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from proxy.capture.reader import Capture, exchanges
from proxy.wire import CodecError
from proxy.wire.apis import ApiKey
from proxy.wire.consumer_protocol import decode_assignment
from replay import consumer_plan
from replay.consumer_plan import CONSUMER_HEARTBEAT
from replay.events import RECORDED_RUN, RebalanceEvent
from replay.member import DEFAULT_HEARTBEAT_INTERVAL_MS, GROUP_APIS, HEARTBEAT, JOIN, LEAVE, SYNC
from replay.migration import GroupProtocol
from replay.observe import Exchange, GroupObserver

API_VERSIONS = int(ApiKey.API_VERSIONS)
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
MEMBER_APIS = (*GROUP_APIS, CONSUMER_HEARTBEAT)  # what a member sends to its group, either protocol


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
    protocol: GroupProtocol = GroupProtocol.CLASSIC
    member_id: str | None = None  # a consumer-protocol session's member id, as recorded


@dataclass(frozen=True, slots=True)
class MemberScript:
    member_key: str
    client_id: str
    ordinal: int  # order of first appearance among the group's members
    group_id: str
    group_instance_id: str | None
    join_template: Any  # the first JoinGroup request as recorded (consumer only: synthesized)
    api_versions: dict[int, int]  # recorded version per driven API
    heartbeat_interval_ms: int
    sessions: tuple[Session, ...]
    client_software: str | None = None  # ApiVersions v3+ `name/version` of the recorded client
    heartbeat_times_ms: tuple[int, ...] = ()  # when the recorded client sent each Heartbeat (sorted)
    # KIP-848: the first joining ConsumerGroupHeartbeat as recorded (None: never spoke it), and
    # when the recorded client sent each ConsumerGroupHeartbeat (sorted)
    heartbeat_template: Any = None
    consumer_heartbeat_times_ms: tuple[int, ...] = ()

    @property
    def protocols(self) -> frozenset[GroupProtocol]:
        return frozenset(session.protocol for session in self.sessions)


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    session_id: str
    scripts: tuple[MemberScript, ...]
    partitions: dict[str, tuple[dict[str, tuple[int, ...]], ...]] = field(default_factory=dict)
    end_ms: int = 0  # last recorded frame, ms since the session start
    recorded: tuple[Exchange, ...] = ()  # the recorded exchanges, for the `recorded` run
    damage: str | None = None
    # The recorded broker's group settings from the capture header (AGREED #2), None if unknown.
    group_settings: Any = None
    topic_ids: dict[str, UUID] = field(default_factory=dict)  # the recorded topic ids (Metadata)

    @property
    def uses_consumer_protocol(self) -> bool:
        """Whether a recorded member spoke KIP-848 (the run needs a Kafka 4.x coordinator)."""
        return any(GroupProtocol.CONSUMER in script.protocols for script in self.scripts)


def member_key(client_id: str, ordinal_on_client: int, instance_id: str | None) -> str:
    return instance_id if instance_id else f"{client_id}#{ordinal_on_client}"


def build_plan(capture: Capture, session_id: str) -> ReplayPlan:
    """Member scripts of every group in the capture (client leg: what the clients really sent)."""
    client_exchanges = exchanges(capture, "client")
    pairs = [ex for ex in client_exchanges if ex.request.api_key in (*MEMBER_APIS, OFFSET_COMMIT)]
    software_by_conn = _client_software_by_connection(client_exchanges)
    if not pairs:
        raise ReplayInputError(f"{session_id}: the capture holds no group requests")
    t0 = min(ex.request.ts_ns for ex in pairs)
    decoded = _decoded(pairs)
    names = consumer_plan.topic_names(consumer_plan.metadata_answers(client_exchanges))
    conn_identity, first_join = _identities(decoded)
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
            partitions[request.group_id].update(_assigned(response))
        elif ex.request.api_key == CONSUMER_HEARTBEAT:
            partitions[request.group_id].update(consumer_plan.assigned(response, names))
    order = sorted(by_member, key=lambda key: by_member[key][0][0].request.ts_ns)
    scripts = [
        _member_script(capture, t0, key, ordinal, by_member[key], first_join, software_by_conn)
        for ordinal, key in enumerate(order)
    ]
    if not scripts:
        raise ReplayInputError(
            f"{session_id}: the capture holds no JoinGroup or joining ConsumerGroupHeartbeat, "
            "so no member to replay"
        )
    end_ms = (max(ex.request.ts_ns for ex in pairs) - t0) // 1_000_000
    layout = {group_id: _layout(tps) for group_id, tps in partitions.items()}
    return ReplayPlan(
        session_id,
        tuple(scripts),
        layout,
        end_ms,
        tuple(recorded),
        capture.damage,
        getattr(capture, "group_settings", None),  # proxy.capture.reader lands it (AGREED #2)
        {name: topic_id for topic_id, name in names.items()},
    )


def _decoded(pairs: list[Any]) -> list[tuple[Any, Any, Any]]:
    """(exchange, request, response) of each pair that decodes and reached the group's
    coordinator (`replay.consumer_plan.reached_the_group`)."""
    decoded: list[tuple[Any, Any, Any]] = []
    for ex in pairs:
        try:
            request, response = ex.decode()
        except CodecError:
            continue
        if consumer_plan.reached_the_group(ex.request.api_key, response):
            decoded.append((ex, request, response))
    return decoded


def recorded_member_ids(plan: ReplayPlan) -> dict[tuple[str, str | None], tuple[str, ...]]:
    """The member ids the recorded broker issued, per (client id, group.instance.id), in the
    order it issued them: each JoinGroup answer carrying an id the request did not (the
    MEMBER_ID_REQUIRED answer of JoinGroup v4+, a v0-v3 or static member's first answer, a static
    member's replacement id)."""
    client_ids = {script.member_key: script.client_id for script in plan.scripts}
    issued: dict[tuple[str, str | None], list[str]] = defaultdict(list)
    seen: set[str] = set()
    for ex in sorted(plan.recorded, key=lambda ex: ex.ts_ms):
        if ex.api_key != JOIN or ex.response is None:
            continue
        given = str(ex.response.member_id or "")
        if not given or given == str(ex.request.member_id or "") or given in seen:
            continue
        seen.add(given)
        instance_id = getattr(ex.request, "group_instance_id", None)
        issued[(client_ids.get(ex.member_key, ""), instance_id)].append(given)
    return {key: tuple(ids) for key, ids in issued.items()}


class RecordedMemberIds:
    """A coordinator's `member_ids` (CoordinatorConfig) for an as-recorded replay: the ids the
    recorded broker issued, handed out per (client id, group.instance.id) in the recorded order,
    so that Kafka's members map iterates as it did there (the new leader when the leader leaves
    is the first member in hash order: `replay.coordinator.hashorder`). None once a member asks
    for more than were recorded (the coordinator then generates one)."""

    def __init__(self, plan: ReplayPlan) -> None:
        self._queues = {key: list(reversed(ids)) for key, ids in recorded_member_ids(plan).items()}

    def __call__(self, client_id: str, group_instance_id: str | None) -> str | None:
        queue = self._queues.get((client_id, group_instance_id))
        return queue.pop() if queue else None


def _identities(
    decoded: list[tuple[Any, Any, Any]],
) -> tuple[dict[int, tuple[str, str | None]], dict[int, tuple[Any, Any]]]:
    """A connection belongs to the member whose JoinGroup or joining ConsumerGroupHeartbeat it
    carried (or a heartbeat of a member id already seen: the same process reconnected): conn ->
    (member key, instance id), and conn -> its first such request (exchange, request)."""
    conn_identity: dict[int, tuple[str, str | None]] = {}
    per_client_ordinals: dict[str, int] = defaultdict(int)
    first_join: dict[int, tuple[Any, Any]] = {}
    by_member_id: dict[str, tuple[str, str | None]] = {}
    for ex, request, response in decoded:
        if ex.conn in conn_identity:
            continue
        match ex.request.api_key:
            case ApiKey.JOIN_GROUP:
                instance_id = getattr(request, "group_instance_id", None)
            case ApiKey.CONSUMER_GROUP_HEARTBEAT:
                instance_id = request.instance_id
                member_id = consumer_plan.recorded_member_id(request, response)
                if not consumer_plan.is_heartbeat_join(request):
                    if member_id in by_member_id:  # the process reconnected
                        conn_identity[ex.conn] = by_member_id[member_id]
                        first_join[ex.conn] = (ex, request)
                    continue
            case _:
                continue
        client_id = ex.request.client_id or ""
        ordinal = per_client_ordinals[client_id]
        per_client_ordinals[client_id] += 1
        conn_identity[ex.conn] = (member_key(client_id, ordinal, instance_id), instance_id)
        first_join[ex.conn] = (ex, request)
        if ex.request.api_key == CONSUMER_HEARTBEAT and member_id:
            by_member_id[member_id] = conn_identity[ex.conn]
    return conn_identity, first_join


def _assigned(response: Any) -> list[tuple[str, int]]:
    """The (topic, partition)s a SyncGroup answer assigned, up to the first that does not decode."""
    assigned: list[tuple[str, int]] = []
    try:
        for tp in decode_assignment(response.assignment):
            assigned.append(_topic_partition(tp))
    except (CodecError, ValueError):
        pass
    return assigned


def _topic_partition(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


def _member_script(
    capture: Capture,
    t0: int,
    key: str,
    ordinal: int,
    rows: list[tuple[Any, Any, Any]],
    first_join: dict[int, tuple[Any, Any]],
    software_by_conn: dict[int, str],
) -> MemberScript:
    """One member's script: its first JoinGroup as template (a consumer-protocol member's first
    joining heartbeat, and a JoinGroup synthesized from it), the group API versions it used, its
    heartbeat rhythm and one session per connection (start, stop, left, protocol)."""
    conns = sorted({ex.conn for ex, _, _ in rows}, key=lambda c: first_join[c][0].request.ts_ns)
    joins = [first_join[c] for c in conns]
    classic = next(((ex, r) for ex, r in joins if ex.request.api_key == JOIN), None)
    consumer = next(((ex, r) for ex, r in joins if ex.request.api_key == CONSUMER_HEARTBEAT), None)
    first_ex = joins[0][0]
    client_id = first_ex.request.client_id or ""
    versions: dict[int, int] = {}
    for ex, _, _ in rows:
        if ex.request.api_key in MEMBER_APIS:
            versions.setdefault(ex.request.api_key, ex.request.api_version)
    if classic is not None:
        join_template = classic[1]
    else:
        assert consumer is not None
        join_template = consumer_plan.classic_join_template(consumer[1], client_id)
    beats = [ex.request.ts_ns for ex, _, _ in rows if ex.request.api_key == HEARTBEAT]
    consumer_beats = [ex.request.ts_ns for ex, _, _ in rows if ex.request.api_key == CONSUMER_HEARTBEAT]
    gaps = [(b - a) // 1_000_000 for a, b in itertools.pairwise(beats or consumer_beats) if b > a]
    interval = int(statistics.median(gaps)) if gaps else DEFAULT_HEARTBEAT_INTERVAL_MS
    sessions = _sessions(capture, t0, conns, rows, first_join)
    return MemberScript(
        member_key=key,
        client_id=client_id,
        ordinal=ordinal,
        group_id=str(joins[0][1].group_id),
        group_instance_id=_instance_id(joins[0][1]),
        join_template=join_template,
        api_versions=versions,
        heartbeat_interval_ms=max(interval, 1),
        sessions=sessions,
        client_software=next((software_by_conn[c] for c in conns if c in software_by_conn), None),
        heartbeat_times_ms=tuple(sorted((b - t0) // 1_000_000 for b in beats)),
        heartbeat_template=consumer[1] if consumer is not None else None,
        consumer_heartbeat_times_ms=tuple(sorted((b - t0) // 1_000_000 for b in consumer_beats)),
    )


def _instance_id(request: Any) -> str | None:
    """group.instance.id of a JoinGroup or ConsumerGroupHeartbeat."""
    found = getattr(request, "group_instance_id", None) or getattr(request, "instance_id", None)
    return str(found) if found else None


def _sessions(
    capture: Capture,
    t0: int,
    conns: list[int],
    rows: list[tuple[Any, Any, Any]],
    first_join: dict[int, tuple[Any, Any]],
) -> tuple[Session, ...]:
    """One session per connection; a consumer-protocol connection that opens with a heartbeat of
    a member id already running (the process reconnected) continues that member's session."""
    sessions: list[Session] = []
    for conn in conns:
        session = _session(capture, t0, conn, rows, first_join)
        ex, request = first_join[conn]
        heartbeat = ex.request.api_key == CONSUMER_HEARTBEAT
        reconnected = heartbeat and not consumer_plan.is_heartbeat_join(request)
        if reconnected and sessions and sessions[-1].member_id == str(request.member_id or ""):
            sessions[-1] = dataclasses.replace(sessions[-1], stop_ms=session.stop_ms, left=session.left)
            continue
        sessions.append(session)
    return tuple(sessions)


def _session(
    capture: Capture,
    t0: int,
    conn: int,
    rows: list[tuple[Any, Any, Any]],
    first_join: dict[int, tuple[Any, Any]],
) -> Session:
    """One connection of a member: from its first JoinGroup (or joining ConsumerGroupHeartbeat)
    to its LeaveGroup (or leaving heartbeat, member epoch -1 / -2), else its close."""
    conn_rows = [r for r in rows if r[0].conn == conn]
    join_ex, join_request = first_join[conn]
    start = (join_ex.request.ts_ns - t0) // 1_000_000
    consumer = join_ex.request.api_key == CONSUMER_HEARTBEAT
    left = any(
        ex.request.api_key == LEAVE
        or (ex.request.api_key == CONSUMER_HEARTBEAT and int(request.member_epoch) < 0)
        for ex, request, _ in conn_rows
    )
    closed = capture.connections.get(conn)
    stop: int | None = None
    if left:
        stop = (max(ex.request.ts_ns for ex, _, _ in conn_rows) - t0) // 1_000_000
    elif closed is not None and closed.closed_ns is not None:
        stop = (closed.closed_ns - t0) // 1_000_000
    if not consumer:
        return Session(start, stop, left)
    first_response = next((resp for ex, _, resp in conn_rows if ex is join_ex), None)
    member_id = consumer_plan.recorded_member_id(join_request, first_response)
    return Session(start, stop, left, GroupProtocol.CONSUMER, member_id)


def _layout(tps: set[tuple[str, int]]) -> tuple[dict[str, tuple[int, ...]], ...]:
    """A group's assigned partitions as ({topic: partition indexes},)."""
    by_topic: dict[str, list[int]] = defaultdict(list)
    for topic_name, partition_index in sorted(tps):
        by_topic[topic_name].append(partition_index)
    return ({t: tuple(p) for t, p in by_topic.items()},)


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
    observer = GroupObserver(plan.session_id, scenario_name, RECORDED_RUN)
    observer.topic_names.update({topic_id: name for name, topic_id in plan.topic_ids.items()})
    observer.client_software.update(
        {script.member_key: script.client_software for script in plan.scripts if script.client_software}
    )
    for exchange in plan.recorded:
        observer.observe(exchange)
    return observer.events


__all__ = [
    "MemberScript",
    "ReplayInputError",
    "ReplayPlan",
    "Session",
    "build_plan",
    "member_key",
    "recorded_events",
]
