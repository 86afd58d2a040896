"""Is a Kafka listener up? One ApiVersions v0 round trip, encoded with kio.

The harness is a leaf package, so it cannot use proxy.wire; ApiVersions v0 is the one request
every broker since 0.10 answers before anything else, and v0 keeps the header non-flexible.
"""

from __future__ import annotations

import io
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from kio.schema.api_versions.v0.request import ApiVersionsRequest
from kio.schema.api_versions.v0.response import ApiVersionsResponse
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

_CORRELATION_ID = 7


@dataclass(frozen=True)
class ApiRange:
    api_key: int
    min_version: int
    max_version: int


def _encode_request() -> bytes:
    header_schema = ApiVersionsRequest.__header_schema__
    buffer = io.BytesIO()
    entity_writer(header_schema)(
        buffer,
        header_schema(
            request_api_key=i16(ApiVersionsRequest.__api_key__),
            request_api_version=i16(ApiVersionsRequest.__version__),
            correlation_id=i32(_CORRELATION_ID),
            client_id="group-replay-harness",
        ),
    )
    entity_writer(ApiVersionsRequest)(buffer, ApiVersionsRequest())
    body = buffer.getvalue()
    return struct.pack(">i", len(body)) + body


def _read_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError(f"connection closed after {len(chunks)} of {size} bytes")
        chunks += chunk
    return bytes(chunks)


def api_versions(host: str, port: int, timeout_ms: int = 2000) -> dict[int, ApiRange]:
    """The broker's supported API ranges; raises OSError/ConnectionError if it does not answer."""
    with socket.create_connection((host, port), timeout=timeout_ms / 1000) as sock:
        sock.sendall(_encode_request())
        (size,) = struct.unpack(">i", _read_exact(sock, 4))
        frame = _read_exact(sock, size)
    header, offset = entity_reader(ApiVersionsResponse.__header_schema__)(frame, 0)
    if int(header.correlation_id) != _CORRELATION_ID:
        raise ConnectionError(f"ApiVersions answer has correlation id {header.correlation_id}")
    response, _ = entity_reader(ApiVersionsResponse)(frame, offset)
    if int(response.error_code) != 0:
        raise ConnectionError(f"ApiVersions error code {int(response.error_code)}")
    return {
        int(k.api_key): ApiRange(int(k.api_key), int(k.min_version), int(k.max_version))
        for k in response.api_keys
    }


class NotAnswering(Exception):
    """`wait_answering` ran out of time; `last_error` is the last connection attempt's."""

    def __init__(self, last_error: Exception | None) -> None:
        super().__init__(str(last_error))
        self.last_error = last_error


def wait_answering(
    host: str, port: int, timeout_ms: int, check_alive: Callable[[], None], poll_s: float = 0.2
) -> None:
    """Polls ApiVersions on host:port until a broker answers: the one readiness loop of a local
    broker and a container one. `check_alive` raises the caller's error when the server is gone;
    NotAnswering when `timeout_ms` passes first."""
    deadline = time.monotonic() + timeout_ms / 1000
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        check_alive()
        try:
            api_versions(host, port, timeout_ms=2000)
            return
        except (OSError, ConnectionError) as exc:
            last_error = exc
        time.sleep(poll_s)
    raise NotAnswering(last_error)


def split_bootstrap(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)
