"""The asyncio shell against small fake upstreams (faults a real broker cannot be made to produce)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

import kio.schema.metadata.v12.response as md12
import pytest
from kio.schema.types import BrokerId
from kio.static.primitive import i32, i32Timedelta

from proxy.capture.reader import read_capture
from proxy.capture.writer import CaptureWriter
from proxy.commands import PassThrough
from proxy.server import ProxyConfig, ProxyServer
from proxy.wire import FrameDecoder, decode_response, encode_response, frame, peek_request_prefix
from tests.test_proxy_session import _heartbeat, _opaque

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with a response carrying its correlation id and 2 bytes of body."""
    decoder = FrameDecoder()
    try:
        while data := await reader.read(65536):
            for request in decoder.feed(data):
                _, _, correlation_id = peek_request_prefix(request)
                writer.write(frame(correlation_id.to_bytes(4, "big") + b"ok"))
            await writer.drain()
    except ConnectionError:
        pass
    writer.close()


async def _start(handler: Handler, port: int = 0) -> asyncio.Server:
    return await asyncio.start_server(handler, "127.0.0.1", port)


def _port(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])


async def _proxy(upstream_port: int, **kwargs: object) -> tuple[ProxyServer, int]:
    recorder = kwargs.pop("recorder", None)
    proxy = ProxyServer(ProxyConfig(upstream=("127.0.0.1", upstream_port), **kwargs), recorder)  # type: ignore[arg-type]
    _, port = await proxy.start()
    return proxy, port


async def _close(proxy: ProxyServer, upstream: asyncio.Server, *writers: asyncio.StreamWriter) -> None:
    """The end of a test: its client connections, the proxy, then the fake upstream."""
    for writer in writers:
        writer.close()
    await proxy.close()
    upstream.close()


async def _responses(reader: asyncio.StreamReader, count: int) -> list[bytes]:
    decoder = FrameDecoder()
    frames: list[bytes] = []
    while len(frames) < count:
        data = await asyncio.wait_for(reader.read(65536), 10)
        if not data:
            break
        frames += decoder.feed(data)
    return frames


@pytest.mark.parametrize("scope", ["all", "group"])
def test_pipelined_requests_get_fifo_responses_and_are_recorded(tmp_path: Path, scope: str) -> None:
    """Group scope: one read carries group frames (recorded whole) between non-group ones
    (header-only runs), so the session's commands mix Records and HEADERS runs; every one must
    reach the capture and every answer the client. (The one-hand-over fast path once took the mix
    for Records only and closed the connection on `tuple index out of range`: seen on live
    brokers' connections when a cluster's coordinator died and Metadata answers arrived in the
    same read as Fetch answers.)"""
    from proxy.capture.header import RecordScope

    async def main() -> None:
        upstream = await _start(_echo)
        recorder = CaptureWriter(tmp_path / "c.pcapng", upstream="fake", record_scope=RecordScope(scope))
        proxy, port = await _proxy(_port(upstream), recorder=recorder)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(_heartbeat(i) if i % 3 == 0 else _opaque(i, b"x" * i) for i in range(200)))
        frames = await _responses(reader, 200)
        assert [int.from_bytes(f[:4], "big") for f in frames] == list(range(200))
        await _close(proxy, upstream, writer)
        recorder.close()

    asyncio.run(main())
    capture = read_capture(tmp_path / "c.pcapng")
    assert capture.damage is None
    client = [f for f in capture.frames if f.leg == "client"]
    assert len(client) == 400  # group scope: the 133 other exchanges as header-only frames
    heartbeats = [f for f in client if f.api_key == 12]
    assert len(heartbeats) == 2 * 67 and {f.group_id for f in heartbeats if f.group_id} == {"g1"}


