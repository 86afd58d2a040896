"""The asyncio TCP shell: the same members against a live broker, in scaled real time.

This is the product's only Kafka client connection code: `Connection` (requests answered in
order, as a broker answers one connection), the ApiVersions probe and the FindCoordinator retry
(`find_coordinator`: Kafka creates __consumer_offsets on the first ask and answers
COORDINATOR_NOT_AVAILABLE meanwhile). The differential driver uses the same three.

Each member incarnation has its own connection (a restarted process reconnects). Versions are
clamped to what the broker advertises in ApiVersions, as a client negotiates them.

Time is a `ScaledClock` whose rate `BrokerTimerPace` sets: the broker's own timers (session
expiry, the initial rebalance delay, rebalance and sync waits) run in real time, so a span of
group time a broker timer measures is replayed at 1x and only the idle gaps between them are
compressed `speed` times. Compressing everything (as this shell did before) replays another
group: at 4x a member that stopped without LeaveGroup stayed in the group four times longer than
recorded (Kafka's 6 s session timeout became 24 s of group time), and Kafka 3.9.2 gave one or two
fewer rebalances than the reference under the demo's scenarios; with a 3 s initial rebalance delay
a static member rejoined while its first JoinGroup was still held and was fenced.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from proxy.wire import FrameDecoder, decode_response, encode_request, request_schema
from proxy.wire.apis import ApiKey
from replay.brokers import broker_version_label, group_settings, run_name_for
from replay.clock import ScaledClock
from replay.member import HEARTBEAT, JOIN, LEAVE, SYNC, MemberState, from_values
from replay.plan import ReplayPlan
from replay.run import InFlight, Runner, RunResult, Seat, not_run_result
from replay.scenario import AS_RECORDED, Scenario

CLIENT_ID = "group-replay"
FIND_COORDINATOR = int(ApiKey.FIND_COORDINATOR)


CREATE_TOPICS = int(ApiKey.CREATE_TOPICS)
METADATA = int(ApiKey.METADATA)
CONSUMER_GROUP_HEARTBEAT = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)


class ConnectionClosed(OSError):
    """The target closed the connection or did not answer."""


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

    async def call(self, request: Any, timeout_s: float | None = 60.0) -> Any:
        async with self.lock:
            self.correlation += 1
            self.writer.write(encode_request(request, self.correlation, self.client_id))
            await self.writer.drain()
            while not self.frames:
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for loses a cancel that meets
                # an answer just read (CPython gh-86296), and a cancelled caller would go on.
                async with asyncio.timeout(timeout_s):
                    data = await self.reader.read(65536)
                if not data:
                    raise ConnectionClosed(f"{self.client_id}: connection closed by the target")
                self.frames += self.decoder.feed(data)
            frame = self.frames.pop(0)
            _, response = decode_response(
                frame, int(type(request).__api_key__), int(type(request).__version__)
            )
            return response

    def close(self) -> None:
        self.writer.close()


async def _once(host: str, port: int, request: Any) -> Any:
    conn = await Connection.open(host, port, CLIENT_ID)
    try:
        return await conn.call(request, timeout_s=10.0)
    finally:
        conn.close()


async def api_versions(host: str, port: int) -> dict[int, tuple[int, int]]:
    """ApiVersions v3 (KIP-511 client name), falling back to v0 for brokers before 2.4."""
    from kio.schema.api_versions.v0.request import ApiVersionsRequest as V0
    from kio.schema.api_versions.v3.request import ApiVersionsRequest as V3

    response = await _once(host, port, V3(client_software_name=CLIENT_ID, client_software_version="1"))
    if int(response.error_code) == int(ErrorCode.unsupported_version):
        response = await _once(host, port, V0())
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


async def find_coordinator(
    host: str, port: int, group_id: str, ranges: dict[int, tuple[int, int]], timeout_s: float = 60.0
) -> tuple[str, int]:
    """FindCoordinator until the broker names one (the offsets topic is created on first ask)."""
    api_version = min(3, ranges.get(FIND_COORDINATOR, (0, 3))[1])
    request = from_values(request_schema(FIND_COORDINATOR, api_version), {"key": group_id, "key_type": 0})
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = "no answer"
    while loop.time() < deadline:
        response = await _once(host, port, request)
        if int(response.error_code) == 0:
            return str(response.host), int(response.port)
        last = ErrorCode(int(response.error_code)).name
        await asyncio.sleep(0.5)
    raise ConnectionClosed(f"{host}:{port}: no coordinator for group {group_id!r} ({last})")


async def ensure_topics(
    host: str, port: int, topics: dict[str, int], ranges: dict[int, tuple[int, int]], timeout_s: float = 60.0
) -> dict[UUID, str]:
    """KIP-848 members are assigned by the broker from its own metadata, so the topics the
    recorded group consumed must exist there with the recorded partition counts: CreateTopics
    (a topic that exists is left as it is, TOPIC_ALREADY_EXISTS), then Metadata v10+ until each
    has a leader for every partition. Returns topic id -> name (the observer names assignments)."""
    create = min(7, ranges.get(CREATE_TOPICS, (0, -1))[1])
    metadata = min(12, ranges.get(METADATA, (0, -1))[1])
    if create < 4 or metadata < 10:
        raise UnsupportedByTarget(
            "the broker cannot create topics (CreateTopics v4+) or name their ids (Metadata v10+)"
        )
    wanted = tuple(
        {"name": t, "num_partitions": n, "replication_factor": -1} for t, n in sorted(topics.items())
    )
    await _once(
        host,
        port,
        from_values(
            request_schema(CREATE_TOPICS, create),
            {"topics": wanted, "timeout": i32Timedelta.parse(timedelta(seconds=30)), "validate_only": False},
        ),
    )
    ask = from_values(
        request_schema(METADATA, metadata),
        {
            "topics": tuple({"name": t} for t in sorted(topics)),
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while True:
        answer = await _once(host, port, ask)
        ready = {
            UUID(str(t.topic_id)): str(t.name)
            for t in answer.topics
            if int(t.error_code) == 0 and t.partitions and all(int(p.leader_id) >= 0 for p in t.partitions)
        }
        if len(ready) == len(topics) or loop.time() > deadline:
            return ready
        await asyncio.sleep(0.5)


class UnsupportedByTarget(ValueError):
    """The target does not serve an API version the run needs."""


class TcpTransport:
    """Each member connection is a `Connection`; every request is a task awaiting its answer."""

    def __init__(self, runner: Runner, host: str, port: int, wake: asyncio.Event) -> None:
        self.runner = runner
        self.host, self.port = host, port
        self.wake = wake
        self.connections: dict[int, Connection] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.error: BaseException | None = None

    def send(self, now_ms: int, flight: InFlight) -> None:
        task = asyncio.get_running_loop().create_task(self._call(flight))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def disconnect(self, connection_id: int, now_ms: int) -> None:
        """The process is gone: close once the requests it sent (its LeaveGroup) are answered."""
        task = asyncio.get_running_loop().create_task(self._close_after(connection_id))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _close_after(self, connection_id: int) -> None:
        conn = self.connections.get(connection_id)
        if conn is None:
            return
        async with conn.lock:
            self.connections.pop(connection_id, None)
            conn.close()

    async def _call(self, flight: InFlight) -> None:
        try:
            conn = self.connections.get(flight.connection_id)
            if conn is None:
                conn = await Connection.open(self.host, self.port, flight.seat.script.client_id)
                self.connections[flight.connection_id] = conn
            response = await conn.call(
                flight.send.request, timeout_s=None
            )  # JoinGroup waits for the rebalance
        except (OSError, TimeoutError) as exc:
            if flight.send.api_key != LEAVE:  # a LeaveGroup racing a close is not an error
                self.error = exc
            self.wake.set()
            return
        clock = self.runner.clock
        assert isinstance(clock, ScaledClock)
        self.runner.deliver(max(clock.now_ms(), self.runner.last_ms), flight, response)
        self.wake.set()

    async def close(self) -> None:
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for conn in self.connections.values():
            conn.close()
        self.connections.clear()


CONSUMER_SESSION_TIMEOUT_MS = 45_000  # group.consumer.session.timeout.ms (Kafka's default)
PACE_MARGIN_MS = 2_000
"""Real time kept beyond a broker timer's computed end (a loaded machine answers late)."""


