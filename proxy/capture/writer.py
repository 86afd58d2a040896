"""The capture writer: Kafka frames -> synthesized TCP packets in pcapng, off the event loop.

What the file holds and how the packets are built: `proxy.capture.packets`.

Design section 3's "one background thread" is the thread that drains the event loop's queue;
it hands the work on to a writer process. The event loop only puts tuples on a
`queue.SimpleQueue` (never blocks); the writer thread marshals them in batches (at most 4,096
frames or 1 MiB) down a pipe to `python -m proxy.capture.writer`, which builds the packets,
checksums, comments and blocks (`proxy.capture.packets.Synthesizer`) and appends them to the
file, flushing after each batch. That work needs several microseconds per frame and ~100 us of
checksum per 64 KB; done on a thread it held the GIL the event loop needs, in its own process it
runs on the other core. A killed proxy leaves a file readable up to the last whole block: the
writer process sees its input close and writes everything it was sent before it exits. The
writer process reports how much it has written; the server stops reading clients while the
backlog is high (`backlog_bytes`).
"""

from __future__ import annotations

import contextlib
import marshal
import operator
import queue
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from proxy import layouts
from proxy.capture.blocks import PcapNgBlocks, tool_version
from proxy.capture.header import (
    GroupSettings,
    RecordScope,
    encode_section_header,
)
from proxy.capture.packets import Synthesizer
from proxy.commands import Closed, Opened
from proxy.layouts import (
    CLOSE,
    OPEN,
    R_CLIENT_PAYLOAD,
    Record,
)

# ---------------------------------------------------------------------------------------------
# The proxy side: a queue, a sender thread, and the writer process

_LENGTH = struct.Struct("<I")
_CLIENT_PAYLOAD = operator.itemgetter(R_CLIENT_PAYLOAD)
# b"W" + payload bytes written so far; b"E" + length of an error text; b"R", 0: ready (imported)
_ACK = struct.Struct("<cq")
_BATCH_ITEMS = 4096
_GATHER_S = 0.002
_BATCH_BYTES = 1 << 20
_PIPE_BYTES = 1 << 20


