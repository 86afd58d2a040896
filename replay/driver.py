"""Differential testing: play one scripted group scenario over the wire against any coordinator.

Each member is its own TCP connection to the target's coordinator (FindCoordinator first) and
speaks explicit JoinGroup/SyncGroup/Heartbeat/LeaveGroup versions. The leader assigns with a
deterministic range assignor over the consumer-protocol subscription bytes. Exchanges go through
`replay.observe.GroupObserver`, the same client-side observer every run uses, so the events of
the reference coordinator and of real Kafka can be compared row for row (`comparable`).

Determinism: requests of one step are sent in script order with a short gap (brokers process
connections concurrently); a step's exchanges are fed to the observer in script order, not in
arrival order; background heartbeats keep members alive but are not observed (how many land in a
rebalance depends on timing). Scenarios follow Kafka's system tests (consumer_test.py
test_static_consumer_bounce*, test_fencing_static_consumer,
test_static_consumer_persisted_after_rejoin).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from proxy.wire import FrameDecoder, decode_response, encode_request, request_schema
from proxy.wire.consumer_protocol import (
    decode_assignment,
    decode_subscription_topics,
    encode_assignment,
    encode_subscription,
)
from replay.coordinator import requests as Q
from replay.events import RebalanceEvent
from replay.observe import Exchange, GroupObserver

MEMBER_ID_REQUIRED = 79
REBALANCE_IN_PROGRESS = 27
STEP_GAP_S = 0.25
HEARTBEAT_INTERVAL_S = 0.5


class DriverError(RuntimeError):
    """The target did not behave like a Kafka coordinator (closed connection, no answer)."""


class UnsupportedByTarget(DriverError):
    """The target does not serve an API version the scenario needs."""


# JoinGroup version -> the (SyncGroup, Heartbeat, LeaveGroup) versions a client of that era used.
COMPANION_VERSIONS: dict[int, tuple[int, int, int]] = {
    0: (0, 0, 0),
    1: (1, 1, 1),
    2: (1, 1, 1),
    3: (2, 2, 2),
    4: (2, 2, 2),
    5: (3, 3, 3),
    6: (4, 4, 4),
    7: (5, 4, 4),
    8: (5, 4, 4),
    9: (5, 4, 5),
}


@dataclass(frozen=True)
class MemberSpec:
    """One scripted member. `key` is its stable identity (design section 4 `member_key`) and its
    client id, so dynamic member ids (`client_id-uuid`) sort the same on every target."""

    key: str
    group_instance_id: str | None = None
    join_api_version: int = 9
    session_timeout_ms: int = 10_000
    rebalance_timeout_ms: int = 10_000
    protocols: tuple[str, ...] = ("range",)  # assignor names in preference order

    @property
    def sync_api_version(self) -> int:
        return COMPANION_VERSIONS[self.join_api_version][0]

    @property
    def heartbeat_api_version(self) -> int:
        return COMPANION_VERSIONS[self.join_api_version][1]

    @property
    def leave_api_version(self) -> int:
        return COMPANION_VERSIONS[self.join_api_version][2]

    @property
    def offset_commit_api_version(self) -> int:
        """v7 carries the group instance id (KIP-345); older clients used v2-v6."""
        return 7 if self.join_api_version >= 5 else 2


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Join:
    """Members (re)join in this order, then every successful one sends SyncGroup."""

    members: tuple[str, ...]


@dataclass(frozen=True)
class Heartbeat:
    """Observed heartbeats; `generation_offset` makes them stale (-1) or from the future (+1)."""

    members: tuple[str, ...]
    generation_offset: int = 0


@dataclass(frozen=True)
class ForgeMemberId:
    """The member will rejoin with a member id the coordinator never issued."""

    member: str


@dataclass(frozen=True)
class Commit:
    """Members commit offset 0 of partition 0 with their member id and generation.
    `api_version` overrides the member's OffsetCommit version; `missing_group` sends it to a
    group that does not exist."""

    members: tuple[str, ...]
    api_version: int | None = None
    missing_group: bool = False


@dataclass(frozen=True)
class Leave:
    """A member leaves with its own member id (and instance id from LeaveGroup v3)."""

    member: str


@dataclass(frozen=True)
class AdminLeave:
    """LeaveGroup v3+ by group.instance.id with empty member ids, from an admin connection."""

    instance_ids: tuple[str, ...]
    api_version: int = 3


@dataclass(frozen=True)
class Bounce:
    """The member's process restarts: new connection, member id forgotten. `as_spec` replaces
    its configuration (e.g. a static member restarting as a dynamic one)."""

    member: str
    as_spec: MemberSpec | None = None


@dataclass(frozen=True)
class Pause:
    """Stop background heartbeats of a member (a hung or killed process)."""

    member: str


@dataclass(frozen=True)
class Describe:
    """DescribeGroups v5 from an admin connection; the answer is kept in `RunResult.describes`."""


@dataclass(frozen=True)
class Wait:
    """Let wall time pass while unpaused members heartbeat in the background."""

    ms: int


Step = Join | Heartbeat | ForgeMemberId | Commit | Leave | AdminLeave | Bounce | Pause | Describe | Wait


@dataclass(frozen=True)
class Scenario:
    name: str
    members: tuple[MemberSpec, ...]
    steps: tuple[Step, ...]
    partitions: int = 6
    topic: str = "events"
    compare_leader: bool = True  # False where Kafka picks a new leader from a HashMap
    why: str = ""


def form(*names: str) -> tuple[Step, ...]:
    """Grow a group one member at a time: each newcomer joins and the others rejoin."""
    steps: list[Step] = []
    for index, name in enumerate(names):
        steps.append(Join((name, *names[:index])))
    return tuple(steps)


# --- the assignor ----------------------------------------------------------------------------


def member_order_key(member_id: str, group_instance_id: str | None) -> str:
    """Instance id for static members, else the client-id prefix of `client_id-<uuid>`."""
    if group_instance_id:
        return group_instance_id
    return member_id[:-37] if len(member_id) > 37 else member_id


def range_assign(members: Any, partitions: int) -> dict[str, bytes]:
    """A RangeAssignor: per topic, members in a stable order take contiguous partition ranges."""
    by_topic: dict[str, list[tuple[str, str]]] = {}
    for member in members:
        order = member_order_key(member.member_id, getattr(member, "group_instance_id", None))
        for topic in decode_subscription_topics(member.metadata):
            by_topic.setdefault(topic, []).append((order, member.member_id))
    owned: dict[str, dict[str, list[int]]] = {m.member_id: {} for m in members}
    for topic, subscribers in by_topic.items():
        subscribers.sort()
        per, extra = divmod(partitions, len(subscribers))
        start = 0
        for index, (_, member_id) in enumerate(subscribers):
            count = per + (1 if index < extra else 0)
            owned[member_id][topic] = list(range(start, start + count))
            start += count
    return {member_id: encode_assignment(topics) for member_id, topics in owned.items()}


# --- connections -------------------------------------------------------------------------------


class Connection:
    """One client connection: requests are sent and answered in order."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, client_id: str) -> None:
        self.reader, self.writer, self.client_id = reader, writer, client_id
        self.decoder = FrameDecoder()
        self.frames: list[bytes] = []
        self.correlation = 0
        self.lock = asyncio.Lock()

    @classmethod
    async def open(cls, host: str, port: int, client_id: str) -> Connection:
        return cls(*await asyncio.open_connection(host, port), client_id)

    async def call(self, request: Any, timeout_s: float = 60.0) -> Any:
        async with self.lock:
            self.correlation += 1
            self.writer.write(encode_request(request, self.correlation, self.client_id))
            await self.writer.drain()
            while not self.frames:
                data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
                if not data:
                    raise DriverError(f"{self.client_id}: connection closed by the target")
                self.frames += self.decoder.feed(data)
            frame = self.frames.pop(0)
            _, response = decode_response(
                frame, int(type(request).__api_key__), int(type(request).__version__)
            )
            return response

    def close(self) -> None:
        self.writer.close()