class BrokerTimerPace:
    """When a live run must go at 1x: while one of the broker's own timers may be measuring group
    time. Sans-IO: the runner tells it what its members did and asks `hold_until(now_ms, seats)`.

    The timers are those of Kafka's classic group coordinator (GroupMetadataManager,
    group-coordinator module: `classicGroupHeartbeatKey` / `rescheduleClassicGroupMemberHeartbeat`,
    `classicGroupJoinKey` with `InitialDelayedJoin`'s delay extended while members keep joining,
    up to the rebalance timeout, `classicGroupSyncKey`, the pending-member timeout of KIP-394).
    The run holds 1x while
    - a member is joining or syncing (its JoinGroup may be held by the initial delay or the
      rebalance timeout, its SyncGroup by the sync timeout; a pending member is being timed);
    - a member stopped without LeaveGroup and the broker may still count it: from one heartbeat
      interval before its scheduled stop (its last heartbeat starts the broker's session timer)
      until its session timeout after the stop or after the last rebalance (a join completion
      reschedules every member's heartbeat expiry), unless its static successor replaced it;
    - a LeaveGroup was sent and not every running member has been answered since (the others
      learn of the rebalance from their next heartbeat while the broker's rebalance timer runs).
    Heartbeats of live members may go faster than recorded: a broker never penalises that."""

    def __init__(self, margin_ms: int = PACE_MARGIN_MS) -> None:
        self.margin_ms = margin_ms
        self._stops: list[int] = []  # group times of scheduled stops (sorted)
        self._lookahead_ms = 0  # the longest heartbeat interval: how early a stop is held
        # seat -> (instance id it had, group time until which the broker may count it, session timeout)
        self._zombies: dict[int, tuple[str | None, int, int]] = {}
        self._leave_ms: int | None = None  # last LeaveGroup answered at (group ms); -1 while in flight
        self._leaves_in_flight = 0
        self._confirmed: dict[int, int] = {}  # seat -> send time of its last answered heartbeat / sync

    def expect_stop(self, at_ms: int, heartbeat_interval_ms: int) -> None:
        bisect.insort(self._stops, at_ms)
        self._lookahead_ms = max(self._lookahead_ms, heartbeat_interval_ms)

    def stopped(self, now_ms: int, seat: Seat, was_running: bool, sent_leave: bool) -> None:
        if was_running and not sent_leave:
            settings = getattr(seat.member, "join_settings", None)  # a KIP-848 member: the broker's
            timeout = settings.session_timeout_ms if settings else CONSUMER_SESSION_TIMEOUT_MS
            self._zombies[id(seat)] = (seat.member.instance_id, now_ms + timeout + self.margin_ms, timeout)
        if sent_leave:
            self._leaves_in_flight += 1

    def started(self, seat: Seat) -> None:
        zombie = self._zombies.get(id(seat))
        if zombie is not None and zombie[0] is not None and zombie[0] == seat.member.instance_id:
            del self._zombies[id(seat)]  # a static member's new incarnation replaces the old one

    def answered(self, now_ms: int, seat: Seat, flight: InFlight, response: Any) -> None:
        api_key = flight.send.api_key
        if api_key == LEAVE:
            self._leaves_in_flight = max(0, self._leaves_in_flight - 1)
            self._leave_ms = now_ms
        elif api_key in (HEARTBEAT, SYNC, CONSUMER_GROUP_HEARTBEAT) and int(response.error_code) == 0:
            self._confirmed[id(seat)] = flight.sent_ms

    def hold_until(self, now_ms: int, seats: list[Seat]) -> int | None:
        """None: no broker timer can be measuring, compress. Else group ms until which 1x holds
        by time alone (`now_ms` when only a member's answer can end it)."""
        busy = self._leaves_in_flight > 0
        for seat in seats:
            member = seat.member
            if member.state is MemberState.STABLE:
                if self._leave_ms is not None and self._confirmed.get(id(seat), -1) < self._leave_ms:
                    busy = True
            elif member.state in (MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE):
                busy = True
        holds: list[int] = []
        for key, (instance_id, until_ms, timeout) in list(self._zombies.items()):
            if busy:
                until_ms = max(until_ms, now_ms + timeout + self.margin_ms)
                self._zombies[key] = (instance_id, until_ms, timeout)
            if until_ms <= now_ms:
                del self._zombies[key]
            else:
                holds.append(until_ms)
        index = bisect.bisect_left(self._stops, now_ms)
        del self._stops[:index]
        if self._stops and self._stops[0] <= now_ms + self._lookahead_ms + self.margin_ms:
            holds.append(self._stops[0])
        if busy:
            return now_ms
        return min(holds) if holds else None