def test_malformed_frame_closes_only_that_connection(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        upstream = await _start(_echo)
        proxy, port = await _proxy(_port(upstream), max_frame_bytes=4096)
        good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)
        for bad in [
            b"\xff\xff\xff\xfe",
            (5000).to_bytes(4, "big"),
            frame(b"\x00\x0c\x00"),
            frame((11).to_bytes(2, "big") + (99).to_bytes(2, "big") + b"\x00\x00\x00\x01\xff\xff"),
        ]:
            bad_reader, bad_writer = await asyncio.open_connection("127.0.0.1", port)
            bad_writer.write(_heartbeat(1) + bad)
            got = await asyncio.wait_for(bad_reader.read(), 10)  # until the proxy closes it
            assert FrameDecoder().feed(got) in ([], [b"\x00\x00\x00\x01ok"])
            good_writer.write(_heartbeat(7))
            [response] = await _responses(good_reader, 1)
            assert response == b"\x00\x00\x00\x07ok"
            bad_writer.close()
        await _close(proxy, upstream, good_writer)

    with caplog.at_level(logging.WARNING, logger="group_replay.proxy"):
        asyncio.run(main())
    reasons = "\n".join(r.getMessage() for r in caplog.records)
    for expected in [
        "negative frame size",
        "exceeds the maximum",
        "truncated request header",
        "JoinGroup v99",
    ]:
        assert expected in reasons


def test_upstream_restart(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        upstream = await _start(_tracked_echo)
        upstream_port = _port(upstream)
        proxy, port = await _proxy(upstream_port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_heartbeat(1))
        assert await _responses(reader, 1) == [b"\x00\x00\x00\x01ok"]
        upstream.close()
        await _drop_all(upstream)
        assert await asyncio.wait_for(reader.read(), 10) == b""  # the proxy closed the client
        # Broker down: new connections are accepted and closed; the proxy keeps listening.
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(), 10) == b""
        # Broker back on the same port: clients reconnect.
        upstream = await _start(_echo, upstream_port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_heartbeat(2))
        assert await _responses(reader, 1) == [b"\x00\x00\x00\x02ok"]
        await _close(proxy, upstream, writer)

    with caplog.at_level(logging.WARNING, logger="group_replay.proxy"):
        asyncio.run(main())
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert "closed the connection" in messages and "unreachable" in messages


_live_writers: list[asyncio.StreamWriter] = []


async def _tracked_echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    _live_writers.append(writer)
    await _echo(reader, writer)


async def _drop_all(server: asyncio.Server) -> None:
    for writer in _live_writers:
        writer.transport.abort()
    _live_writers.clear()
    await server.wait_closed()


