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
import logging
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any

from kio.schema.errors import ErrorCode

from proxy.wire import request_schema
from proxy.wire.apis import ApiKey
from proxy.wire.consumer_protocol import decode_assignment, decode_subscription_topics, encode_subscription
from replay.events import RebalanceEvent
from replay.live import Connection, UnsupportedByTarget, api_versions, find_coordinator
from replay.member import (
    HEARTBEAT,
    JOIN,
    LEAVE,
    SYNC,
    ClassicMember,
    JoinSettings,
    Send,
    companion_versions,
    entity,
    from_values,
)
from replay.observe import Exchange, GroupObserver
from replay.run import RunResult

REBALANCE_IN_PROGRESS = int(ErrorCode.rebalance_in_progress)
OFFSET_COMMIT = int(ApiKey.OFFSET_COMMIT)
STEP_GAP_S = 0.25
HEARTBEAT_INTERVAL_S = 0.5
SLOW_STEP_S = 90.0  # a step still running after this is logged with every member's state

log = logging.getLogger(__name__)


class DriverError(RuntimeError):
    """The target did not behave like a Kafka coordinator (closed connection, no answer)."""


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

    def member(self, group_id: str, topic: str, partitions: int) -> ClassicMember:
        """A fresh process of this member: the same state machine replay runs."""
        join = JoinSettings(
            group_id,
            self.session_timeout_ms,
            self.rebalance_timeout_ms,
            "consumer",
            tuple((name, encode_subscription([topic])) for name in self.protocols),
        )
        return ClassicMember(
            self.key,
            self.key,
            join,
            instance_id=self.group_instance_id,
            api_versions=companion_versions(self.join_api_version),
            topics={topic: partitions},
        )

    @property
    def offset_commit_api_version(self) -> int:
        """v7 carries the group instance id (KIP-345); older clients used v2-v6."""
        return 7 if self.join_api_version >= 5 else 2


# --- steps ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MembersStep:
    """A step the named members take, in this order."""

    members: tuple[str, ...]


@dataclass(frozen=True)
class MemberStep:
    """A step about one member."""

    member: str


@dataclass(frozen=True)
class Join(MembersStep):
    """Members (re)join in this order, then every successful one sends SyncGroup."""


@dataclass(frozen=True)
class Heartbeat(MembersStep):
    """Observed heartbeats; `generation_offset` makes them stale (-1) or from the future (+1)."""

    generation_offset: int = 0


@dataclass(frozen=True)
class ForgeMemberId(MemberStep):
    """The member will rejoin with a member id the coordinator never issued."""


@dataclass(frozen=True)
class Commit(MembersStep):
    """Members commit offset 0 of partition 0 with their member id and generation.
    `api_version` overrides the member's OffsetCommit version; `missing_group` sends it to a
    group that does not exist."""

    api_version: int | None = None
    missing_group: bool = False


@dataclass(frozen=True)
class Leave(MemberStep):
    """A member leaves with its own member id (and instance id from LeaveGroup v3)."""


@dataclass(frozen=True)
class AdminLeave:
    """LeaveGroup v3+ by group.instance.id with empty member ids, from an admin connection."""

    instance_ids: tuple[str, ...]
    api_version: int = 3


@dataclass(frozen=True)
class Bounce(MemberStep):
    """The member's process restarts: new connection, member id forgotten. `as_spec` replaces
    its configuration (e.g. a static member restarting as a dynamic one)."""

    as_spec: MemberSpec | None = None


@dataclass(frozen=True)
class Pause(MemberStep):
    """Stop background heartbeats of a member (a hung or killed process)."""


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


# --- connections -------------------------------------------------------------------------------


