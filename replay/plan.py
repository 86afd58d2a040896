"""Capture -> replay plan: each recorded member's identity, JoinGroup, API versions and sessions.

`build_plan(capture)` reconstructs each member from its group requests on the client leg (what
the clients really sent): identity (`member_key`: the group.instance.id if static, else client
id + ordinal among that client id's members, AGREED #3: one name in every run and scenario), the
JoinGroup it sent (protocols, timeouts), the versions of each group API, its sessions (when it
joined, whether it stopped and whether it sent LeaveGroup), its heartbeat interval, and the
partitions the group's assignments covered. `recorded_events(plan)` is the `recorded` run: the
recorded exchanges through the same observer every run uses.
"""

from __future__ import annotations

import itertools
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from proxy.capture.reader import Capture, exchanges
from proxy.wire import CodecError
from proxy.wire.apis import ApiKey
from proxy.wire.consumer_protocol import decode_assignment
from replay.events import RebalanceEvent
from replay.member import DEFAULT_HEARTBEAT_INTERVAL_MS, GROUP_APIS, HEARTBEAT, JOIN, LEAVE, SYNC
from replay.observe import Exchange, GroupObserver

API_VERSIONS = int(ApiKey.API_VERSIONS)
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)


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
    heartbeat_times_ms: tuple[int, ...] = ()  # when the recorded client sent each Heartbeat (sorted)


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


def member_key(client_id: str, ordinal_on_client: int, instance_id: str | None) -> str:
    return instance_id if instance_id else f"{client_id}#{ordinal_on_client}"


def build_plan(capture: Capture, session_id: str) -> ReplayPlan:
    """Member scripts of every group in the capture (client leg: what the clients really sent)."""
    client_exchanges = exchanges(capture, "client")
    pairs = [ex for ex in client_exchanges if ex.request.api_key in (*GROUP_APIS, OFFSET_COMMIT)]
    software_by_conn = _client_software_by_connection(client_exchanges)
    if not pairs:
        if any(ex.request.api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT for ex in client_exchanges):
            raise ReplayInputError(
                f"{session_id}: the capture holds a KIP-848 consumer-protocol group "
                "(ConsumerGroupHeartbeat); replay drives classic groups (JoinGroup/SyncGroup) only"
            )
        raise ReplayInputError(f"{session_id}: the capture holds no group requests")
    t0 = min(ex.request.ts_ns for ex in pairs)
    decoded: list[tuple[Any, Any, Any]] = []
    for ex in pairs:
        try:
            request, response = ex.decode()
        except CodecError:
            continue
        decoded.append((ex, request, response))
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
    order = sorted(by_member, key=lambda key: by_member[key][0][0].request.ts_ns)
    scripts = [
        _member_script(capture, t0, key, ordinal, by_member[key], first_join, software_by_conn)
        for ordinal, key in enumerate(order)
    ]
    if not scripts:
        raise ReplayInputError(f"{session_id}: the capture holds no JoinGroup, so no member to replay")
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
    )


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
    """A connection belongs to the member whose JoinGroup it carried: conn -> (member key,
    instance id), and conn -> its first JoinGroup (exchange, request)."""
    conn_identity: dict[int, tuple[str, str | None]] = {}
    per_client_ordinals: dict[str, int] = defaultdict(int)
    first_join: dict[int, tuple[Any, Any]] = {}
    for ex, request, _ in decoded:
        if ex.request.api_key == JOIN and ex.conn not in conn_identity:
            client_id = ex.request.client_id or ""
            instance_id = getattr(request, "group_instance_id", None)
            ordinal = per_client_ordinals[client_id]
            per_client_ordinals[client_id] += 1
            conn_identity[ex.conn] = (member_key(client_id, ordinal, instance_id), instance_id)
            first_join[ex.conn] = (ex, request)
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
    """One member's script: its first JoinGroup as template, the group API versions it used,
    its heartbeat rhythm and one session per connection (start, stop, left)."""
    conns = sorted({ex.conn for ex, _, _ in rows}, key=lambda c: first_join[c][0].request.ts_ns)
    join_ex, join_request = first_join[conns[0]]
    versions: dict[int, int] = {}
    for ex, _, _ in rows:
        if ex.request.api_key in GROUP_APIS:
            versions.setdefault(ex.request.api_key, ex.request.api_version)
    beats = [ex.request.ts_ns for ex, _, _ in rows if ex.request.api_key == HEARTBEAT]
    gaps = [(b - a) // 1_000_000 for a, b in itertools.pairwise(beats) if b > a]
    interval = int(statistics.median(gaps)) if gaps else DEFAULT_HEARTBEAT_INTERVAL_MS
    sessions = tuple(_session(capture, t0, conn, rows, first_join) for conn in conns)
    return MemberScript(
        member_key=key,
        client_id=join_ex.request.client_id or "",
        ordinal=ordinal,
        group_id=str(join_request.group_id),
        group_instance_id=getattr(join_request, "group_instance_id", None),
        join_template=join_request,
        api_versions=versions,
        heartbeat_interval_ms=max(interval, 1),
        sessions=sessions,
        client_software=next((software_by_conn[c] for c in conns if c in software_by_conn), None),
        heartbeat_times_ms=tuple(sorted((b - t0) // 1_000_000 for b in beats)),
    )


def _session(
    capture: Capture,
    t0: int,
    conn: int,
    rows: list[tuple[Any, Any, Any]],
    first_join: dict[int, tuple[Any, Any]],
) -> Session:
    """One connection of a member: from its first JoinGroup to its LeaveGroup, else its close."""
    conn_rows = [r for r in rows if r[0].conn == conn]
    start = (first_join[conn][0].request.ts_ns - t0) // 1_000_000
    left = any(ex.request.api_key == LEAVE for ex, _, _ in conn_rows)
    closed = capture.connections.get(conn)
    stop: int | None = None
    if left:
        stop = (max(ex.request.ts_ns for ex, _, _ in conn_rows) - t0) // 1_000_000
    elif closed is not None and closed.closed_ns is not None:
        stop = (closed.closed_ns - t0) // 1_000_000
    return Session(start, stop, left)


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
    observer = GroupObserver(plan.session_id, scenario_name, "recorded")
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