class LiveRunner(Runner):
    """The runner in scaled real time; `pace` (None: compress everything, unfaithful) keeps 1x
    while a broker timer may be measuring."""

    def __init__(
        self, plan: ReplayPlan, scenario: Scenario, run: str, speed: float, *, paced: bool = True
    ) -> None:
        super().__init__(plan, scenario, run)
        self.clock = ScaledClock(speed)  # type: ignore[assignment]
        self.last_ms = 0
        self.pace = BrokerTimerPace() if paced and speed > 1 else None
        self._lookahead_ms = max((s.script.heartbeat_interval_ms for s in self.seats), default=0)

    @property
    def kip848(self) -> bool:
        """Consumer-protocol members: the scenario's, or the capture's own (a KIP-848 or
        migration capture replayed as recorded)."""
        return self.scenario.uses_consumer_protocol or self.plan.uses_consumer_protocol

    # -- what the pace needs to know ----------------------------------------------------------
    def at(self, when_ms: int, action: Callable[[int, Any], None], arg: Any = None) -> None:
        super().at(when_ms, action, arg)
        if self.pace is not None and action in (self.stop, self.restart, self._bounce):
            self.pace.expect_stop(when_ms, self._lookahead_ms)

    def stop(self, now_ms: int, arg: tuple[Seat, bool]) -> None:
        seat, leave = arg
        was_running = seat.member.state in (
            MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE, MemberState.STABLE,
        )  # fmt: skip
        sent_leave = was_running and leave and bool(seat.member.member_id)  # type: ignore[attr-defined]
        super().stop(now_ms, arg)
        if self.pace is not None:
            self.pace.stopped(now_ms, seat, was_running, sent_leave)

    def start(self, now_ms: int, seat: Seat) -> None:
        super().start(now_ms, seat)
        if self.pace is not None:
            self.pace.started(seat)

    def deliver(self, now_ms: int, flight: InFlight, response: Any) -> None:
        if self.pace is not None:
            self.pace.answered(now_ms, flight.seat, flight, response)
        super().deliver(now_ms, flight, response)

    def update_pace(self, now_ms: int) -> int | None:
        """Set the clock's rate for what comes next; the group ms at which to ask again."""
        if self.pace is None:
            return None
        hold = self.pace.hold_until(now_ms, self.seats)
        clock = self.clock
        assert isinstance(clock, ScaledClock)
        clock.set_rate(1.0 if hold is not None else clock.speed)
        return hold if hold is not None and hold > now_ms else None

    def clamp_versions(self, ranges: dict[int, tuple[int, int]]) -> None:
        """A client picks min(its version, the broker's newest); below the broker's oldest it cannot run."""
        for seat in self.seats:
            versions = seat.member.api_versions
            for api_key, api_version in list(versions.items()):
                low, high = ranges.get(api_key, (0, -1))
                if high < 0 or min(api_version, high) < low:
                    raise UnsupportedByTarget(
                        f"{seat.script.member_key}: the broker does not serve {ApiKey(api_key).name} "
                        f"v{api_version} ({f'it has v{low}..v{high}' if high >= 0 else 'not at all'})"
                    )
                versions[api_key] = min(api_version, high)

    def check_scenario_versions(self, ranges: dict[int, tuple[int, int]]) -> None:
        """A JoinGroup version the scenario sets exactly must be served as is: the scenario is
        about that version (e.g. KIP-814 needs v9), so a broker without it cannot run it."""
        # KIP-848 is generally available from Kafka 4.0, whose ConsumerGroupHeartbeat is v1
        # (KIP-1082); 3.x advertises v0 of an early access it may not serve (3.9: connection closed)
        if self.kip848 and ranges.get(CONSUMER_GROUP_HEARTBEAT, (0, -1))[1] < 1:
            raise UnsupportedByTarget(
                f"scenario {self.scenario.name} has consumer-protocol (KIP-848) members; the broker "
                "serves no ConsumerGroupHeartbeat v1 (Kafka 4.0+)"
            )
        rules = [rule for member_rule in self.scenario.members for rule in member_rule.settings.api_versions]
        if self.scenario.rolling is not None:
            rules += self.scenario.rolling.after.api_versions
        for rule in rules:
            low, high = ranges.get(rule.api_key, (0, -1))
            if rule.exact and rule.api_key == JOIN and not low <= rule.api_version <= high:
                raise UnsupportedByTarget(
                    f"scenario {self.scenario.name} needs JoinGroup v{rule.api_version}; the broker "
                    f"serves {f'v{low}..v{high}' if high >= 0 else 'no JoinGroup'}"
                )

    async def run_live(
        self,
        host: str,
        port: int,
        ranges: dict[int, tuple[int, int]],
        progress: Callable[[int, int], None] | None,
    ) -> int:
        groups = sorted({seat.script.group_id for seat in self.seats})
        coordinators = {await find_coordinator(host, port, group, ranges) for group in groups}
        if len(coordinators) == 1:
            host, port = next(iter(coordinators))
        wake = asyncio.Event()
        transport = TcpTransport(self, host, port, wake)
        self.transport = transport
        self.check_scenario_versions(ranges)
        if self.kip848:
            topics = {t: n for seat in self.seats for t, n in seat.topics.items()}
            self.observer.topic_names.update(await ensure_topics(host, port, topics, ranges))
        self.clamp_versions(ranges)  # what the recorded clients would have negotiated
        end_ms = self.schedule()
        self.clamp_versions(ranges)  # companions of a scenario's JoinGroup version
        clock = self.clock
        assert isinstance(clock, ScaledClock)
        clock.start()
        heap = self._heap
        last_report = 0
        try:
            while transport.error is None:
                now_ms = clock.now_ms()
                if now_ms >= end_ms:
                    break
                if heap and heap[0][0] <= now_ms:
                    _, _, action, arg = self._pop()
                    self.last_ms = max(self.last_ms, now_ms)
                    action(self.last_ms, arg)
                    continue
                ask_again_ms = self.update_pace(now_ms)
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    next_ms = min(heap[0][0] if heap else end_ms, end_ms, ask_again_ms or end_ms)
                    async with asyncio.timeout(clock.seconds_until(next_ms)):  # not wait_for: see `call`
                        await wake.wait()
                if progress is not None and now_ms - last_report >= 1_000:
                    last_report = now_ms
                    progress(now_ms, end_ms)
        finally:
            await transport.close()
        if transport.error is not None:
            raise ConnectionClosed(f"{host}:{port}: {transport.error}")
        if progress is not None:
            progress(end_ms, end_ms)
        return end_ms

    def _pop(self) -> tuple[int, int, Callable[[int, Any], None], Any]:
        import heapq

        return heapq.heappop(self._heap)


