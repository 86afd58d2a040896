"""Header-only frames (record scope group) as snapped packets, built a run at a time (format 5;
format 6 writes them on the client leg only: `skip_header_only` advances the upstream leg's
stream past them, the reader shows each frame on both legs).

A header-only frame is, on its leg, packets that keep the frame's original length (the IPv4
total length and the pcapng block's original length) while the block holds only the frame's
first bytes: a request's size prefix, api_key, api_version and correlation_id (12 bytes), a
response's size prefix and correlation_id (8 bytes). A frame over `MAX_SEGMENT` spans several
packets of which only the first holds bytes. Since format 5 these packets carry no comment: the
reader takes the connection from the TCP stream (its SYN carries the open comment), the fields
from the captured bytes and a response's API from the request it answers. The TCP checksum of a
packet whose payload is not all captured cannot be verified by anyone: it is written as 0 ("not
computed", as in a capture taken with checksum offload); the IPv4 checksum is valid.

These are most of a busy cluster's frames, so they are built a run at a time (the frames of one
read; `proxy.layouts.HEADERS`), per leg: one template per distinct frame size (its blocks, with
the sequence numbers and header bytes left zero), repeated, then those patched in. A run of
equal sizes (what a pipelining client sends) is patched with one strided slice assignment per
16-bit lane, a fixed number of C calls per run whatever its length; any other run frame by frame.
A run of one frame in one packet (a client sending one request at a time: most reads then) is
its template with four fields patched in place (about half the time per frame of the general
path, measured).

`run_blocks` is what the writer calls per run: the C builder `proxy.capture._snapped` (the same
bytes, from one pass over the run's frames: ~a tenth of this module's time per frame) when it is
built, else this module's Python, which stays the reference. `GROUP_REPLAY_CAPTURE_BUILDER=python`
chooses the Python one; which one runs is logged once per process at debug level.
"""

from __future__ import annotations

import functools
import logging
import struct
from collections.abc import Callable
from itertools import accumulate
from typing import NamedTuple

from proxy.capture.blocks import EPB_HEAD
from proxy.capture.tcp import FLAG_ACK, FLAG_PSH, HEADERS_BYTES, MAX_SEGMENT, SEQ_AT, Buffer, Side, Stream
from proxy.layouts import REQUEST_HEADS, RESPONSE_HEADS
from proxy.native import native

# The relay's heads (`proxy.layouts`) are exactly the bytes a block keeps of a frame.
REQUEST_CAPTURED = REQUEST_HEADS.size  # 12: size prefix, api_key, api_version, correlation_id
RESPONSE_CAPTURED = RESPONSE_HEADS.size  # 8: size prefix, correlation_id
CAPTURED_AT = EPB_HEAD.size + HEADERS_BYTES  # where a frame's captured bytes start in its block
# Frames per run from which the lanes are used: measured on the shared VM, best of 9, the lanes
# took 6.6 us at 2 frames (frame by frame 5.1), 6.8 at 3 (6.6), 15.4 at 4 (17.0), 15.2 at 6 (33.4).
_LANES_FROM = 4
_SEQ = struct.Struct(">I")
_SEQ_ACK = struct.Struct(">II")
_SIZE = struct.Struct(">i")
_TRAILER = struct.Struct("<I")
_MASK = 0xFFFFFFFF


class _Unit(NamedTuple):
    """The blocks of one header-only frame of a given size on one stream and leg, with time,
    ack, sequence numbers and captured bytes zero (cached per stream: `Stream.units`)."""

    data: bytes
    block_offsets: tuple[int, ...]  # per packet: where its block starts in `data`
    pieces: tuple[int, ...]  # per packet: the frame bytes it stands for


_TS_AT = 12  # the timestamp's two words in an Enhanced Packet Block
_ACK_AT = EPB_HEAD.size + SEQ_AT + 4  # the TCP ack number, from the block's start
_SEQ_AT = EPB_HEAD.size + SEQ_AT
_TS = struct.Struct("<II")


def _unit(side: Side, leg: int, size: int, captured: int) -> _Unit:
    parts: list[bytes] = []
    block_offsets: list[int] = []
    pieces: list[int] = []
    remaining = 4 + size
    position = 0
    while remaining > 0:
        piece = min(remaining, MAX_SEGMENT)
        holds = captured if not parts else 0
        caplen = HEADERS_BYTES + holds
        total = EPB_HEAD.size + caplen + (-caplen % 4) + 4
        parts += (
            EPB_HEAD.pack(6, total, leg, 0, 0, caplen, HEADERS_BYTES + piece),
            side.header(FLAG_PSH | FLAG_ACK, 0, 0, piece, None),
            bytes(holds + (-caplen % 4)),
            _TRAILER.pack(total),
        )
        block_offsets.append(position)
        pieces.append(piece)
        position += total
        remaining -= piece
    return _Unit(b"".join(parts), tuple(block_offsets), tuple(pieces))


