"""The asyncio TCP shell: the same members against a live broker, in scaled real time.

This is the product's only Kafka client connection code: `Connection` (requests answered in
order, as a broker answers one connection), the ApiVersions probe and the FindCoordinator retry
(`find_coordinator`: Kafka creates __consumer_offsets on the first ask and answers
COORDINATOR_NOT_AVAILABLE meanwhile). The differential driver uses the same three.

Each member incarnation has its own connection (a restarted process reconnects). Versions are
clamped to what the broker advertises in ApiVersions, as a client negotiates them. Time is a
`ScaledClock`: recorded and scenario times are divided by `speed`; the broker's own timeouts
(session, rebalance) are real, so a large speed shortens gaps but not those waits.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from kio.schema.errors import ErrorCode

from proxy.wire import FrameDecoder, decode_response, encode_request, request_schema
from proxy.wire.apis import ApiKey
from replay.brokers import broker_version_label, group_settings, run_name_for
from replay.clock import ScaledClock
from replay.member import JOIN, LEAVE, from_values
from replay.plan import ReplayPlan
from replay.run import InFlight, Runner, RunResult, not_run_result
from replay.scenario import AS_RECORDED, Scenario

CLIENT_ID = "group-replay"
FIND_COORDINATOR = int(ApiKey.FIND_COORDINATOR)


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
                data = await asyncio.wait_for(self.reader.read(65536), timeout_s)
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


class LiveRunner(Runner):
    def __init__(self, plan: ReplayPlan, scenario: Scenario, run: str, speed: float) -> None:
        super().__init__(plan, scenario, run)
        self.clock = ScaledClock(speed)  # type: ignore[assignment]
        self.last_ms = 0

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
                wake.clear()
                with contextlib.suppress(TimeoutError):
                    next_ms = min(heap[0][0] if heap else end_ms, end_ms)
                    await asyncio.wait_for(wake.wait(), timeout=clock.seconds_until(next_ms))
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
    from harness.broker import start_broker

    settings = group_settings(plan.group_settings)
    with start_broker(kafka_version=kafka_version, extra_config=settings.broker_config()) as broker:
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
    "find_coordinator",
    "replay_broker_version",
    "replay_live",
]
