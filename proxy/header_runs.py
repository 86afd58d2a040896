"""Group scope's header-only runs, as `proxy.session.ProxySession` hands them to the recorder.

`HeaderRuns` is the part of the session (a mixin: the session owns the fields) that packs them
onto the recorder's bytearray (`header_runs`: `proxy.layouts.HEADER_RUN` + heads or whole
frames, no command and no call of the shell per read) or, without one, emits them as HEADERS
commands; and that emits the packed runs as one bytes command before a Record, so the recorder
sees each connection's frames in order.

`append_run` packs one run: the C extension's (`proxy/capture/_snapped.c`, one resize and one
copy) when it is built, else `python_append_run` (the reference; the same bytes, held to them by
tests/test_capture_native.py; `GROUP_REPLAY_CAPTURE_BUILDER=python` forces it, as it does the
writer's builder). Per read of small frames the Python took a Struct.pack call, a
memoryview slice and two bytearray concatenations: about 2,000 of the 3,700 instructions group
scope added per read (bench/README.md, "rec6").
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from proxy.commands import Command
from proxy.layouts import HEADER_RUN, HEADERS, HEADS, REQUEST_HEADS, RESPONSE_HEADS, WHOLE_FRAMES, Record
from proxy.native import native

_RUN_PACK = HEADER_RUN.pack
_SIZE = struct.Struct(">i")
# Frames up to this size on average go to the capture writer whole (a memcpy per read instead of a
# slice per frame; measured: the slices were a third of the relay's own per-frame work).
WHOLE_FRAME_BYTES = 256


def python_append_run(
    sink: bytearray,
    conn: int,
    ts_ns: int,
    request: bool,
    kind: bool,
    data: bytes | bytearray,
    start: int,
    end: int,
) -> None:
    """`HEADER_RUN` (length `end - start`, negative for a response) and `data[start:end]` onto
    `sink`."""
    length = end - start
    sink += _RUN_PACK(conn, ts_ns, length if request else -length, kind)
    sink += data if (start == 0 and end == len(data)) else memoryview(data)[start:end]


append_run: Callable[[bytearray, int, int, bool, bool, bytes | bytearray, int, int], None] = (
    native("append_run") or python_append_run
)


def python_append_heads(
    sink: bytearray, conn: int, ts_ns: int, request: bool, data: bytes | bytearray, start: int, end: int
) -> None:
    """The heads (`REQUEST_HEADS` or `RESPONSE_HEADS` bytes) of the whole frames `data[start:end]`
    as one HEADS run onto `sink`: the reference of the C extension's `append_heads`."""
    captured = REQUEST_HEADS.size if request else RESPONSE_HEADS.size
    unpack = _SIZE.unpack_from
    heads: list[bytes] = []
    at = start
    while at < end:
        size = unpack(data, at)[0] if end - at >= captured else -1
        if size < captured - 4 or size > end - at - 4:
            raise ValueError("append_heads(): the range is not whole frames, each at least its head long")
        heads.append(bytes(data[at : at + captured]))
        at += 4 + size
    joined = b"".join(heads)
    python_append_run(sink, conn, ts_ns, request, HEADS, joined, 0, len(joined))


# Only the C twin runs in the sessions' scans: in Python a slice per frame costs more than copying
# small frames whole (WHOLE_FRAMES), which is what the scans do without it.
native_append_heads: Callable[[bytearray, int, int, bool, bytes | bytearray, int, int], None] | None = native(
    "append_heads"
)


class HeaderRuns:
    """Header-only runs onto the sink or as commands (a mixin: the session owns the fields)."""

    conn: int
    client_id: str | None
    _now_ns: int
    _events: list[Command]
    _sink: bytearray | None

    def _header_run(self, direction: str, heads: bytes) -> None:
        """A run of header-only frames (`heads`: theirs back to back): onto the sink, packed, or as
        a HEADERS command."""
        sink = self._sink
        if sink is None:
            self._events.append((HEADERS, self.conn, self._now_ns, direction, self.client_id, heads))
            return
        append_run(sink, self.conn, self._now_ns, direction == "request", HEADS, heads, 0, len(heads))

    def _header_frames(self, direction: str, data: bytes, start: int, end: int, frames: int) -> None:
        """A scan's run of header-only frames, `data[start:end]`: small frames go onto the sink
        whole (one copy per read, none per frame: the writer process takes their heads), bigger
        ones (or without a sink) as their heads, sliced (REQUEST_HEADS, RESPONSE_HEADS)."""
        sink = self._sink
        if sink is not None and end - start <= WHOLE_FRAME_BYTES * frames:
            append_run(sink, self.conn, self._now_ns, direction == "request", WHOLE_FRAMES, data, start, end)
            return
        captured = REQUEST_HEADS.size if direction == "request" else RESPONSE_HEADS.size
        unpack = _SIZE.unpack_from
        heads: list[bytes] = []
        while start < end:
            heads.append(data[start : start + captured])
            start += 4 + unpack(data, start)[0]
        self._header_run(direction, b"".join(heads))

    def _recorded(self, record: Record) -> None:
        """A Record after the header-only runs packed so far (one `bytes` command: the order)."""
        sink = self._sink
        if sink:
            self._events.append(bytes(sink))
            sink.clear()
        self._events.append(record)
