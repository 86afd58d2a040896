"""The capture writer: Kafka frames -> synthesized TCP packets in pcapng, off the event loop.

What the file holds and how the packets are built: `proxy.capture.packets`.

The event loop gathers the frames of about 20 ms (`_GATHER_S`, checked at each read, with a 40 ms
fallback timer for the last reads of a burst; or at most 4,096 items or 256 KiB) in a plain list,
marshals them (plain tuples of ints, strings and bytes: a C-level copy) and writes them to a pipe
without blocking; `python -m proxy.capture.writer`, a process of its own, builds the packets,
checksums, comments and blocks (`proxy.capture.packets.Synthesizer`), appends them to the file and
flushes after each batch. That work needs microseconds per frame and ~100 us of checksum per
64 KB: in its own process it runs on another core, never holds the proxy's GIL, and runs at
SCHED_IDLE while it keeps up (`proxy.capture.priority`: it never preempts the relay or its
neighbours). Design section 3's "one background thread,
never block the event loop" is that process: the proxy itself runs no thread for the capture
(a sender thread woken per read, and a thread reading the writer's reports, each took the GIL
from the event loop once per batch, and the event loop then waited for them to give it back).
A pipe too full to take a batch keeps the rest in memory and writes it when the pipe drains
(`loop.add_writer`). A killed proxy leaves a file readable up to the last whole block: the
writer process sees its input close and writes everything it was sent before it exits. The
writer process reports how much it has written (read by the event loop at each hand-over); the
server stops reading clients while the backlog is high (`backlog_bytes`). Without a running
event loop (scripts, tests) the batch is written when it is 50 ms old at the next record, and
at `flush()` and `close()`.

Per batch, what recording costs beyond the frames is mostly waking processes on this 2-core VM
(bench/README.md, "Where the writer's ~200 us per batch went"): so the event loop reads the
writer's reports every 8th hand-over, not when they arrive (`add_reader` woke it once more per
batch), and the writer process takes everything the pipe holds in one read, and writes the
blocks of all of it with one `writev` and one report.

Group scope's header-only runs (most of what it records) cost the event loop no command and no
call of their own per read: the server's sessions pack them onto `header_runs`
(`layouts.HEADER_RUN` + heads, walked out of a read's frames in C: `append_heads`), which a batch
carries as one bytes item (marshal took ~0.3 us per run tuple); `after_read` starts the batch. A
session emits what `header_runs` holds as one bytes command before a Record, so the writer sees
each connection's frames in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import marshal
import operator
import os
import select
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from proxy.capture.header import (
    GroupSettings,
    RecordScope,
    encode_section_header,
    tool_version,
)
from proxy.capture.priority import Priority
from proxy.commands import Closed, Opened
from proxy.layouts import CLOSE, HEADER_RUN, HEADS, OPEN, R_CLIENT_PAYLOAD, Record

# ---------------------------------------------------------------------------------------------
# The proxy side: a list per ~20 ms, written to the writer process's pipe without blocking

_LENGTH = struct.Struct("<I")
_CLIENT_PAYLOAD = operator.itemgetter(R_CLIENT_PAYLOAD)
# b"W" + payload bytes written so far; b"E" + length of an error text; b"R", 0: ready (imported)
_ACK = struct.Struct("<cq")
# A backlog above this is worth a read of the writer's reports before it is answered (the server
# pauses clients at 64 MiB and resumes them at 16 MiB); below it the last hand-over's is fresh enough.
_FRESH_FROM = 1 << 20
_BATCH_ITEMS = 4096
_HEADER_RUN_PACK = HEADER_RUN.pack
# Hand-overs per read of the writer's reports (a syscall, ~20-40 us of CPU on the shared VM, for
# 9 bytes): the backlog check reads them itself once the backlog passes `_FRESH_FROM`. Every 2nd
# of ~20 ms hand-overs keeps the backlog seen under `_FRESH_FROM` at full speed.
_REPORTS_EVERY = 2
# A batch is handed over ~20 ms after it began: each hand-over wakes the writer process, and on
# the 2-core bench VM a process woken 500 times a second (the old 2 ms) cost the relay one frame
# at a time ~20% by itself, 100 times ~5%, 20 times ~1% (bench/README.md, "the writer at
# SCHED_IDLE"). The capture trails the relay by that much.
_GATHER_S = 0.02
# The hand-over is checked at each read (`after_read`: a clock read, no timer); the fallback timer
# only hands over a batch that no later read came to take (the last reads of a burst). It is armed
# at most once per `_FALLBACK_S` and never cancelled (a timer armed and cancelled per batch
# measured 0.81x of the unrecorded proxy one frame at a time, against 0.85-0.88x without it).
_FALLBACK_S = 0.04
_GATHER_WITHOUT_LOOP_S = 0.05  # a script's records: fewer, bigger batches (what one read sends, together)
# A batch is handed over at this size too: well under the pipe's 1 MiB, so that a writer read of
# a whole 1 MiB means it has fallen behind (`proxy.capture.priority`), not one big batch.
_BATCH_BYTES = 1 << 18
_PIPE_BYTES = 1 << 20
_READ_BYTES = 1 << 16
_WRITER_READ_BYTES = _PIPE_BYTES  # the writer process's read: whatever the pipe holds, at once
_IOV_MAX = 1024  # buffers per writev (Linux's IOV_MAX)


class CaptureWriter:
    """Writes a capture file from proxy `Record`s without taking the event loop's CPU.

    The event loop appends each read's items (a Record, a list of them, a header-only run, a
    connection event) to a list; about every 20 ms (the first read after it, or the fallback
    timer) the list is marshalled and written to a writer process (`python -m proxy.capture.writer`) without
    blocking, which synthesizes the packets, writes them and flushes after every batch, so a
    killed proxy leaves a file readable up to the last whole block. The synthesis, the TCP
    checksums and the JSON comments therefore run on another core and never hold the proxy's
    GIL. The writer process reports the payload bytes written after each batch; `backlog_bytes`
    is what the proxy has handed over beyond that, and the server stops reading clients when it
    is high. One thread records (the event loop's, or a caller without one).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        upstream: str,
        policy: str = "pass-through",
        group_settings: GroupSettings | None = None,
        record_scope: RecordScope = RecordScope.ALL,
    ) -> None:
        # Absolute: the writer process runs in the package's directory, not the caller's.
        self.path = Path(path).absolute()
        # The header states the scope; `proxy.server` records what this says (one source).
        self.record_scope = RecordScope(record_scope)
        comment = encode_section_header(
            tool_version=tool_version(),
            upstream=upstream,
            policy=policy,
            group_settings=group_settings,
            record_scope=self.record_scope,
        )
        self.path.open("wb").close()  # fails here, in the caller, on a bad path
        self._queued = 0  # bytes handed over or sealed for it (`queued_bytes`: also the packed runs)
        self._written_bytes = 0  # reported by the writer process, as last read
        self.error: BaseException | None = None
        self._dead = False
        self._closed = False
        self._ready = False
        self._pending: list[Any] = []  # tuples, Records, lists of Records
        self._pending_records = 0  # Records and lists among them (marshal takes plain tuples only)
        self._pending_mark = 0  # queued_bytes when the pending list was last handed over
        # Header-only runs since the last other item, packed (`layouts.HEADER_RUN`): one bytes
        # item of the batch, however many runs (a tuple each cost marshal ~0.3 us per read). The
        # server's sessions pack their runs straight onto it (`header_runs`).
        self._runs = self.header_runs = bytearray()
        self._batch_open = False  # a batch was started (its hand-over is due: timer or `_due`)
        self._handovers = 0  # flushes since the writer's reports were last read
        self._due = 0.0  # without an event loop: when the pending list is handed over
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop batches are handed over on
        self._unsent = bytearray()  # what the pipe would not take yet
        self._reports = bytearray()  # the writer process's reports, not yet parsed
        self._process = subprocess.Popen(
            [sys.executable, "-m", "proxy.capture.writer", str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_package_root(),
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        self._to_writer = self._process.stdin.fileno()
        self._from_writer = self._process.stdout.fileno()
        _grow_pipe(self._to_writer)
        # The writer process writes the section header and interfaces before anything else.
        self._send([marshal.dumps(comment)])
        os.set_blocking(self._to_writer, False)
        os.set_blocking(self._from_writer, False)

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Blocks until the writer process has started (imported scapy: about a CPU second) and
        written the section header, or died; the proxy waits for it before it listens, so that
        start-up does not compete with the first clients' traffic for the CPU. False on timeout."""
        deadline = time.monotonic() + timeout_s
        while not (self._ready or self._dead):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            select.select([self._from_writer], [], [], remaining)
            self._read_reports()
        return True

    # -- called from the event loop: cheap, never blocks ----------------------------------------

    @property
    def queue_depth(self) -> int:
        """Items (frames, events, packed header-only runs) gathered for the next batch."""
        return len(self._pending) + (1 if self._runs else 0)

    @property
    def queued_bytes(self) -> int:
        """Bytes of frames recorded (a header-only run's: its HEADER_RUN and heads), as the writer
        process reports them written."""
        return self._queued + len(self._runs)

    @property
    def written_bytes(self) -> int:
        """Payload bytes the writer process has reported written (its reports read now)."""
        if not self._dead:
            self._read_reports()
        return self._written_bytes

    @property
    def backlog_bytes(self) -> int:
        """Handed over but not reported written: as of the last hand-over while that is small
        (checked after every read: no syscall), read fresh when it is large enough to matter."""
        if self._dead:
            return 0
        backlog = self._queued - self._written_bytes
        if backlog < _FRESH_FROM:
            return backlog
        self._read_reports()
        return 0 if self._dead else self._queued - self._written_bytes

    def open_connection(self, conn: int, ts_ns: int, client: str, upstream: str) -> None:
        self._add((OPEN, conn, ts_ns, client, upstream))

    def record(self, record: Record) -> None:
        self._queued += len(record.client_payload)
        self._pending_records += 1
        self._add(record)

    def record_many(self, records: list[Record]) -> None:
        """Several records as one item (the proxy's commands after a read)."""
        self._queued += sum(map(len, map(_CLIENT_PAYLOAD, records)))
        self._pending_records += 1
        self._add(records)

    def close_connection(
        self, conn: int, ts_ns: int, reason: str, client_bytes: int = 0, upstream_bytes: int = 0
    ) -> None:
        self._add((CLOSE, conn, ts_ns, reason, client_bytes, upstream_bytes))

    def record_event(self, command: Opened | Closed | tuple[Any, ...] | bytes) -> None:
        """A session's Opened, Closed or header-only runs (a `layouts.HEADERS` tuple, or runs
        packed by a session given `header_runs`) command (the capture is the stream of session
        commands)."""
        if type(command) is bytes:
            self.record_runs(command)
            return
        if type(command) is tuple:
            self.record_heads(command)
            return
        match command:
            case Opened(conn=conn, ts_ns=ts_ns, client=client, upstream=upstream):
                self.open_connection(conn, ts_ns, client, upstream)
            case Closed(conn=conn, ts_ns=ts_ns, reason=reason):
                self.close_connection(conn, ts_ns, reason, command.client_bytes, command.upstream_bytes)

    def record_heads(self, run: tuple[Any, ...]) -> None:
        """A header-only run (`layouts.HEADERS`), packed onto the batch's runs (`HEADER_RUN`)."""
        _, conn, ts_ns, direction, _, heads = run
        runs = self._runs
        runs += _HEADER_RUN_PACK(conn, ts_ns, len(heads) if direction == "request" else -len(heads), HEADS)
        runs += heads
        self.after_read()

    def record_runs(self, packed: bytes) -> None:
        """Header-only runs a session took off `header_runs` (all of them: it leaves it empty)
        to hand them over in order with its Records."""
        self._queued += len(packed)  # what the writer process reports written for them
        self._add(packed)

    def after_read(self) -> int:
        """Called by the server after each read's commands (a few attribute checks: this runs per
        read): starts a batch for runs the sessions packed onto `header_runs`, hands over a full
        one; returns `backlog_bytes`."""
        runs = self._runs
        if runs:
            if not self._batch_open:
                self._schedule()
            elif len(runs) >= _BATCH_BYTES or time.monotonic() >= self._due:
                self.flush()
        backlog = self._queued - self._written_bytes
        return backlog if backlog < _FRESH_FROM else self.backlog_bytes

    def _seal(self) -> None:
        """The packed runs so far become one item of the batch (before the next item: the order)."""
        runs = self._runs
        if runs:
            self._queued += len(runs)  # what the writer process reports written for them
            self._pending.append(bytes(runs))
            runs.clear()

    def _add(self, item: Any) -> None:
        pending = self._pending
        if self._runs:
            self._seal()  # the runs so far go first: the writer keeps each connection's order
        pending.append(item)
        if not self._batch_open:
            self._schedule()
        elif (
            len(pending) >= _BATCH_ITEMS
            or self._queued - self._pending_mark >= _BATCH_BYTES
            or time.monotonic() >= self._due
        ):
            self.flush()

    def _schedule(self) -> None:
        """A new batch was started: the first read or record `_GATHER_S` after it hands it over
        (`_due`); on a running loop the fallback timer hands over what no read came to take."""
        self._batch_open = True
        loop = _running_loop()
        if loop is None:  # no event loop: the next record after `_due` hands the batch over
            self._due = time.monotonic() + _GATHER_WITHOUT_LOOP_S
            return
        self._due = time.monotonic() + _GATHER_S
        if loop is not self._loop:
            self._use_loop(loop)
        if self._timer is None:
            self._timer = loop.call_later(_FALLBACK_S, self._fallback)

    def _fallback(self) -> None:
        """The fallback timer: a batch still open (no read since took it) is handed over now."""
        self._timer = None
        if self._batch_open and not self._closed:
            self.flush()

    def _use_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """Hand over on `loop` (a full pipe is drained by `loop.add_writer`). The writer's reports
        are read at each hand-over, not as they come: `add_reader` woke the event loop once more
        per batch for 9 bytes that only the backlog check needs, and it reads them itself when
        the backlog is large (`backlog_bytes`)."""
        old = self._loop
        if old is not None and not old.is_closed():
            with contextlib.suppress(RuntimeError):
                old.remove_writer(self._to_writer)
        self._loop = loop
        self._timer = None  # a timer on the old loop never fires here

    def flush(self) -> None:
        """Hand what was gathered to the writer process now. On the event loop this never blocks
        (`close` waits). It also reads the writer process's reports (`written_bytes`). The
        fallback timer stays armed: it fires once, finds no batch or a new one, and is re-armed by
        the next batch only."""
        self._batch_open = False
        self._handovers += 1
        if not self._dead and (self._handovers >= _REPORTS_EVERY or self._loop is None):
            self._handovers = 0
            self._read_reports()  # the last batches' reports (`written_bytes`, errors)
        self._seal()
        pending = self._pending
        if not pending:
            return
        self._pending = []
        self._pending_mark = self._queued
        if self._pending_records:
            self._pending_records = 0
            pending = _plain(pending)
        if not self._dead:
            self._send([marshal.dumps(pending)])

    def _send(self, messages: list[bytes]) -> None:
        """Length-prefixed messages down the pipe; what it does not take now waits in `_unsent`
        (written when the pipe drains: `_drain` on the event loop, else blocking at the next
        hand-over without a loop or at `close`)."""
        parts: list[bytes] = []
        for data in messages:
            parts += (_LENGTH.pack(len(data)), data)
        if self._unsent:
            self._unsent += b"".join(parts)
            return
        try:
            written = os.writev(self._to_writer, parts)
        except BlockingIOError:
            written = 0
        except OSError as exc:  # BrokenPipeError: the writer process is gone
            self._fail(exc)
            return
        total = sum(map(len, parts))
        if written == total:
            return
        self._unsent += b"".join(parts)[written:]
        loop = self._loop
        if loop is not None and _running_loop() is loop:
            loop.add_writer(self._to_writer, self._drain)
        else:  # no event loop to wait on: this thread waits
            self._drain(block=True)

    def _drain(self, block: bool = False) -> None:
        """Write what the pipe would not take before (`block`: all of it, waiting for the pipe)."""
        while self._unsent and not self._dead:
            if block:
                select.select([], [self._to_writer], [])
            try:
                written = os.write(self._to_writer, self._unsent)
            except BlockingIOError:
                if block:
                    continue
                return
            except OSError as exc:
                self._fail(exc)
                return
            del self._unsent[:written]
        if self._loop is not None and not self._loop.is_closed():
            self._loop.remove_writer(self._to_writer)

    def _read_reports(self) -> None:
        """Reads what the writer process reported so far (never blocks)."""
        try:
            data = os.read(self._from_writer, _READ_BYTES)
        except BlockingIOError:
            return
        except OSError as exc:
            self._fail(exc)
            return
        if not data:  # the writer process has exited
            self._fail(None)
            return
        reports = self._reports
        reports += data
        at = 0
        while len(reports) - at >= _ACK.size:
            kind, value = _ACK.unpack_from(reports, at)
            if kind == b"E":
                if len(reports) - at - _ACK.size < value:
                    break  # the error text is still on its way
                text = bytes(reports[at + _ACK.size : at + _ACK.size + value])
                self.error = self.error or RuntimeError(text.decode("utf-8", "replace"))
                at += value
            elif kind == b"W":
                self._written_bytes = value
            elif kind == b"R":
                self._ready = True
            at += _ACK.size
        del reports[:at]

    def _fail(self, exc: BaseException | None) -> None:
        """The writer process is gone (or its pipe broke): stop sending, report why."""
        self._dead = True
        self._unsent.clear()
        self.error = self.error or exc
        code = self._process.poll()
        if code not in (None, 0):
            self.error = self.error or RuntimeError(f"capture writer exited with {code}")
        loop = self._loop
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.remove_writer(self._to_writer)

    def close(self) -> None:
        """Write everything gathered, then close the file (blocks until the writer process is done)."""
        if self._closed:
            return
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()
        self._drain(block=True)
        loop, self._loop = self._loop, None
        if loop is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):
                loop.remove_writer(self._to_writer)
        with contextlib.suppress(OSError):
            assert self._process.stdin is not None
            self._process.stdin.close()
        os.set_blocking(self._from_writer, True)
        while not self._dead:
            self._read_reports()  # blocking now: until the writer process exits
        self._process.wait()
        if self._process.returncode != 0:
            self.error = self.error or RuntimeError(f"capture writer exited with {self._process.returncode}")
        assert self._process.stdout is not None
        self._process.stdout.close()


def _plain(items: list[Any]) -> list[tuple[Any, ...]]:
    """The batch as marshal takes it: Records (and lists of them) as plain tuples."""
    batch: list[tuple[Any, ...]] = []
    for item in items:
        kind = type(item)
        if kind is tuple or kind is bytes:
            batch.append(item)
        elif kind is list:
            batch += map(tuple, item)
        else:
            batch.append(tuple(item))
    return batch


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _package_root() -> str:
    return str(Path(__file__).resolve().parents[2])


def _grow_pipe(fd: int) -> None:
    """A bigger pipe means fewer wake-ups per batch (Linux only; the default 64 KiB also works)."""
    try:
        import fcntl

        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), _PIPE_BYTES)
    except (ImportError, OSError):
        pass