async def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest

    conn = await Connection.open(host, port, "group-replay-driver")
    try:
        response = await conn.call(
            ApiVersionsRequest(client_software_name="group-replay", client_software_version="1")
        )
    finally:
        conn.close()
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


async def find_coordinator(host: str, port: int, group_id: str, timeout_s: float = 60.0) -> tuple[str, int]:
    """FindCoordinator v3 until the target names one (Kafka creates __consumer_offsets first)."""
    request = Q._build(request_schema(10, 3), {"key": group_id, "key_type": 0})
    deadline = time.monotonic() + timeout_s
    while True:
        conn = await Connection.open(host, port, "group-replay-driver")
        try:
            response = await conn.call(request)
        finally:
            conn.close()
        if int(response.error_code) == 0:
            return str(response.host), int(response.port)
        if time.monotonic() > deadline:
            raise DriverError(f"no coordinator for {group_id}: {ErrorCode(int(response.error_code)).name}")
        await asyncio.sleep(0.5)


async def ensure_topic(host: str, port: int, topic: str, timeout_s: float = 60.0) -> None:
    """Metadata with allow_auto_topic_creation until the topic has partitions (brokers here run
    with auto.create.topics.enable=true; the reference server creates topics on Metadata)."""
    schema = request_schema(3, 9)
    topic_cls = Q._nested(3, 9, "MetadataRequestTopic")
    request = schema(
        topics=(topic_cls(name=topic),),
        allow_auto_topic_creation=True,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )
    deadline = time.monotonic() + timeout_s
    while True:
        conn = await Connection.open(host, port, "group-replay-driver")
        try:
            response = await conn.call(request)
        finally:
            conn.close()
        found = [t for t in response.topics if t.name == topic]
        if found and int(found[0].error_code) == 0 and found[0].partitions:
            return
        if time.monotonic() > deadline:
            raise DriverError(f"topic {topic} did not appear on {host}:{port}")
        await asyncio.sleep(0.3)


