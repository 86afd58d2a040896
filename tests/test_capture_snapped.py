"""Header-only frames in formats 5 and 6 (`proxy.capture.snapped`): no comment, built a run at a
time; format 6 writes them on the client leg only.

The reader must read them as it reads format 4's commented ones and format 5's (fixtures written
by the code of those formats: same session input, same frames on both legs), their packets must
keep TCP's sequence numbers (the upstream leg's stream skipping exactly the header-only frames'
bytes) and valid IPv4 checksums, and the two ways of patching a run (16-bit lanes for runs of
equal sizes, frame by frame otherwise) must write the same bytes.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from proxy import header_runs
from proxy import session as session_module
from proxy.capture import snapped
from proxy.capture.header import CAPTURE_FORMAT_VERSION, RecordScope
from proxy.capture.pcapng import parse
from proxy.capture.reader import read_capture
from proxy.capture.tcp import new_stream
from proxy.capture.writer import CaptureWriter
from proxy.layouts import HEADER_RUN, REQUEST_HEADS, RESPONSE_HEADS, Record
from proxy.session import ProxySession
from proxy.wire import frame
from tests.test_proxy_session import _heartbeat, _join, _opaque

FORMATS = Path(__file__).resolve().parents[1] / "fixtures" / "formats"
FORMAT_4 = FORMATS / "format-4-header-only.pcapng"
FORMAT_5 = FORMATS / "format-5-header-only.pcapng"  # the same input, written by format 5's writer


try:
    from proxy.capture import _snapped
except ImportError:  # pragma: no cover - a source tree without `python setup.py build_ext --inplace`
    _snapped = None  # type: ignore[assignment]

_NATIVE = pytest.param(
    "native", marks=pytest.mark.skipif(_snapped is None, reason="proxy.capture._snapped is not built")
)


@pytest.fixture(params=["python", _NATIVE])
def builder(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The writer process's builder of header-only packets, forced (`snapped.run_blocks`): by the
    environment for the writer process `CaptureWriter` starts, in this process by a patch."""
    name: str = request.param
    monkeypatch.setenv("GROUP_REPLAY_CAPTURE_BUILDER", name)
    monkeypatch.setattr(snapped, "run_blocks", getattr(snapped, f"{name}_run_blocks"))
    _pack_runs_with(monkeypatch, name)
    return name


def _pack_runs_with(monkeypatch: pytest.MonkeyPatch, name: str) -> None:
    """The sessions' packing of header-only runs (`proxy.header_runs.append_run`, and the C
    `append_heads` their scans use when it is built), forced."""
    packer = header_runs.python_append_run if name == "python" else _snapped.append_run  # type: ignore[union-attr]
    monkeypatch.setattr(header_runs, "append_run", packer)
    monkeypatch.setattr(session_module, "append_run", packer)
    heads = None if name == "python" else _snapped.append_heads  # type: ignore[union-attr]
    monkeypatch.setattr(session_module, "native_append_heads", heads)


def _hand_over(writer: CaptureWriter, commands: list[object]) -> None:
    """A read's recording commands to the writer, as `proxy.server` hands them over."""
    for command in commands:
        if isinstance(command, Record):
            writer.record(command)
        elif type(command) is tuple or type(command) is bytes:
            writer.record_event(command)  # type: ignore[arg-type]
    writer.after_read()


def _scoped_capture(path: Path) -> None:
    """The session input `fixtures/formats/format-4-header-only.pcapng` was written from (by the
    writer of format 4): two Produce requests (one of 100 KB) and their responses (one of 70 KB)
    header only, then a JoinGroup and a Heartbeat whole."""
    writer = CaptureWriter(path, upstream="broker:9092", record_scope=RecordScope.GROUP)
    session = ProxySession(1, record=True, record_api_keys=RecordScope.GROUP.api_keys)
    writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")

    def run(commands: list[object]) -> None:
        _hand_over(writer, commands)

    produce, small = _opaque(8, b"\x07" * 100_000), _opaque(9, b"\x05" * 50)
    run(session.client_data(produce + small, 2_000))
    responses = frame((8).to_bytes(4, "big") + b"\x00" * 30) + frame(
        (9).to_bytes(4, "big") + b"\x00" * 70_000
    )
    run(session.upstream_data(responses, 3_000))
    run(session.client_data(_join(7) + _heartbeat(10), 3_500))
    writer.close_connection(1, 4_000, "done", len(produce), 0)
    writer.close()


