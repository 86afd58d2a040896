"""The capture writer process's scheduling class and the hand-over without a per-batch timer
(issue 12: recording must not slow the relay).

- The writer process runs at SCHED_IDLE (`proxy.capture.priority.Priority`), or at SCHED_OTHER
  when `GROUP_REPLAY_CAPTURE_PRIORITY=normal` says so; a read that finds the pipe full moves it
  back to SCHED_OTHER where the process may (root may), and a nearly empty one to SCHED_IDLE.
- A batch is handed over by the first read `_GATHER_S` after it started; what no later read comes
  to take (the last reads of a burst) is handed over by the fallback timer, on the running loop.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from proxy.capture import writer as writer_module
from proxy.capture.header import RecordScope
from proxy.capture.priority import PRIORITY_VARIABLE
from proxy.capture.reader import read_capture
from proxy.capture.writer import CaptureWriter
from proxy.session import ProxySession
from tests.test_proxy_session import _opaque

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="Linux scheduling classes only")


def _writer_policy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str | None) -> int:
    if value is None:
        monkeypatch.delenv(PRIORITY_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(PRIORITY_VARIABLE, value)
    writer = CaptureWriter(tmp_path / "c.pcapng", upstream="broker:9092")
    try:
        assert writer.wait_ready()
        return os.sched_getscheduler(writer._process.pid)
    finally:
        writer.close()


def test_the_writer_process_runs_at_sched_idle_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _writer_policy(tmp_path, monkeypatch, None) == os.SCHED_IDLE
    assert _writer_policy(tmp_path, monkeypatch, "normal") == os.SCHED_OTHER


def test_a_full_pipe_moves_the_writer_to_sched_other_and_a_drained_one_back() -> None:
    """In a child process (this one keeps its class): idle at the start, normal when a read
    filled the buffer (the pipe held at least as much: behind), idle again once a read finds
    under an eighth of it. Where leaving SCHED_IDLE is refused (no CAP_SYS_NICE), it stays idle
    and does not ask again."""
    script = (
        "import os\n"
        "from proxy.capture.priority import Priority\n"
        "p = Priority(True)\n"
        "seen = [os.sched_getscheduler(0)]\n"
        "p.after_read(1 << 20, 1 << 20)\n"
        "seen.append(os.sched_getscheduler(0))\n"
        "p.after_read(1 << 19, 1 << 20)\n"  # half full: still behind enough to stay
        "seen.append(os.sched_getscheduler(0))\n"
        "p.after_read(100, 1 << 20)\n"
        "seen.append(os.sched_getscheduler(0))\n"
        "print(*seen, p.can_leave)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True, timeout=60
    ).stdout.split()
    idle, other = str(os.SCHED_IDLE), str(os.SCHED_OTHER)
    if os.geteuid() == 0:
        assert out == [idle, other, other, idle, "True"]
    else:  # pragma: no cover - CI and the developers' machines run as root
        assert out[:4] == [idle, idle, idle, idle]


def test_the_last_reads_of_a_burst_reach_the_file_without_another_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads stop with a batch open: the fallback timer hands it over, and the writer process
    writes it, while the proxy stays open (no `flush`, no `close`)."""
    monkeypatch.setattr(writer_module, "_FALLBACK_S", 0.05)
    path = tmp_path / "c.pcapng"

    async def burst() -> int:
        writer = CaptureWriter(path, upstream="broker:9092", record_scope=RecordScope.GROUP)
        assert await asyncio.to_thread(writer.wait_ready)
        session = ProxySession(
            1, record=True, record_api_keys=RecordScope.GROUP.api_keys, header_runs=writer.header_runs
        )
        writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")
        for correlation_id in range(3):
            session.client_data(_opaque(correlation_id, b"\x07" * 100), 2_000 + correlation_id)
            writer.after_read()
        queued = writer.queued_bytes
        assert queued > 0 and writer.written_bytes < queued  # nothing handed over yet: _GATHER_S not up
        for _ in range(100):  # up to 5 s on a loaded machine; the timer fires after 50 ms
            await asyncio.sleep(0.05)
            if writer.written_bytes >= queued:
                break
        written = writer.written_bytes
        writer.close()
        return written - queued

    assert asyncio.run(burst()) >= 0
    frames = read_capture(path).frames
    assert [f.correlation_id for f in frames if f.direction == "request" and f.leg == "client"] == [0, 1, 2]


def test_a_read_after_the_gather_time_hands_the_batch_over_without_the_timer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The hand-over under load: the first read `_GATHER_S` after a batch began takes it, long
    before the fallback timer (set to an hour here) would."""
    monkeypatch.setattr(writer_module, "_FALLBACK_S", 3600.0)
    path = tmp_path / "c.pcapng"

    async def reads() -> tuple[int, int]:
        writer = CaptureWriter(path, upstream="broker:9092", record_scope=RecordScope.GROUP)
        assert await asyncio.to_thread(writer.wait_ready)
        session = ProxySession(
            1, record=True, record_api_keys=RecordScope.GROUP.api_keys, header_runs=writer.header_runs
        )
        writer.open_connection(1, 1_000, "127.0.0.1:40000", "broker:9092")
        session.client_data(_opaque(1, b"\x07" * 100), 2_000)
        writer.after_read()
        await asyncio.sleep(writer_module._GATHER_S * 2)
        session.client_data(_opaque(2, b"\x07" * 100), 3_000)
        writer.after_read()  # due: hands over both runs
        handed = writer._queued
        for _ in range(100):
            await asyncio.sleep(0.05)
            if writer.written_bytes >= handed:
                break
        written = writer.written_bytes
        writer.close()
        return handed, written

    handed, written = asyncio.run(reads())
    assert handed > 0 and written >= handed
