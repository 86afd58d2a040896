"""Reading captures back: frames per connection and leg, and request/response exchanges.

`read_capture(path)` never raises on a damaged tail: it returns every whole frame before the
damage and says what the damage was in `Capture.damage`. It raises `CaptureFormatError` only for
a file that is not a group-replay capture at all.
"""

from __future__ import annotations

import struct
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from proxy.capture.header import (
    CommentError,
    GroupSettings,
    RecordScope,
    SectionHeader,
    decode_packet_comment,
    decode_section_header,
)
from proxy.capture.pcapng import CaptureFormatError, parse, tcp_payload
from proxy.wire import (
    REQUEST_PREFIX_BYTES,
    CodecError,
    FrameError,
    decode_request,
    decode_response,
    peek_request_header,
)

__all__ = [
    "Capture",
    "CaptureFormatError",
    "CapturedFrame",
    "Connection",
    "Exchange",
    "GroupSettings",
    "exchanges",
    "read_capture",
]


@dataclass(frozen=True, slots=True)
class CapturedFrame:
    conn: int
    leg: str  # "client" | "upstream"
    direction: str  # "request" | "response"
    ts_ns: int
    api_key: int
    api_version: int  # the version on this leg
    correlation_id: int
    client_id: str | None
    group_id: str | None
    rewritten: bool
    payload: bytes  # the frame without its size prefix (SASL: the header only)
    redacted_body_bytes: int | None = None  # set when a SASL body was left out
    # Header-only frames (record scope group, formats 4 and 5): `payload` is the fixed header
    # fields and this many bytes of the frame are not in the capture. A format-5 header-only
    # response whose request the capture lacks has api_key and api_version -1.
    omitted_body_bytes: int | None = None

    @property
    def header_only(self) -> bool:
        return self.omitted_body_bytes is not None


@dataclass(frozen=True, slots=True)
class Connection:
    conn: int
    client: str | None
    upstream: str | None
    opened_ns: int | None
    closed_ns: int | None = None
    close_reason: str | None = None
    client_bytes: int | None = None  # every byte each side sent, recorded or not (format 3)
    upstream_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class Capture:
    header: dict[
        str, Any
    ]  # the section header comment: format, format_version, tool_version, upstream, policy
    frames: list[CapturedFrame]
    damage: str | None  # None when the file ended cleanly
    connections: dict[int, Connection] = field(default_factory=dict)
    group_settings: GroupSettings | None = None  # the recorded broker's (AGREED #2); None if not asked
    # Which frames were recorded (issue 12): GROUP holds the group APIs and their lookups only.
    record_scope: RecordScope = RecordScope.ALL


@dataclass(frozen=True, slots=True)
class Exchange:
    """A request and the response that answered it (None when none was captured)."""

    request: CapturedFrame
    response: CapturedFrame | None

    @property
    def conn(self) -> int:
        return self.request.conn

    def decode(self) -> tuple[Any, Any]:
        """(request entity, response entity or None) through kio. Raises CodecError."""
        if self.request.redacted_body_bytes is not None:
            raise CodecError("SASL bodies are not recorded")
        if self.request.header_only or (self.response is not None and self.response.header_only):
            raise CodecError("recorded as its header only (record scope group)")
        _, request = decode_request(self.request.payload)
        response = None
        if self.response is not None:
            _, response = decode_response(
                self.response.payload, self.response.api_key, self.response.api_version
            )
        return request, response