def test_metadata_brokers_are_rewritten_to_new_listeners() -> None:
    async def main() -> None:
        broker = await _start(_tracked_echo)  # the "broker" the metadata names

        async def bootstrap(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            decoder = FrameDecoder()
            while data := await reader.read(65536):
                for request in decoder.feed(data):
                    _, _, correlation_id = peek_request_prefix(request)
                    body = md12.MetadataResponse(
                        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                        brokers=(
                            md12.MetadataResponseBroker(
                                node_id=BrokerId(3), host="127.0.0.1", port=i32(_port(broker)), rack=None
                            ),
                        ),
                        cluster_id="c",
                        controller_id=BrokerId(3),
                        topics=(),
                    )
                    writer.write(encode_response(body, correlation_id))
                await writer.drain()

        upstream = await _start(bootstrap)
        proxy, port = await _proxy(_port(upstream))
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        request = (3).to_bytes(2, "big") + (12).to_bytes(2, "big") + (9).to_bytes(4, "big")
        writer.write(frame(request + b"\x00\x01c\x00\x01\x00\x00"))
        [response] = await _responses(reader, 1)
        _, body = decode_response(response, 3, 12)
        [advertised] = body.brokers
        assert advertised.host == "127.0.0.1" and advertised.port not in (_port(broker), port)
        # The new listener relays to the broker the metadata named.
        reader2, writer2 = await asyncio.open_connection("127.0.0.1", advertised.port)
        writer2.write(_heartbeat(5))
        assert await _responses(reader2, 1) == [b"\x00\x00\x00\x05ok"]
        await _close(proxy, upstream, writer, writer2)
        broker.close()

    asyncio.run(main())


def test_backpressure_bounds_proxy_buffers() -> None:
    total = 64 << 20

    async def main() -> None:
        async def firehose(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read(65536)  # one request, then a flood of "responses" to it
            chunk = frame(b"\x00\x00\x00\x01" + b"x" * 65532)
            for _ in range(total // len(chunk)):
                writer.write(chunk)
                await writer.drain()
            writer.close()

        upstream = await _start(firehose)
        proxy, port = await _proxy(_port(upstream))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
        writer.write(b"".join(_opaque(1, b"") for _ in range(total // 65540)))
        await asyncio.sleep(1.0)  # the client reads nothing: the proxy must stop reading upstream
        [connection] = proxy.connections.values()
        assert connection.client is not None and connection.upstream is not None
        assert connection.client.get_write_buffer_size() < 4 << 20
        assert not connection.upstream.is_reading()
        received = 0
        while received < total // 65540 * 65540:
            data = await asyncio.wait_for(reader.read(1 << 20), 10)
            if not data:
                break
            received += len(data)
        assert received == total // 65540 * 65540
        await _close(proxy, upstream, writer)

    asyncio.run(main())


def test_raw_sasl_plain_login_is_relayed_and_no_secret_reaches_log_or_capture(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 18 defect 7 end to end: a pre-KIP-152 PLAIN login through the recording proxy; then
    the same token sent without a handshake is refused without quoting it. Greps log and file."""
    from tests.test_proxy_session import SECRET, _handshake_ok, _sasl_handshake_v0

    token = frame(b"\x00bob\x00" + SECRET)

    async def sasl_v0_broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        raw_next = False
        while data := await reader.read(65536):
            for request in decoder.feed(data):
                if raw_next:
                    assert request == token[4:]
                    writer.write(frame(b""))  # PLAIN success: an empty token
                    raw_next = False
                    continue
                api_key, _, correlation_id = peek_request_prefix(request)
                if api_key == 17:
                    writer.write(_handshake_ok(correlation_id))
                    raw_next = True
                else:
                    writer.write(frame(correlation_id.to_bytes(4, "big") + b"ok"))
            await writer.drain()
        writer.close()

    async def main() -> None:
        upstream = await _start(sasl_v0_broker)
        recorder = CaptureWriter(tmp_path / "c.pcapng", upstream="fake")
        proxy, port = await _proxy(_port(upstream), recorder=recorder)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_sasl_handshake_v0(1, b"PLAIN"))
        assert len(await _responses(reader, 1)) == 1
        writer.write(token)
        assert await _responses(reader, 1) == [b""]
        writer.write(_heartbeat(2))
        assert await _responses(reader, 1) == [b"\x00\x00\x00\x02ok"]
        writer.close()
        stray_reader, stray_writer = await asyncio.open_connection("127.0.0.1", port)
        stray_writer.write(token)  # no handshake: not Kafka, closed
        assert await asyncio.wait_for(stray_reader.read(), 10) == b""
        await _close(proxy, upstream)
        recorder.close()

    with caplog.at_level(logging.DEBUG):
        asyncio.run(main())
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "not a Kafka request" in logged
    for secret in (SECRET, b"bob"):
        assert secret.decode() not in logged
        assert secret not in (tmp_path / "c.pcapng").read_bytes()
    capture = read_capture(tmp_path / "c.pcapng")
    assert [f.api_key for f in capture.frames if f.leg == "client"] == [17, 17, 12, 12]
    # Connection open/close are session commands too: both connections, with their reasons.
    reasons = [c.close_reason or "" for c in capture.connections.values()]
    assert len(reasons) == 2 and "client closed" in reasons[0] and "not a Kafka request" in reasons[1]


def _leave_group_claiming_2_32_members() -> bytes:
    """Issue 18 defect 0: 23 bytes on the wire; kio alone would allocate 34 GB and abort."""
    header = (13).to_bytes(2, "big") + (4).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\xff\xff\x00"
    return frame(header + b"\x02g" + bytes([0x80, 0x80, 0x80, 0x80, 0x10]) + b"\x00")


class _RewritesLeaveGroup(PassThrough):
    """Must change every LeaveGroup (so it holds and decodes it); changes nothing."""

    name = "rewrites-leave-group"

    def wants_request(self, api_key: int, api_version: int) -> bool:
        return api_key == 13


@pytest.mark.parametrize("must_change", [False, True])
def test_leave_group_claiming_2_32_members_costs_at_most_its_connection(must_change: bool) -> None:
    async def main() -> None:
        upstream = await _start(_echo)
        kwargs: dict[str, object] = {"policy": _RewritesLeaveGroup()} if must_change else {}
        proxy, port = await _proxy(_port(upstream), **kwargs)
        canary_reader, canary_writer = await asyncio.open_connection("127.0.0.1", port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        bad = _leave_group_claiming_2_32_members()
        assert len(bad) == 23
        writer.write(bad)
        if must_change:  # the proxy cannot rewrite what it cannot decode: this connection only
            assert await asyncio.wait_for(reader.read(), 10) == b""
        else:  # relayed as it is: the broker decides (Kafka closes it; the fake echoes)
            assert await _responses(reader, 1) == [b"\x00\x00\x00\x01ok"]
        canary_writer.write(_heartbeat(3))
        assert await _responses(canary_reader, 1) == [b"\x00\x00\x00\x03ok"]
        await _close(proxy, upstream, writer, canary_writer)

    asyncio.run(main())


def test_a_client_pipelining_20000_requests_unread_costs_no_one_else() -> None:
    """Issue 18 defect 2: 20,000 pipelined Produce and Heartbeat requests whose answers the
    client does not read while a canary makes round trips: every canary round trip is answered,
    the pipelining connection is not closed, and (once it reads) gets all 20,000 answers in order.
    Before: past 10,000 pending requests every request cost a pass over the table (12.5 s event
    loop stalls), and trimmed Produce requests closed the connection when answered."""

    async def main() -> None:
        upstream = await _start(_echo)
        proxy, port = await _proxy(_port(upstream))
        reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 16)
        canary_reader, canary_writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"".join(_opaque(i, b"x" * 60) if i % 2 else _heartbeat(i) for i in range(20_000)))
        for number in range(200):
            canary_writer.write(_heartbeat(number))
            assert await _responses(canary_reader, 1) == [number.to_bytes(4, "big") + b"ok"]
        frames = await _responses(reader, 20_000)
        assert [int.from_bytes(f[:4], "big") for f in frames] == list(range(20_000))
        assert proxy.summary().closed_on_error == 0
        await _close(proxy, upstream, writer, canary_writer)

    asyncio.run(main())


def test_the_correlation_table_is_trimmed_in_amortized_constant_time() -> None:
    from proxy.wire import CorrelationTable

    passes = 0

    class Counting(CorrelationTable):
        def trim(self) -> None:
            nonlocal passes
            before = self._trim_at
            super().trim()
            passes += self._trim_at != before or len(self.pending) <= before

    table = Counting()
    for number in range(40_000):
        table.add((12, 4, number, None, 4, None, 0))  # Heartbeats: nothing to trim
    assert passes <= 3 and len(table) == 40_000
    produce = Counting()
    for number in range(40_000):
        produce.add((0, 9, number, None, 9, None, 0))  # acks=0 Produce: set aside, bounded
    assert len(produce) <= 10_000 and len(produce.forgotten) <= 40_000
    assert produce.pop(5).correlation_id == 5  # answered late after all: no error


def test_partial_frames_share_one_buffer_budget(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 18 defect 5: 8 connections each start a 1 MiB JoinGroup and stop halfway (0.5 MiB
    held each); with a 2 MiB budget the ones past it are closed with a clear reason, the total
    held never passes the budget, and every byte comes back when the connections close."""
    mib = 1 << 20

    async def main() -> None:
        upstream = await _start(_echo)
        proxy, port = await _proxy(_port(upstream), max_buffered_bytes=2 * mib)
        head = (11).to_bytes(2, "big") + (5).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\xff\xff"
        partial = mib.to_bytes(4, "big") + head + b"\x00" * (mib // 2)
        connections = []
        for _ in range(8):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(partial)
            await writer.drain()
            connections.append((reader, writer))
        await asyncio.sleep(0.5)
        assert proxy.budget.used_bytes <= 2 * mib
        closed = 0
        for reader, _ in connections:
            with contextlib.suppress(TimeoutError):  # still open: its half frame held
                closed += await asyncio.wait_for(reader.read(), 0.2) == b""
        assert 4 <= closed <= 6
        canary_reader, canary_writer = await asyncio.open_connection("127.0.0.1", port)
        canary_writer.write(_heartbeat(9))
        assert await _responses(canary_reader, 1) == [b"\x00\x00\x00\x09ok"]
        for _, writer in [*connections, (canary_reader, canary_writer)]:
            writer.close()
        await asyncio.sleep(0.3)
        assert proxy.budget.used_bytes == 0
        await _close(proxy, upstream)

    with caplog.at_level(logging.WARNING, logger="group_replay.proxy"):
        asyncio.run(main())
    assert "past its budget of 2097152 bytes (--max-buffered-bytes)" in caplog.text
