"""What a relay session (`proxy.session.ProxySession`) is plugged with and what it returns.

The rewrite hook (`RewritePolicy`, `PassThrough`) and the commands the asyncio shell carries out
(`SendUpstream`, `SendClient`, `Record`, `Close`, and the connection's `Opened`/`Closed`), apart
from the session's framing and bookkeeping so the shell, the capture writer and rewrite policies
can name them without the relay itself.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from proxy.layouts import Record
from proxy.wire import PendingRequest, RequestHeaderInfo

# ---------------------------------------------------------------------------------------------
# The rewrite hook


class RewritePolicy(Protocol):
    """What `proxy.rewrite` plugs into a session. Frames are the bytes after the size prefix.

    `wants_request`/`wants_response` are asked from the header alone so that frames no policy
    touches stay on the fast path. `on_request` may re-encode to another api_version (the session
    reads the version the broker will see from the returned frame); `on_response` must return the
    response in the version the client asked for (`request.api_version`).
    """

    name: str

    def wants_request(self, api_key: int, api_version: int) -> bool: ...

    def on_request(self, header: RequestHeaderInfo, request_frame: bytes) -> bytes: ...

    def wants_response(self, request: PendingRequest) -> bool: ...

    def on_response(self, request: PendingRequest, response_frame: bytes) -> bytes: ...


class PassThrough:
    """The default policy: touches nothing."""

    name = "pass-through"

    def wants_request(self, api_key: int, api_version: int) -> bool:
        return False

    def on_request(self, header: RequestHeaderInfo, request_frame: bytes) -> bytes:
        return request_frame

    def wants_response(self, request: PendingRequest) -> bool:
        return False

    def on_response(self, request: PendingRequest, response_frame: bytes) -> bytes:
        return response_frame


# ---------------------------------------------------------------------------------------------
# Commands


@dataclass(frozen=True, slots=True)
class Send:
    """Bytes for one side of the connection; which side is the subclass (the shell dispatches on
    the class)."""

    data: bytes


@dataclass(frozen=True, slots=True)
class SendUpstream(Send):
    """Bytes for the broker."""


@dataclass(frozen=True, slots=True)
class SendClient(Send):
    """Bytes for the client."""


@dataclass(frozen=True, slots=True)
class Close:
    reason: str


@dataclass(frozen=True, slots=True)
class ConnectionEvent:
    """What the capture records of connection `conn` at `ts_ns`, beside its frames."""

    conn: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class Opened(ConnectionEvent):
    """The connection opened (recorded as the capture's SYN with its comment)."""

    client: str
    upstream: str


@dataclass(frozen=True, slots=True)
class Closed(ConnectionEvent):
    """The connection ended, for `reason` (recorded as the capture's FIN with its comment)."""

    reason: str
    client_bytes: int = 0  # what each side sent over the whole connection
    upstream_bytes: int = 0


# (HEADERS, conn, ts_ns, direction, client_id, heads): header-only frames (proxy.layouts.HEADERS)
HeaderRun = tuple[str, int, int, str, str | None, bytes]
# bytes: header-only runs packed (proxy.layouts.HEADER_RUN), by a session given `header_runs`
Command = SendUpstream | SendClient | Record | Close | Opened | Closed | HeaderRun | bytes


class ProtocolViolation(Exception):
    """Input that cannot be Kafka; the connection it arrived on is closed with this reason."""


__all__ = [
    "Close",
    "Closed",
    "Command",
    "ConnectionEvent",
    "Opened",
    "PassThrough",
    "ProtocolViolation",
    "RewritePolicy",
    "Send",
    "SendClient",
    "SendUpstream",
]
