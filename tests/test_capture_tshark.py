"""Wireshark's own Kafka dissector reads our captures (skipped when tshark is not installed)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from proxy.capture.writer import CaptureWriter
from proxy.session import ProxySession, Record
from tests.test_proxy_session import _heartbeat, _join

TSHARK = shutil.which("tshark")


def tshark_fields(path: Path, display_filter: str, *fields: str) -> list[list[str]]:
    assert TSHARK is not None
    cmd = [TSHARK, "-n", "-r", str(path), "-Y", display_filter, "-T", "fields"]
    for name in fields:
        cmd += ["-e", name]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return [line.split("\t") for line in out.splitlines() if line.strip()]


@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed (.ci/system-packages.sh installs it)")
def test_tshark_dissects_join_group_v5(tmp_path: Path) -> None:
    path = tmp_path / "c.pcapng"
    writer = CaptureWriter(path, upstream="broker:9092")
    session = ProxySession(1, record=True)
    writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")
    for command in session.client_data(_join(7) + _heartbeat(8), 2_000):
        if isinstance(command, Record):
            writer.record(command)
    writer.close()
    rows = tshark_fields(
        path,
        "kafka.api_key == 11",
        "frame.interface_name",
        "kafka.api_key",
        "kafka.api_version",
        "kafka.correlation_id",
        "frame.comment",
    )
    # Both frames were relayed back to back, so they share one packet (one comment each) and
    # tshark lists both PDUs' fields in that packet's row.
    assert [row[0] for row in rows] == ["client", "upstream"]
    for row in rows:
        pdus = list(zip(row[1].split(","), row[2].split(","), row[3].split(","), strict=True))
        assert pdus == [("11", "5", "7"), ("12", "4", "8")]
        assert '"api_key":11' in row[4] and '"api_key":12' in row[4]


def test_header_only_frames_keep_their_length_and_the_group_frames_decode(tmp_path: Path) -> None:
    """Record scope group (issue 12): a Produce frame (one of 100 KB: several packets) is written
    as its header in packets that keep the frame's original length. Our reader counts it, header
    only, and reads the group frames around it; tshark (when installed) opens the file, shows the
    Produce packets truncated (captured < original length) and still dissects the JoinGroup and
    the Heartbeat after it."""
    from proxy.capture.header import RecordScope
    from proxy.capture.reader import read_capture
    from tests.test_proxy_session import _opaque

    path = tmp_path / "scoped.pcapng"
    writer = CaptureWriter(path, upstream="broker:9092", record_scope=RecordScope.GROUP)
    session = ProxySession(1, record=True, record_api_keys=RecordScope.GROUP.api_keys)
    writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")
    produce = _opaque(8, b"\x07" * 100_000)
    small = _opaque(9, b"\x05" * 50)
    for command in session.client_data(_join(7) + produce + small + _heartbeat(10), 2_000):
        if isinstance(command, Record):
            writer.record(command)
        elif type(command) is tuple:  # the header-only run
            writer.record_event(command)
    writer.close_connection(1, 3_000, "done", len(produce), 0)
    writer.close()
    capture = read_capture(path)
    assert capture.damage is None
    client = [f for f in capture.frames if f.leg == "client"]
    assert [(f.api_key, f.correlation_id, f.header_only) for f in client] == [
        (11, 7, False), (0, 8, True), (0, 9, True), (12, 10, False),
    ]  # fmt: skip
    assert client[1].payload == produce[4:12] and 8 + (client[1].omitted_body_bytes or 0) == len(produce) - 4
    assert capture.connections[1].client_bytes == len(produce)
    if TSHARK is None:
        return
    rows = tshark_fields(
        path, "frame.interface_name == client", "frame.len", "frame.cap_len", "kafka.api_key"
    )
    snapped = [row for row in rows if int(row[0]) > int(row[1])]
    # The 100 KB Produce spans two packets (65,000 bytes of payload each at most), the small one one.
    assert len(snapped) == 3, rows
    assert sum(int(row[0]) - 54 for row in snapped) == len(produce) + len(small)
    keys = [key for row in rows for key in row[2].split(",") if key]
    assert "11" in keys and "12" in keys, rows
