"""Kafka framing: every request and response is an int32 big-endian size, then that many bytes."""

from __future__ import annotations

import struct

DEFAULT_MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes default (104857600)

_SIZE = struct.Struct(">i")


class FrameError(ValueError):
    """A frame that cannot be Kafka: negative or oversized length, or a truncated header."""


def read_uvarint(
    data: bytes, pos: int, end: int, error: type[FrameError] = FrameError, where: str = ""
) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at `pos` (Kafka's ByteUtils.readUnsignedVarint:
    at most 5 bytes); `error` names what is broken, with `where` ("request header: ") in front."""
    result = 0
    shift = 0
    while True:
        if pos >= end:
            raise error(f"truncated {where}unsigned varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
        if shift > 28:
            raise error(f"malformed {where}unsigned varint (longer than 5 bytes)")


def frame(payload: bytes) -> bytes:
    """Prefix a payload with its int32 size."""
    return _SIZE.pack(len(payload)) + payload


class FrameDecoder:
    """Splits a byte stream into Kafka frames (without their size prefix).

    Feed it whatever the socket returned; it returns the frames completed so far and keeps the
    remainder. A negative or oversized size raises FrameError: the caller closes that connection.
    """

    __slots__ = ("_buffer", "max_frame_bytes")

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        self.max_frame_bytes = max_frame_bytes
        self._buffer = bytearray()

    @property
    def buffered(self) -> int:
        """Bytes held that do not yet make a whole frame."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[bytes]:
        buf = self._buffer
        buf += data
        frames: list[bytes] = []
        offset = 0
        end = len(buf)
        while end - offset >= 4:
            (size,) = _SIZE.unpack_from(buf, offset)
            if size < 0:
                raise FrameError(f"negative frame size {size}")
            if size > self.max_frame_bytes:
                raise FrameError(f"frame size {size} exceeds the maximum of {self.max_frame_bytes} bytes")
            if end - offset - 4 < size:
                break
            frames.append(bytes(buf[offset + 4 : offset + 4 + size]))
            offset += 4 + size
        if offset:
            del buf[:offset]
        return frames