def read_capture(path: str | Path) -> Capture:  # noqa: C901 - one pass over the file: each block kind and each damage case is a branch
    data = Path(path).read_bytes()
    section, packets, damage = parse(data)
    section_header: SectionHeader | None = None
    for comment in section.comments:
        section_header = decode_section_header(comment) or section_header
    if section_header is None:
        raise CaptureFormatError(f"{path}: not a group-replay capture (no section header comment)")
    header = section_header.as_dict()
    if section_header.damage:
        damage = f"section header: {section_header.damage}"
    names = [interface.name for interface in section.interfaces]
    frames: list[CapturedFrame] = []
    connections: dict[int, Connection] = {}
    current: tuple[dict[str, Any], str, bytearray, int] | None = None  # meta, leg, bytes, expected
    # Format 5's header-only packets carry no comment: their connection comes from the TCP stream
    # (the SYN carries the open comment), their API from their bytes or the request they answer.
    # Format 6 writes them on the client leg only: each is read on both legs.
    version = section_header.format_version
    header_only = _HeaderOnly(mirrored=version >= 6) if version >= 5 else None

    def finish() -> None:
        nonlocal current, damage
        assert current is not None
        meta, leg, buffer, _ = current
        current = None
        problem = _frame_problem(meta, buffer)
        if problem is not None:
            damage = damage or f"a frame of connection {meta['conn']} is damaged: {problem}"
            return
        frames.append(
            CapturedFrame(
                conn=int(meta["conn"]),
                leg=leg,
                direction=str(meta["dir"]),
                ts_ns=int(meta["ts_ns"]),
                api_key=int(meta["api_key"]),
                api_version=int(meta["api_version"]),
                correlation_id=int(meta["correlation_id"]),
                client_id=meta.get("client_id"),
                group_id=meta.get("group_id"),
                rewritten=bool(meta.get("rewritten", False)),
                payload=bytes(buffer[4:]),
                redacted_body_bytes=meta.get("redacted_body_bytes"),
                omitted_body_bytes=meta.get("omitted_body_bytes"),
            )
        )

    for index, packet in enumerate(packets):
        metas: list[dict[str, Any]] = []
        try:
            for comment in packet.comments:
                meta = decode_packet_comment(comment)
                if meta is not None:
                    metas.append(meta)
            payload, endpoints = tcp_payload(packet.data, packet.original_length is not None)
        except (CommentError, ValueError) as exc:
            damage = damage or f"packet {index}: {exc}"
            current = None
            continue
        if current is not None and (metas or not payload):
            damage = damage or f"packet {index}: a frame of connection {current[0]['conn']} is incomplete"
            current = None
        if metas and "event" in metas[0]:
            meta = metas[0]
            conn = int(meta["conn"])
            if meta["event"] == "open":
                connections[conn] = Connection(conn, meta.get("client"), meta.get("upstream"), packet.ts_ns)
                if header_only is not None:
                    header_only.opened(conn, packet.interface, endpoints)
            elif meta["event"] == "close" and conn in connections:
                previous = connections[conn]
                connections[conn] = Connection(
                    conn,
                    previous.client,
                    previous.upstream,
                    previous.opened_ns,
                    packet.ts_ns,
                    meta.get("reason"),
                    meta.get("client_bytes"),
                    meta.get("upstream_bytes"),
                )
            continue
        leg = names[packet.interface] if packet.interface < len(names) else str(packet.interface)
        if not metas:
            if current is not None and payload:
                current[2].extend(payload)
                if len(current[2]) >= current[3]:
                    finish()
            elif header_only is not None and payload:
                try:
                    frames += header_only.frames(packet.interface, names, packet.ts_ns, endpoints, payload)
                except ValueError as exc:
                    damage = damage or f"packet {index}: {exc}"
            continue
        # One packet may carry several whole frames, one comment each, in order; only the last
        # may continue into the following (uncommented) packets.
        offset = 0
        for number, meta in enumerate(metas):
            if "dir" not in meta:
                continue
            if len(payload) - offset < 4:
                damage = damage or f"packet {index}: frame without its size prefix"
                break
            expected = 4 + int.from_bytes(payload[offset : offset + 4], "big", signed=True)
            if meta.get("omitted_body_bytes") is not None:  # header only: what its packet holds
                expected = min(expected, len(payload) - offset)
            take = min(expected, len(payload) - offset)
            current = (meta, leg, bytearray(payload[offset : offset + take]), expected)
            offset += take
            if take == expected:
                finish()
            elif number != len(metas) - 1:
                damage = damage or f"packet {index}: a frame of connection {meta['conn']} is cut short"
                current = None
                break
    if current is not None:
        damage = damage or f"the capture ends inside a frame of connection {current[0]['conn']}"
    return Capture(
        header=header,
        frames=frames,
        damage=damage,
        connections=connections,
        group_settings=section_header.group_settings,
        record_scope=section_header.record_scope,
    )