def replay_live(
    plan: ReplayPlan,
    scenario: Scenario = AS_RECORDED,
    *,
    address: str,
    run: str | None = None,
    speed: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Replay against a live broker at HOST:PORT (the group coordinator of a one-node cluster).

    The run is named `broker-<version>` from what the broker advertises (AGREED #4: never its
    address) unless `run` names it. A scenario the broker cannot run gives a `not_run` result."""
    host, _, port = address.rpartition(":")

    async def go() -> RunResult:
        ranges = await api_versions(host, int(port))
        name = run or run_name_for(broker_version_label(ranges))
        runner = LiveRunner(plan, scenario, name, speed)
        try:
            end_ms = await runner.run_live(host, int(port), ranges, progress)
        except UnsupportedByTarget as exc:
            return not_run_result(plan, scenario, name, str(exc))
        return runner.result(end_ms)

    return asyncio.run(go())


def replay_broker_version(
    plan: ReplayPlan,
    scenario: Scenario = AS_RECORDED,
    *,
    kafka_version: str,
    speed: float = 1.0,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Start a broker of `kafka_version` (harness, Maven jars) with the recorded broker's group
    settings (Kafka's defaults where the capture does not say), replay against it, stop it."""
    from harness.broker import BrokerSpec, start_broker

    config = group_settings(plan.group_settings).broker_config()
    if scenario.uses_consumer_protocol:  # the scenario's group.consumer.migration.policy
        config["group.consumer.migration.policy"] = scenario.broker.migration_policy.value
    with start_broker(BrokerSpec(kafka_version, extra_config=config)) as broker:
        return replay_live(
            plan,
            scenario,
            address=broker.bootstrap,
            run=run_name_for(kafka_version),
            speed=speed,
            progress=progress,
        )


__all__ = [
    "Connection",
    "ConnectionClosed",
    "LiveRunner",
    "TcpTransport",
    "UnsupportedByTarget",
    "api_versions",
    "ensure_topics",
    "find_coordinator",
    "replay_broker_version",
    "replay_live",
]