def _stamped(unit: _Unit, ts_ns: int, ack: int) -> bytearray:
    """`unit`'s blocks with this run's time and ack number."""
    blocks = bytearray(unit.data)
    high, low = ts_ns >> 32, ts_ns & _MASK
    for at in unit.block_offsets:
        _TS.pack_into(blocks, at + _TS_AT, high, low)
        _SEQ.pack_into(blocks, at + _ACK_AT, ack)
    return blocks


@functools.lru_cache(maxsize=256)
def _sizes(stride: int, count: int) -> struct.Struct:
    """Reads the size prefix of each of `count` heads `stride` bytes apart, in one call."""
    return struct.Struct(">" + f"i{stride - 4}x" * count)


def header_only_blocks(
    stream: Stream, leg: int, to_server: bool, ts_ns: int, heads: bytes, stride: int, captured: int
) -> bytearray:
    """The pcapng blocks of a run of header-only frames on one leg (`heads`: each frame's first
    `captured` bytes, `stride` bytes apart); advances the stream's sequence number."""
    if to_server:
        side, seq, ack = stream.to_server, stream.client_seq, stream.server_seq & _MASK
    else:
        side, seq, ack = stream.to_client, stream.server_seq, stream.client_seq & _MASK
    cache = stream.units
    if len(heads) == stride:  # one frame (a client sending one request at a time): no run to patch
        size = _SIZE.unpack_from(heads)[0]
        unit = cache.get((to_server, size)) or _cached(cache, side, leg, to_server, size, captured)
        if len(unit.block_offsets) == 1:
            buffer = bytearray(unit.data)
            _TS.pack_into(buffer, _TS_AT, ts_ns >> 32, ts_ns & _MASK)
            _SEQ_ACK.pack_into(buffer, _SEQ_AT, seq & _MASK, ack)
            buffer[CAPTURED_AT : CAPTURED_AT + captured] = heads[:captured]
            _advance(stream, to_server, seq + 4 + size)
            return buffer
    count = len(heads) // stride
    sizes = _sizes(stride, count).unpack(heads)
    units: dict[int, _Unit] = {}
    stamped: dict[int, bytearray] = {}
    for size in set(sizes):
        unit = cache.get((to_server, size)) or _cached(cache, side, leg, to_server, size, captured)
        units[size] = unit
        stamped[size] = _stamped(unit, ts_ns, ack)
    if count == 1:
        buffer = stamped[sizes[0]]
        end = _patch_each(buffer, units, sizes, seq, heads, stride, captured)
    elif len(units) == 1 and count >= _LANES_FROM:
        unit = units[sizes[0]]
        buffer = stamped[sizes[0]] * count
        _patch_lanes(buffer, unit, seq, 4 + sizes[0], count, heads, stride, captured)
        end = seq + count * (4 + sizes[0])
    else:
        buffer = bytearray(b"".join([stamped[size] for size in sizes]))
        end = _patch_each(buffer, units, sizes, seq, heads, stride, captured)
    _advance(stream, to_server, end)
    return buffer


def whole_frames(frames: bytes, captured: int) -> tuple[bytes, int]:
    """(heads, stride) for `header_only_blocks` from a run's whole frames (small frames are handed
    over whole: no slice per frame in the relay): the frames themselves when they are all one even
    size (the lanes read each frame's first bytes at that stride), else their heads, sliced."""
    size = _SIZE.unpack_from(frames)[0]
    stride = 4 + size
    count = len(frames) // stride
    if (
        count * stride == len(frames)
        and not stride % 2
        and (count == 1 or _sizes(stride, count).unpack(frames).count(size) == count)
    ):
        return frames, stride
    heads: list[bytes] = []
    at = 0
    while at < len(frames):
        heads.append(frames[at : at + captured])
        at += 4 + _SIZE.unpack_from(frames, at)[0]
    return b"".join(heads), captured


def skip_header_only(stream: Stream, to_server: bool, heads: bytes, stride: int) -> None:
    """Advances the stream's sequence number past a run of header-only frames without writing
    them (format 6: the upstream leg's header-only frames are the client leg's, not written)."""
    count = len(heads) // stride
    if count == 1:
        length = 4 + _SIZE.unpack_from(heads)[0]
    else:
        length = 4 * count + sum(_sizes(stride, count).unpack(heads))
    if to_server:
        stream.client_seq += length
    else:
        stream.server_seq += length


def _cached(
    cache: dict[tuple[bool, int], _Unit], side: Side, leg: int, to_server: bool, size: int, captured: int
) -> _Unit:
    """A new unit for the stream's cache (emptied first when sizes vary without end: Fetch
    responses)."""
    if len(cache) >= 64:
        cache.clear()
    unit = cache[(to_server, size)] = _unit(side, leg, size, captured)
    return unit