class _HeaderOnly:
    """Reads format 5's header-only packets (no comment; `proxy.capture.snapped` writes them),
    and format 6's, written on the client leg only (`mirrored`: each is also the upstream leg's
    frame: a header-only frame is one the proxy relayed unchanged)."""

    def __init__(self, mirrored: bool = False) -> None:
        self._mirrored = mirrored
        self._streams: dict[tuple[int, bytes, int, bytes, int], tuple[int, str]] = {}
        self._requests: dict[tuple[int, int, int], tuple[int, int]] = {}  # (conn, leg, corr) -> API

    def opened(self, conn: int, interface: int, endpoints: tuple[bytes, int, bytes, int]) -> None:
        """The SYN of `conn` on `interface`: its endpoints name the stream both ways."""
        src, sport, dst, dport = endpoints
        self._streams[(interface, src, sport, dst, dport)] = (conn, "request")
        self._streams[(interface, dst, dport, src, sport)] = (conn, "response")

    def frames(
        self,
        interface: int,
        names: list[str],
        ts_ns: int,
        endpoints: tuple[bytes, int, bytes, int],
        data: bytes,
    ) -> list[CapturedFrame]:
        """The header-only frame starting in a comment-less packet, on its leg (format 6: on the
        client leg and then the upstream leg); ValueError when it is damaged."""
        found = self._streams.get((interface, *endpoints))
        if found is None:
            raise ValueError("a header-only frame of a connection the capture never opened")
        conn, direction = found
        if len(data) < (4 + REQUEST_PREFIX_BYTES if direction == "request" else 8):
            raise ValueError(f"a {len(data)}-byte header-only {direction}")
        size = int.from_bytes(data[:4], "big", signed=True)
        if direction == "request":
            api_key, api_version, correlation_id = _REQUEST_PREFIX.unpack_from(data, 4)
            self._requests[(conn, interface, correlation_id)] = (api_key, api_version)
        else:
            correlation_id = int.from_bytes(data[4:8], "big", signed=True)
            api_key, api_version = self._requests.pop((conn, interface, correlation_id), (-1, -1))
        if self._mirrored and interface == 0:
            legs = names[:2] if len(names) >= 2 else ["client", "upstream"]
        else:
            legs = [names[interface] if interface < len(names) else str(interface)]
        payload, omitted = data[4:], max(0, size - (len(data) - 4))
        return [
            CapturedFrame(
                conn=conn,
                leg=leg,
                direction=direction,
                ts_ns=ts_ns,
                api_key=api_key,
                api_version=api_version,
                correlation_id=correlation_id,
                client_id=None,
                group_id=None,
                rewritten=False,
                payload=payload,
                omitted_body_bytes=omitted,
            )
            for leg in legs
        ]


_REQUEST_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id


def _frame_problem(meta: dict[str, Any], buffer: bytearray) -> str | None:
    """Why a reassembled frame cannot be used (its header is not there), or None."""
    if meta["dir"] == "request":
        if meta.get("redacted_body_bytes") is None and meta.get("omitted_body_bytes") is None:
            try:
                header = peek_request_header(bytes(buffer[4:]))
            except FrameError as exc:
                return str(exc)
            if (header.api_key, header.correlation_id) != (meta["api_key"], meta["correlation_id"]):
                return "its header does not match its comment"
        elif len(buffer) < 4 + REQUEST_PREFIX_BYTES:
            return f"a {len(buffer) - 4}-byte request"
    elif len(buffer) < 8:
        return f"a {len(buffer) - 4}-byte response"
    return None


def exchanges(capture: Capture, leg: str = "client") -> list[Exchange]:
    """Requests paired with their responses per connection (FIFO by correlation id), in request order."""
    pending: dict[int, deque[int]] = defaultdict(deque)
    slots: list[list[CapturedFrame | None]] = []
    by_correlation: dict[tuple[int, int], int] = {}
    for captured in capture.frames:
        if captured.leg != leg:
            continue
        if captured.direction == "request":
            by_correlation[(captured.conn, captured.correlation_id)] = len(slots)
            pending[captured.conn].append(len(slots))
            slots.append([captured, None])
        else:
            slot = by_correlation.pop((captured.conn, captured.correlation_id), None)
            if slot is not None:
                slots[slot][1] = captured
    result: list[Exchange] = []
    for request, response in slots:
        assert request is not None
        result.append(Exchange(request, response))
    return result