def _fields(path: Path) -> list[tuple[object, ...]]:
    capture = read_capture(path)
    assert capture.damage is None
    return [
        (
            f.leg,
            f.direction,
            f.ts_ns,
            f.api_key,
            f.api_version,
            f.correlation_id,
            f.payload,
            f.omitted_body_bytes,
        )
        for f in capture.frames
    ]


@pytest.mark.parametrize("old_format", [FORMAT_4, FORMAT_5], ids=["format-4", "format-5"])
@pytest.mark.usefixtures("builder")
def test_format_6_reads_as_the_older_formats_did(tmp_path: Path, old_format: Path) -> None:
    path = tmp_path / "scoped.pcapng"
    _scoped_capture(path)
    assert read_capture(path).header["format_version"] == CAPTURE_FORMAT_VERSION == 6
    assert read_capture(old_format).header["format_version"] == int(old_format.name.split("-")[1])
    # Per leg in the same order (format 4 wrote a header-only frame's legs together, format 5
    # writes a run of them a leg at a time, as whole frames always were, format 6 on the client
    # leg only: the reader shows each on both legs).
    new, old = _fields(path), _fields(old_format)
    for leg in ("client", "upstream"):
        assert [row for row in new if row[0] == leg] == [row for row in old if row[0] == leg]
        assert len([row for row in new if row[0] == leg and row[-1] is not None]) == 4
    header_only = [row for row in new if row[-1] is not None and row[0] == "client"]
    # Two requests and two responses; a response's API is its request's.
    assert [(row[1], row[3], row[5]) for row in header_only] == [
        ("request", 0, 8), ("request", 0, 9), ("response", 0, 8), ("response", 0, 9),
    ]  # fmt: skip
    assert [row[-1] for row in header_only] == [100_002, 52, 30, 70_000]


@pytest.mark.usefixtures("builder")
def test_snapped_packets_keep_sequence_numbers_and_ip_checksums(tmp_path: Path) -> None:
    path = tmp_path / "scoped.pcapng"
    _scoped_capture(path)
    _, packets, damage = parse(path.read_bytes())
    assert damage is None
    next_seq: dict[tuple[object, ...], int] = {}
    skipped: dict[tuple[object, ...], int] = {}  # per upstream-leg direction: bytes not written
    snapped_packets = 0
    for packet in packets:
        ether = Ether(packet.data)
        ip, tcp = ether[IP], ether[TCP]
        recomputed = IP(bytes(ip)[:20])
        del recomputed.chksum
        assert ip.chksum == IP(bytes(recomputed)).chksum
        length = ip.len - 40  # the segment's payload on the wire, captured or not
        if packet.original_length is not None:
            snapped_packets += 1
            assert packet.interface == 0  # format 6: the client leg only
            assert packet.original_length == 14 + ip.len and tcp.chksum == 0  # not computable
        key = (packet.interface, ip.src, tcp.sport, ip.dst, tcp.dport)
        if key in next_seq:
            skipped[key] = skipped.get(key, 0) + tcp.seq - next_seq[key]
        next_seq[key] = tcp.seq + length + (1 if tcp.flags & 0x03 else 0)
    # 100 KB and 70 KB frames span two packets, the others one: 6 packets on the client leg.
    assert snapped_packets == 6
    # The client leg's streams are contiguous; the upstream leg's skip exactly the header-only
    # frames: the two Produce requests and their responses (as `_scoped_capture` sends them).
    requests = len(_opaque(8, b"\x07" * 100_000)) + len(_opaque(9, b"\x05" * 50))
    responses = 8 + 30 + 8 + 70_000
    assert sorted(value for key, value in skipped.items() if key[0] == 0) == [0, 0]
    assert sorted(value for key, value in skipped.items() if key[0] == 1) == [responses, requests]