# --- members and the run -----------------------------------------------------------------------


@dataclass
class _Member:
    spec: MemberSpec
    conn: Connection | None = None
    member_id: str = ""
    generation_id: int = -1
    paused: bool = False
    alive: bool = False  # has a generation and heartbeats in the background
    exchanges: list[Exchange] = field(default_factory=list)


@dataclass
class RunResult:
    scenario: str
    target: str
    events: list[RebalanceEvent]
    # What DescribeGroups said at each Describe step (see `describe_row`).
    describes: list[tuple[Any, ...]] = field(default_factory=list)


class _Run:
    def __init__(
        self, scenario: Scenario, host: str, port: int, group_id: str, observer: GroupObserver
    ) -> None:
        self.scenario = scenario
        self.host, self.port = host, port
        self.group_id = group_id
        self.observer = observer
        self.members = {spec.key: _Member(spec) for spec in scenario.members}
        self.t0 = time.monotonic()
        self._heartbeats: asyncio.Task[None] | None = None
        self.describes: list[tuple[Any, ...]] = []

    def now_ms(self) -> int:
        return int((time.monotonic() - self.t0) * 1000)

    async def connection(self, member: _Member) -> Connection:
        if member.conn is None:
            member.conn = await Connection.open(self.host, self.port, member.spec.key)
        return member.conn

    async def exchange(self, member: _Member, api_key: int, api_version: int, request: Any) -> Any:
        conn = await self.connection(member)
        response = await conn.call(request)
        member.exchanges.append(
            Exchange(self.now_ms(), member.spec.key, api_key, api_version, request, response)
        )
        return response

    def flush(self, order: list[str]) -> None:
        """Feed this step's exchanges to the observer in script order."""
        for key in order:
            member = self.members[key]
            for exchange in member.exchanges:
                self.observer.observe(exchange)
            member.exchanges.clear()

    async def run(self) -> list[RebalanceEvent]:
        self._heartbeats = asyncio.create_task(self._heartbeat_loop())
        try:
            for step in self.scenario.steps:
                await self.step(step)
        finally:
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            for member in self.members.values():
                if member.conn is not None:
                    member.conn.close()
        return list(self.observer.events)

    async def step(self, step: Step) -> None:
        match step:
            case Join(members=names):
                await self.join(list(names))
            case Heartbeat(members=names, generation_offset=offset):
                for name in names:
                    await self.heartbeat(self.members[name], observed=True, generation_offset=offset)
                self.flush(list(names))
            case ForgeMemberId(member=name):
                member = self.members[name]
                member.member_id = f"{member.spec.key}-00000000-0000-0000-0000-000000000000"
                member.alive = False
            case Commit(members=names, api_version=api_version, missing_group=missing):
                for name in names:
                    await self.commit(self.members[name], api_version, missing)
                self.flush(list(names))
            case Leave(member=name):
                await self.leave(self.members[name])
                self.flush([name])
            case AdminLeave(instance_ids=ids, api_version=api_version):
                await self.admin_leave(list(ids), api_version)
            case Bounce(member=name, as_spec=spec):
                member = self.members[name]
                if member.conn is not None:
                    member.conn.close()
                member.conn = None
                member.member_id = ""
                member.generation_id = -1
                member.alive = False
                member.paused = False
                if spec is not None:
                    member.spec = replace(spec, key=name)
            case Pause(member=name):
                self.members[name].paused = True
            case Describe():
                from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
                from kio.schema.types import GroupId

                admin = await Connection.open(self.host, self.port, "admin")
                try:
                    response = await admin.call(
                        DescribeGroupsRequest(
                            groups=(GroupId(self.group_id),), include_authorized_operations=False
                        )
                    )
                finally:
                    admin.close()
                self.describes.append(describe_row(response.groups[0]))
            case Wait(ms=ms):
                await asyncio.sleep(ms / 1000)

    async def join(self, names: list[str]) -> None:
        async def one(member: _Member, delay: float) -> Any:
            await asyncio.sleep(delay)
            spec = member.spec
            member.alive = False
            request = self._join_request(member)
            response = await self.exchange(member, 11, spec.join_api_version, request)
            if int(response.error_code) == MEMBER_ID_REQUIRED:
                member.member_id = response.member_id
                response = await self.exchange(member, 11, spec.join_api_version, self._join_request(member))
            if int(response.error_code) == 0:
                member.member_id = response.member_id
                member.generation_id = int(response.generation_id)
            return response

        members = [self.members[name] for name in names]
        answers = await asyncio.gather(*(one(m, i * STEP_GAP_S) for i, m in enumerate(members)))

        async def sync(member: _Member, answer: Any, delay: float) -> None:
            await asyncio.sleep(delay)
            if int(answer.error_code) != 0:
                return
            spec = member.spec
            assignments: dict[str, bytes] = {}
            if (
                answer.leader == answer.member_id
                and answer.members
                and not getattr(answer, "skip_assignment", False)
            ):
                assignments = range_assign(answer.members, self.scenario.partitions)
            request = Q.sync_group(
                spec.sync_api_version,
                self.group_id,
                int(answer.generation_id),
                member.member_id,
                group_instance_id=spec.group_instance_id,
                protocol_type="consumer",
                protocol_name=answer.protocol_name,
                assignments=assignments,
            )
            response = await self.exchange(member, 14, spec.sync_api_version, request)
            member.alive = int(response.error_code) == 0

        # The leader syncs first: followers' SyncGroups park until its assignment arrives.
        order = sorted(
            range(len(members)), key=lambda i: 0 if answers[i].leader == answers[i].member_id else 1
        )
        await asyncio.gather(
            *(sync(members[i], answers[i], rank * STEP_GAP_S) for rank, i in enumerate(order))
        )
        self.flush(names)

    def _join_request(self, member: _Member) -> Any:
        spec = member.spec
        return Q.join_group(
            spec.join_api_version,
            self.group_id,
            member.member_id,
            group_instance_id=spec.group_instance_id,
            session_timeout_ms=spec.session_timeout_ms,
            rebalance_timeout_ms=spec.rebalance_timeout_ms,
            protocol_type="consumer",
            protocols=tuple((name, encode_subscription([self.scenario.topic])) for name in spec.protocols),
        )

    async def heartbeat(self, member: _Member, observed: bool, generation_offset: int = 0) -> Any:
        spec = member.spec
        request = Q.heartbeat(
            spec.heartbeat_api_version,
            self.group_id,
            member.generation_id + generation_offset,
            member.member_id,
            group_instance_id=spec.group_instance_id,
        )
        if observed:
            return await self.exchange(member, 12, spec.heartbeat_api_version, request)
        conn = await self.connection(member)
        return await conn.call(request)

    async def commit(
        self, member: _Member, api_version: int | None = None, missing_group: bool = False
    ) -> None:
        spec = member.spec
        api_version = api_version or spec.offset_commit_api_version
        request = Q.offset_commit(
            api_version,
            f"{self.group_id}-missing" if missing_group else self.group_id,
            member.generation_id,
            member.member_id,
            {(self.scenario.topic, 0): 0},
            group_instance_id=spec.group_instance_id,
        )
        await self.exchange(member, 8, api_version, request)

    async def leave(self, member: _Member) -> None:
        spec = member.spec
        api_version = spec.leave_api_version
        who = [(member.member_id, spec.group_instance_id if api_version >= 3 else None)]
        await self.exchange(member, 13, api_version, Q.leave_group(api_version, self.group_id, who))
        member.alive = False
        member.member_id = ""
        member.generation_id = -1

    async def admin_leave(self, instance_ids: list[str], api_version: int) -> None:
        admin = _Member(MemberSpec(key="admin"))
        request = Q.leave_group(api_version, self.group_id, [("", i) for i in instance_ids])
        await self.exchange(admin, 13, api_version, request)
        for exchange in admin.exchanges:
            self.observer.observe(exchange)
        if admin.conn is not None:
            admin.conn.close()

    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_INTERVAL_S)
            for member in self.members.values():
                if not member.alive or member.paused or member.conn is None or member.conn.lock.locked():
                    continue
                try:
                    response = await self.heartbeat(member, observed=False)
                except (DriverError, OSError, TimeoutError):
                    member.alive = False
                    continue
                code = int(response.error_code)
                if code not in (0, REBALANCE_IN_PROGRESS):
                    member.alive = False