def _advance(stream: Stream, to_server: bool, end: int) -> None:
    if to_server:
        stream.client_seq = end
    else:
        stream.server_seq = end


def _patch_lanes(
    buffer: bytearray,
    unit: _Unit,
    seq: int,
    length: int,
    count: int,
    heads: bytes,
    stride: int,
    captured: int,
) -> None:
    """Sequence numbers and captured bytes into `count` copies of `unit`, a 16-bit lane at a time."""
    view = memoryview(buffer).cast("H")
    step = len(unit.data) // 2
    for block, start in zip(unit.block_offsets, accumulate(unit.pieces, initial=seq), strict=False):
        values: range | list[int] = range(start, start + count * length, length)
        if values[-1] > _MASK:
            values = [value & _MASK for value in values]
        words = memoryview(struct.pack(f">{count}I", *values)).cast("H")
        view[(block + _SEQ_AT) // 2 :: step] = words[0::2]
        view[(block + _SEQ_AT) // 2 + 1 :: step] = words[1::2]
    source = memoryview(heads).cast("H")
    for lane in range(captured // 2):
        view[CAPTURED_AT // 2 + lane :: step] = source[lane :: stride // 2]


def _patch_each(
    buffer: bytearray,
    units: dict[int, _Unit],
    sizes: tuple[int, ...],
    seq: int,
    heads: bytes,
    stride: int,
    captured: int,
) -> int:
    """`_patch_lanes` frame by frame (sizes that differ, or a short run); returns the next seq."""
    pack_into = _SEQ.pack_into
    position = 0
    at = 0
    for size in sizes:
        unit = units[size]
        buffer[position + CAPTURED_AT : position + CAPTURED_AT + captured] = heads[at : at + captured]
        for block, piece in zip(unit.block_offsets, unit.pieces, strict=True):
            pack_into(buffer, position + block + _SEQ_AT, seq & _MASK)
            seq += piece
        position += len(unit.data)
        at += stride
    return seq


def python_run_blocks(
    client: Stream, upstream: Stream, to_server: bool, ts_ns: int, data: bytes, whole: bool
) -> Buffer:
    """The client leg's blocks of one run of header-only frames (`data`: their heads back to back,
    or with `whole` the frames themselves); both legs' streams advance past them (format 6)."""
    captured = REQUEST_CAPTURED if to_server else RESPONSE_CAPTURED
    stride = captured
    if whole:
        data, stride = whole_frames(data, captured)
    blocks = header_only_blocks(client, 0, to_server, ts_ns, data, stride, captured)
    skip_header_only(upstream, to_server, data, stride)
    return blocks


def native_run_blocks(
    client: Stream, upstream: Stream, to_server: bool, ts_ns: int, data: bytes, whole: bool
) -> Buffer:
    """`python_run_blocks` by the C builder (`proxy/capture/_snapped.c`), byte for byte."""
    assert _build is not None  # chosen only if built
    if to_server:
        side, seq, ack, captured = client.to_server, client.client_seq, client.server_seq, REQUEST_CAPTURED
    else:
        side, seq, ack, captured = client.to_client, client.server_seq, client.client_seq, RESPONSE_CAPTURED
    blocks, advance = _build(side.snapped, 0, ts_ns, seq, ack, data, whole, captured)
    if to_server:
        client.client_seq = seq + advance
        upstream.client_seq += advance
    else:
        client.server_seq = seq + advance
        upstream.server_seq += advance
    return blocks


def native_header_runs(
    packed: bytes, start: int, pairs: dict[int, tuple[Stream, Stream]]
) -> tuple[bytes, int, int, str | None]:
    """`native_run_blocks` over a batch item's packed runs (`layouts.HEADER_RUN` + bytes each)
    from `start`, in one C call: (blocks, where it stopped, bytes of runs done, error). It stops
    at the end, at a connection `pairs` (conn -> client and upstream Stream) does not hold yet, or
    at a malformed run (`error`: what `native_run_blocks` would raise). Per run the Python loop
    cost the writer ~3 us, most of a one-frame read's capture (bench/README.md, "rec7")."""
    assert _build_runs is not None  # chosen only if built
    return _build_runs(packed, start, pairs, REQUEST_CAPTURED, RESPONSE_CAPTURED)


_build: Callable[..., tuple[bytes, int]] | None = native("build")
_build_runs: Callable[..., tuple[bytes, int, int, str | None]] | None = native("build_runs")
_PYTHON = _build is None
run_blocks = python_run_blocks if _PYTHON else native_run_blocks
logging.getLogger(__name__).debug("header-only packets built by the %s builder", "Python" if _PYTHON else "C")


__all__ = [
    "CAPTURED_AT",
    "REQUEST_CAPTURED",
    "RESPONSE_CAPTURED",
    "header_only_blocks",
    "native_header_runs",
    "native_run_blocks",
    "python_run_blocks",
    "run_blocks",
    "skip_header_only",
    "whole_frames",
]
