"""Tuple layouts on the proxy's hot path, named once (issue 11 s4).

The relay builds plain tuples where a class per frame would cost more than the relay itself:
a `Record` per recorded frame (built from a tuple by `new_record`, indexed by the capture
writer), a pending request per relayed request (`proxy.wire.correlation.PendingRequest`'s
fields as a plain tuple), and the tagged event tuples the capture writer's batches carry.
Their field positions are declared here and nowhere else; `tests/test_proxy_session.py` checks
them against the NamedTuples' own field order.
"""

from __future__ import annotations

import functools
import struct
from typing import Final, NamedTuple

from proxy.wire.correlation import PendingTuple


class Record(NamedTuple):
    """One Kafka frame as each leg saw it (the same object twice when nothing rewrote it).

    A NamedTuple: one is built per recorded frame, on the event loop's hot path.
    """

    conn: int
    direction: str  # "request" | "response"
    ts_ns: int
    api_key: int
    api_version: int  # the client's version; upstream_api_version is what the broker saw
    upstream_api_version: int
    correlation_id: int
    client_id: str | None
    group_id: str | None
    client_payload: bytes  # frame without its size prefix, as the client sent or received it
    upstream_payload: bytes  # as the broker received or sent it

    @property
    def rewritten(self) -> bool:
        same = self.client_payload is self.upstream_payload
        return not same and self.client_payload != self.upstream_payload


new_record = functools.partial(tuple.__new__, Record)  # a Record from a tuple, minus __new__'s call


# Record positions (the capture writer reads marshalled Records as plain tuples).
R_CONN: Final = 0
R_DIRECTION: Final = 1
R_API_KEY: Final = 3
R_API_VERSION: Final = 4
R_UPSTREAM_API_VERSION: Final = 5
R_CLIENT_PAYLOAD: Final = 9
R_UPSTREAM_PAYLOAD: Final = 10

# Pending-request positions (proxy.wire.correlation.PendingRequest's fields, as plain tuples).
P_API_KEY: Final = 0
P_API_VERSION: Final = 1
P_CORRELATION_ID: Final = 2
P_CLIENT_ID: Final = 3
P_UPSTREAM_API_VERSION: Final = 4
P_GROUP_ID: Final = 5
P_SENT_NS: Final = 6


def record_of(
    conn: int, direction: str, ts_ns: int, request: PendingTuple, client_payload: bytes, upstream: bytes
) -> Record:
    """The Record of a frame of `request` (the request itself or its response; `upstream` is the
    frame as the broker saw it): the header fields are the pending request's (a `PendingRequest`
    or its plain tuple)."""
    return new_record(
        (conn, direction, ts_ns, request[P_API_KEY], request[P_API_VERSION],
         request[P_UPSTREAM_API_VERSION], request[P_CORRELATION_ID], request[P_CLIENT_ID],
         request[P_GROUP_ID], client_payload, upstream)
    )  # fmt: skip


# The capture writer's batches: Records as tuples, and connection events tagged by a string
# in the first position (a Record starts with its int conn): (OPEN, conn, ts_ns, client,
# upstream) and (CLOSE, conn, ts_ns, reason, client_bytes, upstream_bytes).
OPEN: Final = "open"
CLOSE: Final = "close"
# Header-only frames (record scope group), one event per run of them on one connection and
# direction: (HEADERS, conn, ts_ns, direction, client_id, heads). `heads` packs each frame's fixed
# fields back to back: a request's `REQUEST_HEADS` (size, api_key, api_version, correlation_id:
# its first 12 bytes on the wire), a response's `RESPONSE_HEADS` (size, correlation_id: its first
# 8 bytes). Both are the bytes the capture keeps of the frame (`proxy.capture.snapped`): the relay
# slices them, packs nothing.
HEADERS: Final = "headers"
REQUEST_HEADS: Final = struct.Struct(">ihhi")
RESPONSE_HEADS: Final = struct.Struct(">ii")
# How the capture writer hands header-only runs to its process: not one tuple each (marshal
# took ~0.3 us a tuple on the event loop) but packed back to back into one bytes item of the
# batch, each run as `HEADER_RUN` (conn, ts_ns, length of what follows: > 0 requests, < 0
# responses, and WHOLE_FRAMES when the run's frames follow whole, else their heads) followed by
# its heads or frames. Small frames go whole: the relay then slices nothing per frame.
HEADER_RUN: Final = struct.Struct("<Iqi?")
HEADS: Final = False
WHOLE_FRAMES: Final = True

__all__ = [
    "CLOSE",
    "HEADERS",
    "HEADER_RUN",
    "HEADS",
    "OPEN",
    "P_API_KEY",
    "P_API_VERSION",
    "P_CLIENT_ID",
    "P_CORRELATION_ID",
    "P_GROUP_ID",
    "P_SENT_NS",
    "P_UPSTREAM_API_VERSION",
    "REQUEST_HEADS",
    "RESPONSE_HEADS",
    "R_API_KEY",
    "R_API_VERSION",
    "R_CLIENT_PAYLOAD",
    "R_CONN",
    "R_DIRECTION",
    "R_UPSTREAM_API_VERSION",
    "R_UPSTREAM_PAYLOAD",
    "WHOLE_FRAMES",
    "Record",
    "new_record",
    "record_of",
]