def required_versions(scenario: Scenario) -> dict[int, set[int]]:
    needed: dict[int, set[int]] = {10: {3}}
    specs = list(scenario.members)
    specs += [step.as_spec for step in scenario.steps if isinstance(step, Bounce) and step.as_spec]
    for spec in specs:
        needed.setdefault(11, set()).add(spec.join_api_version)
        needed.setdefault(14, set()).add(spec.sync_api_version)
        needed.setdefault(12, set()).add(spec.heartbeat_api_version)
        needed.setdefault(13, set()).add(spec.leave_api_version)
    for step in scenario.steps:
        if isinstance(step, AdminLeave):
            needed.setdefault(13, set()).add(step.api_version)
        if isinstance(step, Commit):
            needed.setdefault(8, set()).update(
                step.api_version or spec.offset_commit_api_version
                for spec in specs
                if spec.key in step.members
            )
    return needed


async def run_scenario(
    scenario: Scenario, bootstrap: str, run: str, session_id: str = "differential"
) -> RunResult:
    """Play `scenario` against the coordinator behind `bootstrap` (host:port)."""
    host, _, port_text = bootstrap.rpartition(":")
    port = int(port_text)
    served = await api_versions(host, port)
    for api_key, versions in required_versions(scenario).items():
        low, high = served.get(api_key, (0, -1))
        missing = sorted(v for v in versions if not low <= v <= high)
        if missing:
            raise UnsupportedByTarget(f"{bootstrap} does not serve api_key {api_key} versions {missing}")
    group_id = f"{scenario.name}-{uuid.uuid4().hex[:8]}"
    if any(isinstance(step, Commit) for step in scenario.steps):
        # Kafka refuses commits for topics it does not have (UNKNOWN_TOPIC_OR_PARTITION).
        await ensure_topic(host, port, scenario.topic)
    coordinator_host, coordinator_port = await find_coordinator(host, port, group_id)
    observer = GroupObserver(session_id, scenario.name, run)
    runner = _Run(scenario, coordinator_host, coordinator_port, group_id, observer)
    events = await runner.run()
    return RunResult(scenario.name, run, events, runner.describes)


