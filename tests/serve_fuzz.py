"""A seeded fuzzer of hostile-but-valid group requests, for `coordinator serve` and a real broker.

Every request is well formed (kio encodes it); its field values are what a hostile or broken
client could send: groups shared by every connection, group instance ids shared between
connections, protocol lists that differ between members or name a protocol twice, member ids of
other groups or of nobody, stale generations, empty group ids and protocol types, session
timeouts outside the broker's bounds, parked JoinGroups abandoned by closing the connection.
Each connection waits for one answer at a time, as a client does; an answer that does not come
within `answer_timeout_s` (a JoinGroup parked for a rebalance) makes it give up and reconnect.

The same seed drives the same sequence of choices against either target, so the two reports can
be compared: which (API, error code) pairs each target answered, and how many connections the
target closed on its own. Used by tests/test_coordinator_serve_fuzz.py (bounded, seconds) and
bench/soak_serve.py (minutes, with RSS).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from proxy.wire import (
    ApiKey,
    ErrorCode,
    FrameDecoder,
    build_request,
    decode_response,
    encode_request,
    request_class,
)
from replay.coordinator import requests as Q

PROTOCOL_LISTS: tuple[tuple[tuple[str, bytes], ...], ...] = (
    (("range", b""),),
    (("range", b""),),
    (("range", b""), ("roundrobin", b"")),
    (("roundrobin", b""),),
    (("range", b""), ("range", b"")),  # the same protocol twice (issue 18's minimal trigger)
    (("cooperative-sticky", b""), ("range", b"")),
)
SESSION_TIMEOUTS_MS = (1_000, 6_000, 10_000, 10_000, 500, 3_600_000)  # 500 and 1 h: out of bounds
REBALANCE_TIMEOUTS_MS = (1_000, 2_000, 5_000)


@dataclass
class FuzzReport:
    target: str
    requests: int = 0
    answered: Counter[tuple[str, str]] = field(default_factory=Counter)  # (API, error) -> count
    closed_by_target: int = 0  # connections the target closed while we waited for an answer
    abandoned: int = 0  # connections we closed: no answer within the timeout, or on purpose
    connections: int = 0
    probe_joined_s: float | None = None  # a fresh group's first JoinGroup answered after ...

    def codes(self) -> set[tuple[str, str]]:
        return set(self.answered)

    def summary(self) -> str:
        return (
            f"{self.target}: {self.requests} requests on {self.connections} connections, "
            f"{self.closed_by_target} closed by the target, {self.abandoned} abandoned"
        )


@dataclass
class _Shared:
    """What the connections learn (member ids, generations) so that requests reach deep states."""

    groups: tuple[str, ...]
    instances: tuple[str, ...]
    topic: str
    members: dict[str, list[str]] = field(default_factory=dict)
    generations: dict[str, int] = field(default_factory=dict)

    def learn(self, group_id: str, member_id: str, generation_id: int) -> None:
        if member_id:
            known = self.members.setdefault(group_id, [])
            if member_id not in known:
                known.append(member_id)
                del known[:-8]
        if generation_id >= 0:
            self.generations[group_id] = generation_id


def _error_codes(entity: Any) -> Iterator[int]:
    """Every error code in a response entity, nested ones included."""
    code = getattr(entity, "error_code", None)
    if code is not None:
        yield int(code)
    for name in getattr(entity, "__dataclass_fields__", {}):
        value = getattr(entity, name)
        if isinstance(value, tuple):
            for item in value:
                if hasattr(item, "__dataclass_fields__"):
                    yield from _error_codes(item)


class _Fuzzer:
    def __init__(self, rng: random.Random, shared: _Shared) -> None:
        self.rng = rng
        self.shared = shared

    def group(self) -> str:
        return "" if self.rng.random() < 0.03 else self.rng.choice(self.shared.groups)

    def member(self, group_id: str) -> str:
        rng = self.rng
        roll = rng.random()
        known = self.shared.members.get(group_id) or [""]
        if roll < 0.6:
            return rng.choice(known)
        if roll < 0.75:
            other = self.shared.members.get(rng.choice(self.shared.groups)) or [""]
            return rng.choice(other)
        if roll < 0.9:
            return ""
        return f"nobody-{rng.randrange(1000)}"

    def instance(self) -> str | None:
        return self.rng.choice(self.shared.instances) if self.rng.random() < 0.5 else None

    def generation(self, group_id: str) -> int:
        rng = self.rng
        if rng.random() < 0.7:
            return self.shared.generations.get(group_id, 0)
        return rng.choice((-1, 0, 1, 99))

    def request(self) -> tuple[str, Any]:
        rng = self.rng
        group_id = self.group()
        kind = rng.choices(
            ("join", "sync", "heartbeat", "leave", "commit", "fetch", "describe", "list", "find"),
            weights=(30, 15, 20, 8, 8, 5, 5, 4, 5),
        )[0]
        match kind:
            case "join":
                v = rng.randint(2, 9)
                return kind, Q.join_group(
                    v,
                    group_id,
                    self.member(group_id),
                    group_instance_id=self.instance(),
                    session_timeout_ms=rng.choice(SESSION_TIMEOUTS_MS),
                    rebalance_timeout_ms=rng.choice(REBALANCE_TIMEOUTS_MS),
                    protocol_type="consumer" if rng.random() < 0.9 else rng.choice(("", "connect")),
                    protocols=rng.choice(PROTOCOL_LISTS),
                )
            case "sync":
                v = rng.randint(0, 5)
                member_id = self.member(group_id)
                known = self.shared.members.get(group_id, [])
                assignments = {m: b"" for m in known} if rng.random() < 0.5 else {}
                return kind, Q.sync_group(
                    v,
                    group_id,
                    self.generation(group_id),
                    member_id,
                    group_instance_id=self.instance(),
                    protocol_name=rng.choice(("range", "range", "roundrobin")),
                    assignments=assignments,
                )
            case "heartbeat":
                v = rng.randint(0, 4)
                return kind, Q.heartbeat(
                    v,
                    group_id,
                    self.generation(group_id),
                    self.member(group_id),
                    group_instance_id=self.instance(),
                )
            case "leave":
                v = rng.randint(0, 5)
                count = 1 if v <= 2 else rng.randint(1, 3)
                leaving = [(self.member(group_id), self.instance() if v >= 3 else None) for _ in range(count)]
                return kind, Q.leave_group(v, group_id, leaving)
            case "commit":
                v = rng.randint(2, 9)
                offsets = {
                    (self.shared.topic, rng.randrange(3)): rng.randrange(100)
                    for _ in range(rng.randint(0, 3))
                }
                member_id = self.member(group_id) if rng.random() < 0.6 else ""
                generation = self.generation(group_id) if member_id else -1
                return kind, Q.offset_commit(
                    v, group_id, generation, member_id, offsets, group_instance_id=self.instance()
                )
            case "fetch":
                v = rng.randint(1, 7)
                topic_cls = request_class(ApiKey.OFFSET_FETCH, v, "OffsetFetchRequestTopic")
                topics = (topic_cls(name=self.shared.topic, partition_indexes=(0, 1)),)
                if v >= 2 and rng.random() < 0.5:
                    topics = None  # every committed offset
                return kind, build_request(
                    ApiKey.OFFSET_FETCH, v, group_id=group_id, topics=topics, require_stable=False
                )
            case "describe":
                v = rng.randint(0, 5)
                groups = tuple(rng.sample(self.shared.groups, rng.randint(1, 2)))
                return kind, build_request(ApiKey.DESCRIBE_GROUPS, v, groups=groups)
            case "list":
                v = rng.randint(0, 4)
                states = rng.choice(((), ("stable",), ("empty", "preparingrebalance")))
                return kind, build_request(ApiKey.LIST_GROUPS, v, states_filter=states)
            case _:
                v = rng.randint(0, 3)
                return kind, build_request(ApiKey.FIND_COORDINATOR, v, key=group_id or "g", key_type=0)


async def _read_answer(reader: asyncio.StreamReader, decoder: FrameDecoder, timeout_s: float) -> bytes | None:
    """The next response frame; None when the target closed the connection. One request is in
    flight at a time, so a read never holds two answers."""
    async with asyncio.timeout(timeout_s):
        while True:
            data = await reader.read(65536)
            if not data:
                return None
            frames = decoder.feed(data)
            if frames:
                return frames[0]


async def _connection_worker(
    host: str,
    port: int,
    fuzzer: _Fuzzer,
    report: FuzzReport,
    deadline: float,
    answer_timeout_s: float,
) -> None:
    rng = fuzzer.rng
    while time.monotonic() < deadline:
        report.connections += 1
        reader, writer = await asyncio.open_connection(host, port)
        decoder = FrameDecoder()
        correlation = 0
        try:
            while time.monotonic() < deadline:
                kind, request = fuzzer.request()
                correlation += 1
                writer.write(encode_request(request, correlation, f"fuzz-{rng.randrange(4)}"))
                await writer.drain()
                report.requests += 1
                if kind == "join" and rng.random() < 0.03:
                    report.abandoned += 1  # give up at once: the JoinGroup may be parked
                    break
                try:
                    frame = await _read_answer(reader, decoder, answer_timeout_s)
                except TimeoutError:
                    report.abandoned += 1
                    break
                if frame is None:
                    report.closed_by_target += 1
                    break
                api_key, api_version = int(type(request).__api_key__), int(type(request).__version__)
                _, response = decode_response(frame, api_key, api_version)
                api = ApiKey(api_key).name
                for code in _error_codes(response):
                    report.answered[(api, ErrorCode(code).name)] += 1
                if kind == "join":
                    fuzzer.shared.learn(request.group_id, response.member_id, int(response.generation_id))
        except (ConnectionError, OSError):
            report.closed_by_target += 1
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def probe_join(host: str, port: int, group_id: str, timeout_s: float) -> float | None:
    """Seconds until a fresh one-member group's JoinGroup (v3: no member id round trip) is
    answered without error; None if it is not within `timeout_s`."""
    started = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    decoder = FrameDecoder()
    request = Q.join_group(3, group_id, session_timeout_ms=10_000, rebalance_timeout_ms=2_000)
    try:
        writer.write(encode_request(request, 1, "probe"))
        await writer.drain()
        try:
            frame = await _read_answer(reader, decoder, timeout_s)
        except TimeoutError:
            return None
        if frame is None:
            return None
        _, response = decode_response(frame, 11, 3)
        return time.monotonic() - started if response.error_code == ErrorCode.none else None
    finally:
        writer.close()


async def wait_coordinator_ready(
    host: str, port: int, groups: tuple[str, ...], timeout_s: float = 60
) -> None:
    """Until FindCoordinator answers NONE for every group (a fresh broker creates and loads
    __consumer_offsets first)."""
    deadline = time.monotonic() + timeout_s
    pending = list(groups)
    while pending:
        reader, writer = await asyncio.open_connection(host, port)
        try:
            request = build_request(ApiKey.FIND_COORDINATOR, 3, key=pending[0], key_type=0)
            writer.write(encode_request(request, 1, "ready"))
            await writer.drain()
            frame = await _read_answer(reader, FrameDecoder(), 10)
            if frame is not None and decode_response(frame, 10, 3)[1].error_code == ErrorCode.none:
                pending.pop(0)
                continue
        finally:
            writer.close()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the coordinator of {pending[0]} is not ready after {timeout_s} s")
        await asyncio.sleep(0.5)


async def fuzz(
    target: str,
    host: str,
    port: int,
    *,
    seed: int,
    duration_s: float,
    connections: int = 8,
    topic: str = "fuzz",
    prefix: str = "fz",
    answer_timeout_s: float = 2.0,
    on_tick: Callable[[FuzzReport], None] | None = None,
) -> FuzzReport:
    """Run `connections` hostile clients for `duration_s`, then probe a fresh group."""
    shared = _Shared(
        groups=tuple(f"{prefix}-g{i}" for i in range(4)),
        instances=tuple(f"{prefix}-i{i}" for i in range(4)),
        topic=topic,
    )
    await wait_coordinator_ready(host, port, shared.groups)
    report = FuzzReport(target)
    deadline = time.monotonic() + duration_s
    workers = [
        asyncio.create_task(
            _connection_worker(
                host,
                port,
                _Fuzzer(random.Random(seed * 1_000 + index), shared),
                report,
                deadline,
                answer_timeout_s,
            )
        )
        for index in range(connections)
    ]
    if on_tick is not None:
        while not all(w.done() for w in workers):
            await asyncio.sleep(5)
            on_tick(report)
    await asyncio.gather(*workers)
    await wait_coordinator_ready(host, port, (f"{prefix}-probe",))
    report.probe_joined_s = await probe_join(host, port, f"{prefix}-probe", timeout_s=15)
    return report


def compare(serve: FuzzReport, kafka: FuzzReport) -> dict[str, Any]:
    """What serve did that the broker did not, under the same seed."""
    return {
        "codes_only_serve": sorted(serve.codes() - kafka.codes()),
        "codes_only_kafka": sorted(kafka.codes() - serve.codes()),
        "closed_by_serve": serve.closed_by_target,
        "closed_by_kafka": kafka.closed_by_target,
    }