class CaptureWriter:
    """Writes a capture file from proxy `Record`s without taking the event loop's CPU.

    The event loop only puts tuples on a `queue.SimpleQueue` (never blocks). One background
    thread (the design's writer thread) takes them in batches, marshals each batch (plain tuples
    of ints, strings and bytes: a C-level copy) and pipes it to a writer process
    (`python -m proxy.capture.writer`), which synthesizes the packets, writes them and flushes
    after every batch, so a killed proxy leaves a file readable up to the last whole block (the
    writer process finishes what it was sent when its input closes). The synthesis, the TCP
    checksums and the JSON comments therefore run on another core and never hold the proxy's GIL.
    The writer process reports the payload bytes written after each batch; `backlog_bytes` is
    what the proxy has queued beyond that, and the server stops reading clients when it is high.
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
        with self.path.open("wb") as handle:  # fails here, in the caller, on a bad path
            handle.write(PcapNgBlocks(handle).header_blocks(comment))
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()  # tuples, Records, lists, None
        self.queued_bytes = 0  # written by the event loop thread only
        self.written_bytes = 0  # reported by the writer process
        self.error: BaseException | None = None
        self._dead = False
        self._ready = threading.Event()
        self._process = subprocess.Popen(
            [sys.executable, "-m", "proxy.capture.writer", str(self.path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_package_root(),
        )
        assert self._process.stdin is not None and self._process.stdout is not None
        _grow_pipe(self._process.stdin.fileno())
        self._sender = threading.Thread(target=self._send, name="capture-writer", daemon=True)
        self._acks = threading.Thread(target=self._read_acks, name="capture-acks", daemon=True)
        self._sender.start()
        self._acks.start()

    def wait_ready(self, timeout_s: float = 60.0) -> bool:
        """Blocks until the writer process has started (imported scapy: about a CPU second) or
        died; the proxy waits for it before it listens, so that start-up does not compete with
        the first clients' traffic for the CPU. False on timeout."""
        return self._ready.wait(timeout_s)

    # -- called from the event loop: cheap, never blocks ----------------------------------------

    @property
    def queue_depth(self) -> int:
        """Items (frames, runs, events) waiting for the sender thread."""
        return self._queue.qsize()

    @property
    def backlog_bytes(self) -> int:
        return 0 if self._dead else self.queued_bytes - self.written_bytes

    def open_connection(self, conn: int, ts_ns: int, client: str, upstream: str) -> None:
        self._queue.put((OPEN, conn, ts_ns, client, upstream))

    def record(self, record: Record) -> None:
        self.queued_bytes += len(record.client_payload)
        self._queue.put(record)

    def record_many(self, records: list[Record]) -> None:
        """Several records in one queue operation (the proxy's commands after a read)."""
        self.queued_bytes += sum(map(len, map(_CLIENT_PAYLOAD, records)))
        self._queue.put(records)

    def close_connection(
        self, conn: int, ts_ns: int, reason: str, client_bytes: int = 0, upstream_bytes: int = 0
    ) -> None:
        self._queue.put((CLOSE, conn, ts_ns, reason, client_bytes, upstream_bytes))

    def record_event(self, command: Opened | Closed | tuple[Any, ...]) -> None:
        """A session's Opened, Closed or header-only run (`layouts.HEADERS`) command (the capture
        is the stream of session commands)."""
        match command:
            case (layouts.HEADERS, _, _, _, _, heads):
                self.queued_bytes += len(heads)  # what the writer process reports written for it
                self._queue.put(command)
            case Opened(conn=conn, ts_ns=ts_ns, client=client, upstream=upstream):
                self.open_connection(conn, ts_ns, client, upstream)
            case Closed(conn=conn, ts_ns=ts_ns, reason=reason):
                self.close_connection(conn, ts_ns, reason, command.client_bytes, command.upstream_bytes)

    def close(self) -> None:
        """Write everything queued, then close the file (blocks until the writer process is done)."""
        self._queue.put(None)
        self._sender.join()
        self._process.wait()
        self._acks.join()

    # -- the sender thread ----------------------------------------------------------------------

    def _send(self) -> None:  # noqa: C901 - the sender thread's one batching loop, state in locals
        get = self._queue.get
        get_nowait = self._queue.get_nowait
        stdin = self._process.stdin
        assert stdin is not None
        stop = False
        drained = False
        while not stop:
            batch: list[tuple[Any, ...]] = []
            size = 0
            if drained:
                # The queue was empty after the last batch: gather for a moment instead of waking
                # on the next put. A put that finds this thread blocked in get() wakes it (a
                # thread switch and a GIL hand-off on the event loop's side), which on traffic of
                # one frame per read cost about as much as relaying the frame; the capture lags
                # the relay by at most _GATHER_S more.
                time.sleep(_GATHER_S)
            drained = False
            item = get()
            while True:
                if item is None:
                    stop = True
                    break
                if type(item) is tuple:
                    batch.append(item)
                elif type(item) is list:
                    for record in item:
                        batch.append(tuple(record))
                        size += len(record[R_CLIENT_PAYLOAD])
                else:
                    batch.append(tuple(item))
                    size += len(item[R_CLIENT_PAYLOAD])
                if len(batch) >= _BATCH_ITEMS or size >= _BATCH_BYTES:
                    break
                try:
                    item = get_nowait()
                except queue.Empty:
                    drained = True
                    break
            if not batch or self._dead:
                continue
            data = marshal.dumps(batch)
            try:
                stdin.write(_LENGTH.pack(len(data)))
                stdin.write(data)
                stdin.flush()
            except (BrokenPipeError, ValueError, OSError) as exc:
                self.error = self.error or exc
                self._dead = True
        with contextlib.suppress(OSError):
            stdin.close()

    def _read_acks(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        while True:
            head = stdout.read(_ACK.size)
            if len(head) < _ACK.size:
                break
            kind, value = _ACK.unpack(head)
            if kind == b"W":
                self.written_bytes = value
            elif kind == b"R":
                self._ready.set()
            else:
                self.error = self.error or RuntimeError(stdout.read(value).decode("utf-8", "replace"))
        if self._process.wait() != 0:
            self.error = self.error or RuntimeError(f"capture writer exited with {self._process.returncode}")
        self._dead = True
        self._ready.set()  # nothing to wait for any more


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
    """Reads marshalled batches from stdin until it closes; appends their packets to `path`."""
    source = sys.stdin.buffer
    acks = sys.stdout.buffer
    synthesizer = Synthesizer()
    reported: BaseException | None = None
    with open(path, "ab") as handle:
        acks.write(_ACK.pack(b"R", 0))
        acks.flush()
        while True:
            head = source.read(_LENGTH.size)
            if len(head) < _LENGTH.size:
                break
            data = source.read(_LENGTH.unpack(head)[0])
            batch = marshal.loads(data)
            handle.writelines(synthesizer.batch(batch))
            handle.flush()
            if synthesizer.error is not None and reported is None:
                reported = synthesizer.error
                text = f"{type(reported).__name__}: {reported}".encode()
                acks.write(_ACK.pack(b"E", len(text)) + text)
            try:
                acks.write(_ACK.pack(b"W", synthesizer.written_bytes))
                acks.flush()
            except BrokenPipeError:  # the proxy is gone: keep writing what it sent
                pass


if __name__ == "__main__":
    _writer_process_main(sys.argv[1])