def describe_row(group: Any) -> tuple[Any, ...]:
    """A DescribeGroups answer without member ids: state, protocol, and per member (sorted by
    instance id, else client id) the client id, host, instance id, subscription and assignment."""
    members = []
    for m in group.members:
        subscription = decode_subscription_topics(m.member_metadata) if m.member_metadata else ()
        assignment = decode_assignment(m.member_assignment) if m.member_assignment else ()
        members.append((m.group_instance_id or "", m.client_id, m.client_host, subscription, assignment))
    return (
        int(group.error_code),
        group.group_state,
        group.protocol_type,
        group.protocol_data,
        tuple(sorted(members)),
    )


def comparable(events: list[RebalanceEvent], compare_leader: bool = True) -> list[tuple[Any, ...]]:
    """What must agree between targets: everything but member ids, timestamps and group ids."""
    rows = []
    for e in events:
        rows.append(
            (
                e.event,
                e.member_key,
                e.generation_id,
                e.protocol_name,
                e.is_leader if compare_leader else None,
                e.skip_assignment,
                e.join_api_version,
                e.error_code,
                e.assignment,
            )
        )
    return rows


# --- the scenario library ------------------------------------------------------------------------


def _static(key: str, version: int = 9, **kw: Any) -> MemberSpec:
    return MemberSpec(key=key, group_instance_id=key, join_api_version=version, **kw)


