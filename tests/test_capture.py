"""Capture files: round trip through the capture writer and the reader; damage; kill -9; checksums."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP
from scapy.layers.l2 import Ether

from proxy.capture import CAPTURE_FORMAT_VERSION
from proxy.capture.pcapng import parse
from proxy.capture.reader import exchanges, read_capture
from proxy.capture.writer import CaptureWriter
from proxy.session import ProxySession, Record
from tests.test_proxy_session import _heartbeat, _join, _opaque


def _records(session: ProxySession, wire: bytes, ts: int) -> list[Record]:
    return [c for c in session.client_data(wire, ts) if isinstance(c, Record)]


def _write(path: Path) -> None:
    writer = CaptureWriter(path, upstream="broker:9092")
    session = ProxySession(3, record=True)
    writer.open_connection(3, 1, "127.0.0.1:5555", "broker:9092")
    for record in _records(session, _join(1) + _opaque(2, b"z" * 150_000) + _heartbeat(3), 10):
        writer.record(record)
    response = (1).to_bytes(4, "big") + b"\x00" * 30
    sasl = (2).to_bytes(2, "big") + b"\x00"  # not a real body; only its length is recorded
    for command in session.upstream_data(len(response).to_bytes(4, "big") + response, 20):
        if isinstance(command, Record):
            writer.record(command)
    sasl_session = ProxySession(4, record=True)
    sasl_request = (36).to_bytes(2, "big") + (1).to_bytes(2, "big") + (9).to_bytes(4, "big") + b"\xff\xff"
    sasl_request += b"secret-password" + sasl
    for record in _records(sasl_session, len(sasl_request).to_bytes(4, "big") + sasl_request, 30):
        writer.record(record)
    writer.close_connection(3, 40, "client closed")
    writer.close()


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "c.pcapng"
    _write(path)
    capture = read_capture(path)
    assert capture.damage is None
    assert (
        capture.header["upstream"] == "broker:9092"
        and capture.header["format_version"] == CAPTURE_FORMAT_VERSION
    )
    assert capture.group_settings is None  # the writer was not given any
    client = [f for f in capture.frames if f.leg == "client"]
    upstream = [f for f in capture.frames if f.leg == "upstream"]
    assert [(f.conn, f.direction, f.api_key, f.correlation_id) for f in client] == [
        (3, "request", 11, 1),
        (3, "request", 0, 2),
        (3, "request", 12, 3),
        (3, "response", 11, 1),
        (4, "request", 36, 9),
    ]
    assert [f.payload for f in upstream] == [f.payload for f in client]
    assert client[1].payload[-150_000:] == b"z" * 150_000  # split over three TCP segments
    assert client[0].group_id == "g1" and client[0].client_id == "c1"
    assert client[4].redacted_body_bytes == len(b"secret-password") + 3
    assert b"secret-password" not in path.read_bytes()
    assert capture.connections[3].client == "127.0.0.1:5555"
    assert capture.connections[3].close_reason == "client closed"
    [join, produce, heartbeat, sasl] = exchanges(capture)
    assert join.response is not None and produce.response is None
    entity, response = heartbeat.decode()
    assert entity.group_id == "g1" and response is None
    assert join.request.api_version == 5 and sasl.request.redacted_body_bytes


def test_packets_have_valid_checksums_and_sequence_numbers(tmp_path: Path) -> None:
    path = tmp_path / "c.pcapng"
    _write(path)
    _, packets, _ = parse(path.read_bytes())
    next_seq: dict[tuple[int, str, int, str, int], int] = {}
    for packet in packets:
        ether = Ether(packet.data)
        ip, tcp = ether[IP], ether[TCP]
        recomputed = Ether(bytes(_without_checksums(ether)))
        assert (ip.chksum, tcp.chksum) == (recomputed[IP].chksum, recomputed[TCP].chksum)
        key = (packet.interface, ip.src, tcp.sport, ip.dst, tcp.dport)
        if key in next_seq:
            assert tcp.seq == next_seq[key]
        advance = len(bytes(tcp.payload)) + (1 if tcp.flags & 0x03 else 0)
        next_seq[key] = tcp.seq + advance


def _without_checksums(ether: Ether) -> Ether:
    copy = ether.copy()
    del copy[IP].chksum
    del copy[TCP].chksum
    return copy


def test_truncated_capture_is_read_up_to_the_damage(tmp_path: Path) -> None:
    path = tmp_path / "c.pcapng"
    _write(path)
    whole = read_capture(path)
    data = path.read_bytes()
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(data[: len(data) * 2 // 3])
    capture = read_capture(cut)
    assert capture.damage is not None and "truncated" in capture.damage
    assert 0 < len(capture.frames) < len(whole.frames)
    assert capture.frames == whole.frames[: len(capture.frames)]


_KILL_SCRIPT = """
import sys, time
from proxy.capture.writer import CaptureWriter
from proxy.session import ProxySession, Record
from tests.test_proxy_session import _heartbeat
writer = CaptureWriter(sys.argv[1], upstream="broker:9092")
session = ProxySession(1, record=True)
i = 0
while True:
    i += 1
    for c in session.client_data(_heartbeat(i), i):
        if isinstance(c, Record):
            writer.record(c)
    if i % 50 == 0:
        print(i, flush=True)
        time.sleep(0.01)
"""


def test_capture_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "killed.pcapng"
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen(
        [sys.executable, "-c", _KILL_SCRIPT, str(path)], cwd=root, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if int(line) >= 500:
                break
        deadline = time.monotonic() + 30
        while path.stat().st_size < 20_000 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    capture = read_capture(path)
    assert len(capture.frames) > 100
    client = [f for f in capture.frames if f.leg == "client"]
    assert [f.correlation_id for f in client] == list(range(1, len(client) + 1))


def test_not_a_capture(tmp_path: Path) -> None:
    from proxy.capture.reader import CaptureFormatError

    path = tmp_path / "x.pcapng"
    path.write_bytes(b"hello world, not pcapng")
    with pytest.raises(CaptureFormatError):
        read_capture(path)