@pytest.mark.parametrize("size", [96, 70_000])
@pytest.mark.parametrize("to_server", [True, False])
def test_lanes_write_what_frame_by_frame_writes(
    monkeypatch: pytest.MonkeyPatch, size: int, to_server: bool
) -> None:
    """A run of 40 equal sizes through the lanes and frame by frame, the sequence number
    wrapping past 2**32 inside the run: the same bytes, the same next sequence number."""
    layout, captured = (REQUEST_HEADS, 12) if to_server else (RESPONSE_HEADS, 8)
    values = [(size, 0, 7, 1000 + i) if to_server else (size, 1000 + i) for i in range(40)]
    heads = b"".join(layout.pack(*row) for row in values)
    written = []
    for lanes_from in (8, 10_000):
        monkeypatch.setattr(snapped, "_LANES_FROM", lanes_from)
        stream = new_stream(5, 1, 2)
        stream.client_seq = stream.server_seq = (1 << 32) - 10 * (4 + size)
        blocks = snapped.header_only_blocks(
            stream, 1, to_server, 123 << 32 | 456, heads, layout.size, captured
        )
        written.append((bytes(blocks), stream.client_seq, stream.server_seq))
    assert written[0] == written[1]
    blocks = written[0][0]
    assert blocks.count(heads[:captured]) == 1 and blocks.count(heads[-layout.size :][:captured]) == 1


@pytest.mark.parametrize("size", [96, 70_000])
@pytest.mark.parametrize("to_server", [True, False])
def test_one_frame_at_a_time_writes_what_a_run_writes(
    monkeypatch: pytest.MonkeyPatch, size: int, to_server: bool
) -> None:
    """A frame per call (its own fast path: a client sending one request at a time) and the same
    frames as one run patched frame by frame, across the sequence number's wrap: the same bytes."""
    monkeypatch.setattr(snapped, "_LANES_FROM", 10_000)
    layout = REQUEST_HEADS if to_server else RESPONSE_HEADS
    heads = [
        layout.pack(size, 0, 7, 1000 + i) if to_server else layout.pack(size, 1000 + i) for i in range(12)
    ]
    written = []
    for runs in ([b"".join(heads)], heads):
        stream = new_stream(5, 1, 2)
        stream.client_seq = stream.server_seq = (1 << 32) - 5 * (4 + size)
        blocks = b"".join(
            snapped.header_only_blocks(stream, 1, to_server, 123 << 32 | 456, run, layout.size, layout.size)
            for run in runs
        )
        written.append((blocks, stream.client_seq, stream.server_seq))
    assert written[0] == written[1]
    assert all(written[0][0].count(head) == 1 for head in heads)


@pytest.mark.usefixtures("builder")
def test_the_backlog_of_header_only_runs_drains_to_zero(tmp_path: Path) -> None:
    """The server pauses clients on `backlog_bytes`: for header-only runs the proxy must count
    what the writer process reports written for them (it counted a third of it, and the backlog
    went negative: a slow writer never paused anyone)."""
    writer = CaptureWriter(tmp_path / "c.pcapng", upstream="broker:9092", record_scope=RecordScope.GROUP)
    assert writer.wait_ready()
    session = ProxySession(1, record=True, record_api_keys=RecordScope.GROUP.api_keys)
    writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")
    requests = b"".join(_opaque(i, b"\x01" * 90) for i in range(50))
    runs = [c for c in session.client_data(requests, 2_000) if type(c) is tuple]
    assert len(runs) == 1
    writer.record_event(runs[0])
    deadline = 600  # polls of 0.1 s: the writer process may be slow on a loaded machine
    while writer.written_bytes < writer.queued_bytes and deadline:
        writer.flush()  # no event loop here: the caller hands over and reads the writer's reports
        time.sleep(0.1)
        deadline -= 1
    # One packed run (`layouts.HEADER_RUN` + its heads), counted as the writer process reports it.
    assert writer.queued_bytes == HEADER_RUN.size + 50 * REQUEST_HEADS.size and writer.backlog_bytes == 0
    writer.close()