def _dynamic(key: str, version: int = 5, **kw: Any) -> MemberSpec:
    return MemberSpec(key=key, join_api_version=version, **kw)


def _bounce_each(names: tuple[str, ...]) -> tuple[Step, ...]:
    steps: list[Step] = []
    for name in names:
        steps += [Bounce(name), Join((name,))]
    return tuple(steps)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "static-rolling-bounce",
            (_static("a"), _static("b", 5), _static("c", 7)),
            (*form("a", "b", "c"), *_bounce_each(("a", "b", "c")), Heartbeat(("a", "b", "c")), Describe()),
            why="test_static_consumer_bounce: restarts within the session timeout cause no rebalance",
        ),
        Scenario(
            "dynamic-rolling-bounce",
            (_dynamic("a"), _dynamic("b"), _dynamic("c")),
            (
                *form("a", "b", "c"),
                Leave("c"),
                Bounce("c"),
                Join(("c", "a", "b")),
                Leave("b"),
                Bounce("b"),
                Join(("b", "a", "c")),
            ),
            why="dynamic members rebalance on every leave and join",
        ),
        Scenario(
            "static-leader-rejoin-v9",
            (_static("a", 9), _static("b", 9)),
            (*form("a", "b"), Bounce("a"), Join(("a",)), Heartbeat(("a", "b")), Describe()),
            why="KIP-814: the rejoining static leader gets SkipAssignment and the member list",
        ),
        Scenario(
            "static-leader-rejoin-v5",
            (_static("a", 5), _static("b", 5)),
            (*form("a", "b"), Bounce("a"), Join(("a",)), Heartbeat(("a", "b"))),
            why="before v9 the rejoining static leader is given the old leader id and no members",
        ),
        Scenario(
            "duplicate-instance-fencing",
            (_static("a"), _static("b"), MemberSpec(key="a-twin", group_instance_id="a", join_api_version=9)),
            (
                *form("a", "b"),
                Join(("a-twin",)),
                Heartbeat(("a",)),
                Commit(("a",)),
                Heartbeat(("a-twin", "b")),
                Commit(("a-twin", "b")),
                Describe(),
            ),
            why="test_fencing_static_consumer: the older process with the same instance id is fenced "
            "on Heartbeat and OffsetCommit (and JoinGroup/SyncGroup)",
        ),
        Scenario(
            "static-session-timeout",
            (_static("a", session_timeout_ms=3000), _static("b", session_timeout_ms=3000)),
            (*form("a", "b"), Pause("b"), Wait(5000), Join(("a",))),
            why="a static member is removed only by the session timeout (or LeaveGroup)",
        ),
        Scenario(
            "batch-leave-static",
            (_static("a"), _static("b"), _static("c")),
            (*form("a", "b", "c"), AdminLeave(("b", "c", "nobody")), Describe(), Join(("a",)), Describe()),
            why="KIP-345 LeaveGroup v3+: administrative batch removal by group.instance.id",
        ),
        Scenario(
            "mixed-static-dynamic",
            (_static("s1"), _dynamic("d1", 7), _static("s2", 5)),
            (
                *form("s1", "d1", "s2"),
                Bounce("s2"),
                Join(("s2",)),
                Leave("d1"),
                Bounce("d1"),
                Join(("d1", "s1", "s2")),
                Describe(),
            ),
            why="static and dynamic members coexist; only the dynamic bounce rebalances",
        ),
        Scenario(
            "pre-v5-client-joins-static-group",
            (_static("a", 5), _static("b", 5), _dynamic("old", 3)),
            (*form("a", "b"), Join(("old", "a", "b")), Heartbeat(("a", "b", "old"))),
            why="a JoinGroup v3 client (no instance id, no MEMBER_ID_REQUIRED) joins static members",
        ),
        Scenario(
            "member-id-required",
            (_dynamic("a", 4), _dynamic("b", 9)),
            (*form("a", "b"), Heartbeat(("a", "b"))),
            why="KIP-394: dynamic members on v4+ first get MEMBER_ID_REQUIRED with their member id",
        ),
        Scenario(
            "static-to-dynamic",
            (_static("a"), _static("b", session_timeout_ms=3000)),
            (
                *form("a", "b"),
                Bounce("b", as_spec=MemberSpec(key="b", join_api_version=9, session_timeout_ms=3000)),
                Join(("b", "a")),
                Heartbeat(("a", "b")),
                Describe(),
            ),
            why="KIP-345 downgrade: a restart without group.instance.id is a new dynamic member; "
            "the old static identity stays until its session times out. (The follower switches: "
            "when a leader's old identity expires Kafka picks the next leader in HashMap order.)",
        ),
        Scenario(
            "invalid-session-timeout",
            (_static("a"), _dynamic("tiny", 5, session_timeout_ms=500)),
            (*form("a"), Join(("tiny",)), Heartbeat(("a",))),
            why="a session timeout below group.min.session.timeout.ms (1000 here) is refused",
        ),
        Scenario(
            "pre-v3-clients",
            (_static("a", 9), _dynamic("v0", 0), _dynamic("v2", 2)),
            (
                *form("a", "v2", "v0"),
                Heartbeat(("a", "v2", "v0")),
                Leave("v0"),
                Join(("a", "v2")),
                Describe(),
            ),
            why="JoinGroup v0 (the session timeout doubles as rebalance timeout) and v2 clients beside a "
            "static v9 member (4.3.1 still serves JoinGroup v0-v9; KIP-896 removed OffsetCommit v0-1 "
            "and OffsetFetch v0)",
        ),
        Scenario(
            "static-rejoin-changes-protocol",
            (_static("a"), _static("b", 5)),
            (
                *form("a", "b"),
                Bounce("b", as_spec=_static("b", 5, protocols=("roundrobin", "range"))),
                Join(("b",)),
                Bounce("a", as_spec=_static("a", 9, protocols=("roundrobin", "range"))),
                Join(("a", "b")),
            ),
            why="updateStaticMemberAndRebalance: a static rejoin in Stable rebalances only when the "
            "group's selected protocol would change (b alone cannot move it; a and b together do)",
        ),
        Scenario(
            "stale-generation-and-unknown-member",
            (_static("a"), _dynamic("d", 5)),
            (
                *form("a", "d"),
                Heartbeat(("a", "d"), generation_offset=-1),
                Heartbeat(("d",), generation_offset=1),
                ForgeMemberId("d"),
                Join(("d",)),
                Heartbeat(("a",)),
            ),
            why="ILLEGAL_GENERATION for stale or future generations; UNKNOWN_MEMBER_ID for a member id "
            "the group never issued",
        ),
        Scenario(
            "commit-to-missing-group",
            (_static("a"),),
            (
                *form("a"),
                Commit(("a",), api_version=8, missing_group=True),
                Commit(("a",), api_version=9, missing_group=True),
            ),
            why="OffsetCommit with a generation to a group that does not exist: ILLEGAL_GENERATION, "
            "except OffsetCommit v9+ on the new coordinator, which says GROUP_ID_NOT_FOUND",
        ),
        Scenario(
            "leave-unknown-group",
            (_static("a"),),
            (AdminLeave(("ghost",)), *form("a"), AdminLeave(("a", "ghost"))),
            why="LeaveGroup v3 for a group that does not exist: per-member UNKNOWN_MEMBER_ID on every "
            "coordinator (the new one's UnknownMemberIdException is mapped back by "
            "GroupCoordinatorService.leaveGroup)",
        ),
    ]
}