def _writer_process_main(path: str) -> None:
    """Reads the section header comment, then marshalled batches, from stdin until it closes;
    appends their blocks to `path`. scapy is imported here, never in the proxy.

    Each wake-up takes everything the pipe holds (one read of up to 1 MiB: the proxy's batches
    of the last ~20 ms, more when this process fell behind), writes the blocks of every whole
    batch in it with one `writev` and reports once: on this 2-core VM a batch cost ~200 us of
    this process's CPU, most of it per wake-up and per syscall rather than per frame."""
    from proxy.capture.blocks import PcapNgBlocks
    from proxy.capture.packets import Synthesizer

    priority = Priority.from_environment()
    source = sys.stdin.fileno()
    acks = sys.stdout.fileno()
    synthesizer = Synthesizer()
    reported: BaseException | None = None
    pending = bytearray()
    # Read into one buffer, allocated once: `os.read(fd, 1 MiB)` would map and unmap 1 MiB per call.
    buffer = bytearray(_WRITER_READ_BYTES)
    view = memoryview(buffer)
    size = _LENGTH.size
    with open(path, "ab", buffering=0) as handle:
        file = handle.fileno()
        ended = False
        header = True
        while not ended:
            count = os.readv(source, [view])
            ended = not count
            priority.after_read(count, len(buffer))
            pending += view[:count]
            blocks: list[Any] = []
            at = 0
            while len(pending) - at >= size:
                length = _LENGTH.unpack_from(pending, at)[0]
                if len(pending) - at - size < length:
                    break
                message = marshal.loads(memoryview(pending)[at + size : at + size + length])
                at += size + length
                if header:  # the first message: the section header's comment
                    header = False
                    _write_all(file, [PcapNgBlocks(handle).header_blocks(message)])
                    _report(acks, _ACK.pack(b"R", 0))
                    continue
                blocks += synthesizer.batch(message)
            del pending[:at]
            if not at:
                continue
            _write_all(file, blocks)
            report = b""
            if synthesizer.error is not None and reported is None:
                reported = synthesizer.error
                text = f"{type(reported).__name__}: {reported}".encode()
                report = _ACK.pack(b"E", len(text)) + text
            _report(acks, report + _ACK.pack(b"W", synthesizer.written_bytes))


def _write_all(fd: int, buffers: list[Any]) -> None:
    """All of `buffers` to `fd`, `_IOV_MAX` at a time, resuming after a short write."""
    for start in range(0, len(buffers), _IOV_MAX):
        chunk = buffers[start : start + _IOV_MAX]
        written = os.writev(fd, chunk)
        total = sum(map(len, chunk))
        if written < total:
            rest = memoryview(b"".join(chunk))[written:]
            while rest:
                rest = rest[os.write(fd, rest) :]


def _report(fd: int, data: bytes) -> None:
    """A report to the proxy (which reads them at its hand-overs); a proxy that is gone is not an
    error: this process keeps writing what it was sent."""
    with contextlib.suppress(BrokenPipeError):
        os.write(fd, data)


if __name__ == "__main__":
    _writer_process_main(sys.argv[1])