async def ensure_topic(host: str, port: int, topic: str, timeout_s: float = 60.0) -> None:
    """Metadata with allow_auto_topic_creation until the topic has partitions (brokers here run
    with auto.create.topics.enable=true; the reference server creates topics on Metadata)."""
    request = from_values(
        request_schema(int(ApiKey.METADATA), 9),
        {
            "topics": ({"name": topic},),
            "allow_auto_topic_creation": True,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
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
    """A scripted member: the replay state machine (`replay.member.ClassicMember`) plus its
    connection. Steps are commands to it; its requests and reactions are replay's."""

    spec: MemberSpec
    machine: ClassicMember
    conn: Connection | None = None
    paused: bool = False
    alive: bool = False  # has a generation and heartbeats in the background
    exchanges: list[Exchange] = field(default_factory=list)


class _Run:
    def __init__(
        self, scenario: Scenario, host: str, port: int, group_id: str, observer: GroupObserver
    ) -> None:
        self.scenario = scenario
        self.host, self.port = host, port
        self.group_id = group_id
        self.observer = observer
        self.members = {spec.key: _Member(spec, self._machine(spec)) for spec in scenario.members}
        self.t0 = time.monotonic()
        self._heartbeats: asyncio.Task[None] | None = None
        self._stopping = False  # the run is over: the heartbeat loop ends at its next round
        self.describes: list[tuple[Any, ...]] = []

    def _machine(self, spec: MemberSpec) -> ClassicMember:
        return spec.member(self.group_id, self.scenario.topic, self.scenario.partitions)

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

    async def send(self, member: _Member, send: Send) -> Any:
        return await self.exchange(member, send.api_key, send.api_version, send.request)

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
            for index, step in enumerate(self.scenario.steps):
                watchdog = asyncio.create_task(self._report_slow(index, step))
                try:
                    await self.step(step)
                finally:
                    watchdog.cancel()
        finally:
            # Not the cancel alone: Python 3.11 can lose one (docs/ci.md, "That hang, diagnosed").
            self._stopping = True
            self._heartbeats.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeats
            for member in self.members.values():
                if member.conn is not None:
                    member.conn.close()
        return list(self.observer.events)

    async def _report_slow(self, index: int, step: Step) -> None:
        """Log a step still running after SLOW_STEP_S with each member's state (only logs)."""
        started = time.monotonic()
        while True:
            await asyncio.sleep(SLOW_STEP_S)
            log.warning(
                "%s: step %d (%r) still running after %.1f s; members: %s",
                self.group_id,
                index,
                step,
                time.monotonic() - started,
                "; ".join(self._member_state(key, member) for key, member in self.members.items()),
            )

    @staticmethod
    def _member_state(key: str, member: _Member) -> str:
        machine = member.machine
        conn = "none" if member.conn is None else ("busy" if member.conn.lock.locked() else "idle")
        return (
            f"{key} {machine.state.name} id={machine.member_id or '-'} gen={machine.generation_id} "
            f"alive={member.alive} paused={member.paused} conn={conn}"
        )

    async def step(self, step: Step) -> None:  # noqa: C901 - one flat `match` case per Step kind
        match step:
            case Join(members=names):
                await self.join(list(names))
            case Heartbeat(members=names, generation_offset=offset):
                for name in names:
                    await self.heartbeat(self.members[name], observed=True, generation_offset=offset)
                self.flush(list(names))
            case ForgeMemberId(member=name):
                member = self.members[name]
                member.machine.member_id = f"{member.spec.key}-00000000-0000-0000-0000-000000000000"
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
                member.alive = False
                member.paused = False
                if spec is not None:
                    member.spec = replace(spec, key=name)
                member.machine = self._machine(member.spec)  # a new process: no member id
            case Pause(member=name):
                self.members[name].paused = True
            case Describe():
                group = await describe_group(self.host, self.port, self.group_id, "admin")
                self.describes.append(describe_row(group))
            case Wait(ms=ms):
                await asyncio.sleep(ms / 1000)

    async def join(self, names: list[str]) -> None:
        """Each member (re)joins through its state machine (MEMBER_ID_REQUIRED -> rejoin with the
        given id, as replay does); then every member the machine moved to SyncGroup syncs."""

        async def one(member: _Member, delay: float) -> Send | None:
            await asyncio.sleep(delay)
            member.alive = False
            machine = member.machine
            commands = machine.request_rejoin(self.now_ms())
            while commands and isinstance(commands[0], Send) and commands[0].api_key == JOIN:
                send = commands[0]
                response = await self.send(member, send)
                commands = machine.on_response(self.now_ms(), send, response)
            return next((c for c in commands if isinstance(c, Send) and c.api_key == SYNC), None)

        members = [self.members[name] for name in names]
        syncs = await asyncio.gather(*(one(m, i * STEP_GAP_S) for i, m in enumerate(members)))

        async def sync(member: _Member, send: Send | None, delay: float) -> None:
            await asyncio.sleep(delay)
            if send is None:
                return
            response = await self.send(member, send)
            member.machine.on_response(self.now_ms(), send, response)  # a heartbeat wake: ours below
            member.alive = int(response.error_code) == 0

        # The leader syncs first: followers' SyncGroups park until its assignment arrives.
        order = sorted(
            range(len(members)),
            key=lambda i: 0 if syncs[i] is not None and members[i].machine.is_leader else 1,
        )
        await asyncio.gather(*(sync(members[i], syncs[i], rank * STEP_GAP_S) for rank, i in enumerate(order)))
        self.flush(names)

    async def heartbeat(self, member: _Member, observed: bool, generation_offset: int = 0) -> Any:
        api_version = member.machine.api_versions[HEARTBEAT]
        request = entity(HEARTBEAT, api_version, member.machine.heartbeat_values(generation_offset))
        if observed:
            return await self.exchange(member, HEARTBEAT, api_version, request)
        conn = await self.connection(member)
        return await conn.call(request)

    async def commit(
        self, member: _Member, api_version: int | None = None, missing_group: bool = False
    ) -> None:
        spec, machine = member.spec, member.machine
        api_version = api_version or spec.offset_commit_api_version
        partition = {
            "partition_index": 0,
            "committed_offset": 0,
            "committed_leader_epoch": -1,
            "commit_timestamp": -1,
            "committed_metadata": "",
        }
        request = from_values(
            request_schema(OFFSET_COMMIT, api_version),
            {
                "group_id": f"{self.group_id}-missing" if missing_group else self.group_id,
                "generation_id_or_member_epoch": machine.generation_id,
                "member_id": machine.member_id,
                "group_instance_id": spec.group_instance_id,
                "retention_time": -1,
                "topics": ({"name": self.scenario.topic, "partitions": (partition,)},),
            },
        )
        await self.exchange(member, OFFSET_COMMIT, api_version, request)

    async def leave(self, member: _Member) -> None:
        machine = member.machine
        for command in machine.stop(self.now_ms(), leave=True):
            if isinstance(command, Send):
                await self.send(member, command)
        member.alive = False
        member.machine = self._machine(member.spec)  # after LeaveGroup: no member id, no generation

    async def admin_leave(self, instance_ids: list[str], api_version: int) -> None:
        admin = _Member(MemberSpec(key="admin"), self._machine(MemberSpec(key="admin")))
        members = tuple({"member_id": "", "group_instance_id": i, "reason": None} for i in instance_ids)
        request = entity(LEAVE, api_version, {"group_id": self.group_id, "members": members})
        await self.exchange(admin, LEAVE, api_version, request)
        for exchange in admin.exchanges:
            self.observer.observe(exchange)
        if admin.conn is not None:
            admin.conn.close()

    async def _heartbeat_loop(self) -> None:
        while not self._stopping:
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
    needed: dict[int, set[int]] = {int(ApiKey.FIND_COORDINATOR): {3}}
    specs = list(scenario.members)
    specs += [step.as_spec for step in scenario.steps if isinstance(step, Bounce) and step.as_spec]
    for spec in specs:
        for api_key, api_version in companion_versions(spec.join_api_version).items():
            needed.setdefault(api_key, set()).add(api_version)
    for step in scenario.steps:
        if isinstance(step, AdminLeave):
            needed.setdefault(LEAVE, set()).add(step.api_version)
        if isinstance(step, Commit):
            needed.setdefault(OFFSET_COMMIT, set()).update(
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
            raise UnsupportedByTarget(f"{bootstrap} does not serve {ApiKey(api_key).name} versions {missing}")
    group_id = f"{scenario.name}-{uuid.uuid4().hex[:8]}"
    if any(isinstance(step, Commit) for step in scenario.steps):
        # Kafka refuses commits for topics it does not have (UNKNOWN_TOPIC_OR_PARTITION).
        await ensure_topic(host, port, scenario.topic)
    coordinator_host, coordinator_port = await coordinator_ready(host, port, group_id, served)
    observer = GroupObserver(session_id, scenario.name, run)
    runner = _Run(scenario, coordinator_host, coordinator_port, group_id, observer)
    events = await runner.run()
    return RunResult(run, tuple(events), describes=tuple(runner.describes))


NOT_READY = frozenset(
    {
        int(ErrorCode.coordinator_load_in_progress),
        int(ErrorCode.not_coordinator),
        int(ErrorCode.coordinator_not_available),
    }
)


async def coordinator_ready(
    host: str, port: int, group_id: str, served: dict[int, tuple[int, int]], timeout_s: float = 120.0
) -> tuple[str, int]:
    """The group's coordinator once it serves the group: FindCoordinator, then DescribeGroups
    (read-only: it creates no group) until the answer is not COORDINATOR_LOAD_IN_PROGRESS,
    NOT_COORDINATOR or COORDINATOR_NOT_AVAILABLE. FindCoordinator names the leader of the group's
    __consumer_offsets partition before that partition is loaded (GroupMetadataManager's
    loadGroupsAndOffsets / CoordinatorRuntime's scheduleLoadOperation), and a scenario's first
    JoinGroup meeting a loading coordinator would change what the run observes. NOT_COORDINATOR
    (leadership moved) asks FindCoordinator again."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        coordinator = await find_coordinator(host, port, group_id, served)
        code = int((await describe_group(*coordinator, group_id, "group-replay-driver")).error_code)
        if code not in NOT_READY:
            return coordinator
        if loop.time() > deadline:
            raise DriverError(
                f"{host}:{port}: coordinator for {group_id!r} not ready ({ErrorCode(code).name})"
            )
        await asyncio.sleep(0.5)


async def describe_group(host: str, port: int, group_id: str, client_id: str) -> Any:
    """DescribeGroups v5 for one group on its own connection (read-only: it creates no group)."""
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
    from kio.schema.types import GroupId

    admin = await Connection.open(host, port, client_id)
    try:
        response = await admin.call(
            DescribeGroupsRequest(groups=(GroupId(group_id),), include_authorized_operations=False)
        )
    finally:
        admin.close()
    return response.groups[0]


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