def _mixed_capture(path: Path, packed: bool) -> None:
    """Group scope as the server records it: `packed`, the session packs its header-only runs onto
    the writer's `header_runs` (one bytes command before a Record; `after_read` after each read);
    else it emits them as HEADERS commands. Reads mix header-only frames and group frames."""
    writer = CaptureWriter(path, upstream="broker:9092", record_scope=RecordScope.GROUP)
    session = ProxySession(
        1,
        record=True,
        record_api_keys=RecordScope.GROUP.api_keys,
        header_runs=writer.header_runs if packed else None,
    )
    writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")

    def run(commands: list[object]) -> None:
        _hand_over(writer, commands)

    run(session.client_data(_opaque(1, b"a" * 40) + _heartbeat(2) + _opaque(3, b"b" * 50), 2_000))
    run(session.client_data(_opaque(4, b"c" * 60) + _opaque(5, b"d" * 60), 2_100))
    responses = [frame(cid.to_bytes(4, "big") + b"\x00" * (10 * cid)) for cid in (1, 2, 3, 4, 5)]
    run(session.upstream_data(b"".join(responses[:3]), 3_000))
    run(session.client_data(_join(6), 3_100))
    run(session.upstream_data(b"".join(responses[3:]), 3_200))
    # Runs of equal sizes (the writer takes their heads at the frames' stride), even and odd.
    run(session.client_data(b"".join(_opaque(cid, b"e" * 90) for cid in range(7, 13)), 3_300))
    run(session.client_data(b"".join(_opaque(cid, b"o" * 91) for cid in range(13, 18)), 3_400))
    run(
        session.upstream_data(
            b"".join(frame(cid.to_bytes(4, "big") + b"\x01" * 8) for cid in range(6, 18)), 3_500
        )
    )
    writer.close_connection(1, 4_000, "done", 0, 0)
    writer.close()


@pytest.mark.usefixtures("builder")
def test_runs_packed_by_the_session_write_what_headers_commands_write(tmp_path: Path) -> None:
    """The server's sessions pack header-only runs onto the writer (`header_runs`) instead of a
    HEADERS command per read, small frames whole (the writer takes their heads): the capture holds
    the same frames, in the same order, with the same timestamps and TCP streams (a run after a
    group frame in the same read stays after it), byte for byte."""
    _mixed_capture(tmp_path / "packed.pcapng", packed=True)
    _mixed_capture(tmp_path / "plain.pcapng", packed=False)
    fields = _fields(tmp_path / "plain.pcapng")
    assert [(f[0], f[1], f[5]) for f in fields if f[0] == "client"] == [
        ("client", "request", 1),
        ("client", "request", 2),
        ("client", "request", 3),
        ("client", "request", 4),
        ("client", "request", 5),
        ("client", "response", 1),
        ("client", "response", 2),
        ("client", "response", 3),
        ("client", "request", 6),
        ("client", "response", 4),
        ("client", "response", 5),
        *[("client", "request", cid) for cid in range(7, 18)],
        *[("client", "response", cid) for cid in range(6, 18)],
    ]
    assert _fields(tmp_path / "packed.pcapng") == fields
    assert (tmp_path / "packed.pcapng").read_bytes() == (tmp_path / "plain.pcapng").read_bytes()


@pytest.mark.skipif(_snapped is None, reason="proxy.capture._snapped is not built")
def test_the_c_builder_writes_the_python_builders_captures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The captures above, written through the writer process with each builder: byte for byte."""
    written: dict[str, list[bytes]] = {}
    for name in ("python", "native"):
        monkeypatch.setenv("GROUP_REPLAY_CAPTURE_BUILDER", name)
        _pack_runs_with(monkeypatch, name)
        _scoped_capture(tmp_path / f"{name}-scoped.pcapng")
        _mixed_capture(tmp_path / f"{name}-packed.pcapng", packed=True)
        written[name] = [(tmp_path / f"{name}-{kind}.pcapng").read_bytes() for kind in ("scoped", "packed")]
    assert written["native"] == written["python"]
