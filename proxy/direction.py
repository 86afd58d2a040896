"""One direction of a relayed connection: Kafka frames out of a byte stream, forwarding what
need not be held, and the proxy-wide budget for the partial frames it holds.

`proxy.session.ProxySession` runs two of these (requests from the client, responses from the
broker) with its own classify/finish/scan callbacks; this module knows frames, not APIs.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

from proxy.wire import FrameError

Classify = Callable[[bytes | bytearray, int, int], tuple[bool, bool]]
Finish = Callable[[bytes], bytes | None]
Scan = Callable[[bytes, int, int], int]
_SIZE = struct.Struct(">i")

DEFAULT_MAX_BUFFERED_BYTES = 256 << 20  # all connections' partial frames together


class BufferBudget:
    """Bytes of partial frames held by all sessions of one proxy, and their cap (issue 18
    defect 5): a frame that would take the total past `limit_bytes` closes its connection, and a
    closed connection gives its bytes back."""

    __slots__ = ("limit_bytes", "used_bytes")

    def __init__(self, limit_bytes: int = DEFAULT_MAX_BUFFERED_BYTES) -> None:
        self.limit_bytes = limit_bytes
        self.used_bytes = 0


class BudgetExceeded(FrameError):
    """Holding this frame would take the proxy past its buffer budget."""


class Direction:
    """Splits one direction's byte stream into frames, forwarding what it need not hold.

    `classify(source, offset, size)` is called once the first `head_bytes` of a frame (all of it,
    when shorter) are available at `source[offset:]`; it returns (keep, hold): keep the whole frame
    for `finish`, and hold it back from the other side until `finish` returns its replacement
    (hold implies keep). `finish(frame)` gets the frame without its size prefix.

    A frame that lies wholly inside one input chunk and is not kept costs one struct unpack and one
    classify call: nothing is buffered or copied, and the chunk is forwarded as it came.

    `scan(data, pos, n)`, when given, runs first wherever a new frame starts inside a chunk: it
    consumes a run of whole frames that need nothing but bookkeeping (one unpack and a deque
    operation each, no call per frame) and returns where it stopped; the frame there (if any)
    takes the general path.
    """

    __slots__ = (
        "_accounted", "_buf", "_classify", "_finish", "_head_bytes", "_hold", "_keep", "_max", "_remaining",
        "budget", "scan",
    )  # fmt: skip

    def __init__(
        self,
        head_bytes: int,
        max_frame_bytes: int,
        classify: Classify,
        finish: Finish,
        scan: Scan | None = None,
    ) -> None:
        """`max_frame_bytes` bounds a frame's size prefix: a larger (or negative) one is a
        FrameError, which closes the connection before anything of it is buffered."""
        self.scan = scan
        self._head_bytes = head_bytes
        self._max = max_frame_bytes
        self._classify = classify
        self._finish = finish
        self._buf = bytearray()  # prefix + head of an undecided frame, or a kept frame so far
        self._remaining = 0  # body bytes of a decided frame still to come
        self._keep = False
        self._hold = False
        self.budget: BufferBudget | None = None
        self._accounted = 0  # bytes of _buf counted in the budget

    def _account(self) -> None:
        """Brings the budget up to date with this direction's buffer after a read."""
        budget = self.budget
        assert budget is not None
        size = len(self._buf)
        delta = size - self._accounted
        self._accounted = size
        budget.used_bytes += delta
        if delta > 0 and budget.used_bytes > budget.limit_bytes:
            raise BudgetExceeded(
                f"holding this partial frame would take the proxy's buffered bytes past its budget "
                f"of {budget.limit_bytes} bytes (--max-buffered-bytes)"
            )
        if size == 0 and delta < -(1 << 20):
            self._buf = bytearray()  # give a big frame's memory back

    def release(self) -> None:
        """The connection is gone: its partial frame's bytes go back to the budget."""
        if self.budget is not None:
            self.budget.used_bytes -= self._accounted
        self._accounted = 0
        self._buf = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held back that do not yet make a whole frame."""
        return len(self._buf)

    def _check_size(self, size: int) -> None:
        if size < 0:
            raise FrameError(f"negative frame size {size}")
        raise FrameError(f"frame size {size} exceeds the maximum of {self._max} bytes")

    def _complete(self, out: list[bytes]) -> None:
        buf = self._buf
        if self._keep:
            payload = bytes(memoryview(buf)[4:])
            replacement = self._finish(payload)
            if self._hold:
                out.append(_SIZE.pack(len(replacement or payload)) + (replacement or payload))
        del buf[:]
        self._keep = self._hold = False

    def feed(self, data: bytes) -> list[bytes]:
        """The byte strings to forward, in order. Raises FrameError or ProtocolViolation."""
        if self.budget is None:
            return self._feed(data)
        try:
            return self._feed(data)
        finally:
            self._account()

    def _feed(self, data: bytes) -> list[bytes]:  # noqa: C901 - the measured per-chunk loop
        # (bench/proxy_overhead.py): one loop over a read, state in locals, no call per frame
        out: list[bytes] = []
        buf = self._buf
        n = len(data)
        pos = 0
        fwd: int | None = None if (self._remaining and self._hold) else 0
        frame_start = 0  # where the current frame's bytes start within data
        carried = 0 if self._remaining else len(buf)  # undecided header bytes from earlier chunks
        head_bytes = self._head_bytes
        maximum = self._max
        classify = self._classify
        scan = self.scan
        unpack = _SIZE.unpack_from
        while pos < n:
            if self._remaining:
                take = self._remaining if self._remaining < n - pos else n - pos
                if self._keep:
                    buf += data[pos : pos + take]
                pos += take
                self._remaining -= take
                if self._remaining:
                    break
                self._complete(out)
                if fwd is None:
                    fwd = pos
                continue
            if not buf:
                if scan is not None:
                    pos = scan(data, pos, n)
                    if pos >= n:
                        break
                frame_start = pos
                carried = 0
                if n - pos >= 4:
                    # Fast path: the size prefix and head are in this chunk; read them in place.
                    (size,) = unpack(data, pos)
                    if size < 0 or size > maximum:
                        self._check_size(size)
                    head_len = size if size < head_bytes else head_bytes
                    if n - pos - 4 >= head_len:
                        keep, hold = classify(data, pos + 4, size)
                        if not keep:
                            if n - pos - 4 >= size:
                                pos += 4 + size  # an opaque frame wholly in this chunk
                            else:
                                self._remaining = size - (n - pos - 4)
                                pos = n
                            continue
                        keep = True
                        self._keep, self._hold = keep, hold
                        if hold:
                            if fwd is not None and pos > fwd:
                                out.append(data[fwd:pos])
                            fwd = None
                        if n - pos - 4 >= size:
                            # Kept and whole in this chunk: one slice is the only copy.
                            payload = data[pos + 4 : pos + 4 + size]
                            replacement = self._finish(payload)
                            if hold:
                                kept = payload if replacement is None else replacement
                                out.append(_SIZE.pack(len(kept)) + kept)
                            self._keep = self._hold = False
                            pos += 4 + size
                            if fwd is None:
                                fwd = pos
                        else:
                            buf += data[pos:]
                            self._remaining = size - (n - pos - 4)
                            pos = n
                        continue
            # Slow path: the prefix or head straddles chunks; gather it in buf.
            have = len(buf)
            if have < 4:
                take = min(4 - have, n - pos)
                buf += data[pos : pos + take]
                pos += take
                if len(buf) < 4:
                    break
            (size,) = unpack(buf, 0)
            if size < 0 or size > maximum:
                self._check_size(size)
            head_len = size if size < head_bytes else head_bytes
            missing = 4 + head_len - len(buf)
            if missing > 0:
                take = min(missing, n - pos)
                buf += data[pos : pos + take]
                pos += take
                if take < missing:
                    break
            keep, hold = classify(buf, 4, size)
            keep = keep or hold
            self._keep, self._hold = keep, hold
            if hold:
                if fwd is not None and frame_start > fwd:
                    out.append(data[fwd:frame_start])
                fwd = None
            elif carried:
                # This frame began in an earlier chunk: forward that part before this chunk's bytes.
                out.append(bytes(buf[:carried]))
                carried = 0
            if not keep:
                del buf[:]
            self._remaining = size - head_len
            if not self._remaining:
                self._complete(out)
                if fwd is None:
                    fwd = pos
        if fwd is not None:
            # An undecided frame's bytes stay in buf until its head is complete.
            end = frame_start if (buf and not self._remaining) else pos
            if end > fwd:
                out.append(data if (fwd == 0 and end == n) else data[fwd:end])
        return out


__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "BudgetExceeded",
    "BufferBudget",
    "Classify",
    "Direction",
    "Finish",
    "Scan",
]
