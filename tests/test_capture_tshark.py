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
