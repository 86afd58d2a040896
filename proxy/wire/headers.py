"""Request and response header peeking, and which header version each (api_key, api_version) uses.

The first four request-header fields (api_key, api_version, correlation_id, client_id) have the
same layout in header v1 and v2, so every request can be peeked without knowing its schema; v2
(flexible versions) adds tagged fields after client_id. Header versions come from kio's schemas,
which follow Kafka's `ApiMessageType.requestHeaderVersion/responseHeaderVersion` (ApiVersions
responses always use header v0 so that a client can parse them before it knows the version).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import lru_cache

from kio.index import KioIndexError, load_request_schema, load_response_schema

from proxy.wire.framing import FrameError, read_uvarint

_PREFIX = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length
_CORRELATION = struct.Struct(">i")


@dataclass(frozen=True, slots=True)
class RequestHeaderInfo:
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    header_size: int  # bytes from the start of the frame to the start of the body


def _skip_tagged_fields(data: bytes, offset: int) -> int:
    count, offset = read_uvarint(data, offset, len(data), FrameError, "request header: ")
    for _ in range(count):
        _, offset = read_uvarint(data, offset, len(data), FrameError, "request header: ")
        size, offset = read_uvarint(data, offset, len(data), FrameError, "request header: ")
        offset += size
        if offset > len(data):
            raise FrameError("truncated request header (tagged field)")
    return offset


def peek_request_header(frame: bytes) -> RequestHeaderInfo:
    """Read a request frame's header (frame = the bytes after the size prefix).

    Raises FrameError when the header is truncated. For an (api_key, api_version) that kio does not
    know, the header is assumed to be v1 (no tagged fields) for `header_size`; the caller relays
    such frames as opaque bytes and never needs the body offset.
    """
    if len(frame) < _PREFIX.size:
        raise FrameError(f"truncated request header ({len(frame)} bytes)")
    api_key, api_version, correlation_id, client_id_len = _PREFIX.unpack_from(frame, 0)
    offset = _PREFIX.size
    client_id: str | None = None
    if client_id_len >= 0:
        end = offset + client_id_len
        if end > len(frame):
            raise FrameError("truncated request header (client_id)")
        client_id = frame[offset:end].decode("utf-8", errors="replace")
        offset = end
    elif client_id_len != -1:
        raise FrameError(f"malformed request header (client_id length {client_id_len})")
    if request_header_version(api_key, api_version) >= 2:
        offset = _skip_tagged_fields(frame, offset)
    return RequestHeaderInfo(api_key, api_version, correlation_id, client_id, offset)


def peek_correlation_id(frame: bytes | bytearray, offset: int = 0) -> int:
    """A response frame's correlation id (the first field of every response header)."""
    if len(frame) - offset < 4:
        raise FrameError(f"truncated response header ({len(frame) - offset} bytes)")
    return int(_CORRELATION.unpack_from(frame, offset)[0])


@lru_cache(maxsize=4096)
def request_header_version(api_key: int, api_version: int) -> int:
    """1 for classic request versions, 2 for flexible ones; 1 when kio does not know the version."""
    try:
        schema = load_request_schema(api_key, api_version)
    except KioIndexError:
        return 1
    return int(schema.__header_schema__.__version__)


@lru_cache(maxsize=4096)
def response_header_version(api_key: int, api_version: int) -> int | None:
    """0 or 1; None when kio does not know the (api_key, api_version)."""
    try:
        schema = load_response_schema(api_key, api_version)
    except KioIndexError:
        return None
    return int(schema.__header_schema__.__version__)


_REQUEST_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
REQUEST_PREFIX_BYTES = _REQUEST_PREFIX.size


def peek_request_prefix(frame: bytes | bytearray, offset: int = 0) -> tuple[int, int, int]:
    """(api_key, api_version, correlation_id): the fast path's whole parse of an opaque request.

    `offset` lets the relay read a frame in place inside a larger buffer, without a copy.
    """
    if len(frame) - offset < _REQUEST_PREFIX.size:
        raise FrameError(f"truncated request header ({len(frame) - offset} bytes)")
    api_key, api_version, correlation_id = _REQUEST_PREFIX.unpack_from(frame, offset)
    return int(api_key), int(api_version), int(correlation_id)


def response_header_size(frame: bytes, api_key: int, api_version: int) -> int:
    """Bytes of a response's header (v0: correlation id; v1: plus tagged fields)."""
    if len(frame) < 4:
        raise FrameError(f"truncated response header ({len(frame)} bytes)")
    if response_header_version(api_key, api_version) == 1:
        return _skip_tagged_fields(frame, 4)
    return 4
