"""Kafka frames -> synthesized TCP packets in pcapng blocks (the capture writer process's work).

Each proxied connection appears twice: on interface `client` (what the client sent and got) and
on interface `upstream` (what the broker saw). Kafka frames travel in TCP segments with
consistent seq/ack per direction and valid checksums; each frame has its own JSON packet comment
(design section 3) on the packet where it starts. Frames of one connection and direction that the
proxy relayed back to back share a packet, one comment per frame in frame order (a pipelining
client would otherwise cost a packet per frame); a frame over 65,000 bytes spans several packets.
A SYN/SYN-ACK/ACK opens each stream (its comment: `{"conn", "event": "open", "client",
"upstream"}`) and FIN/ACK closes it (`{"conn", "event": "close", "reason"}`), so Wireshark follows
and reassembles the streams and its Kafka dissector decodes them (the server side uses port 9092).
SASL frames keep their header; the body is left out and its length is in `redacted_body_bytes`.
Header-only frames (record scope group: every frame outside the scope) get packets of their own
whose TCP/IP headers carry the frame's original length while the pcapng block holds only the
frame's size prefix and fixed header fields (captured length < original length, as a capture
with a snap length has it; Wireshark shows the frame truncated), without a comment since format
5 (`proxy.capture.snapped` builds them a run at a time). Format 4 gave each a comment with
`omitted_body_bytes`; the reader reads both.

scapy 2.8's `RawPcapNgWriter` names interfaces and writes per-packet comments, but writes no
section-header options, only microsecond float timestamps, and always an unnamed interface 0.
`PcapNgBlocks` subclasses it for its block framing (`build_block`) and adds those three things.
Each stream's Ethernet/IPv4/TCP header is built once by scapy (`proxy.capture.tcp`).

`Synthesizer` turns the proxy's marshalled record batches into those blocks; it runs in the
writer process that `proxy.capture.writer.CaptureWriter` starts.
"""

from __future__ import annotations

import io
import json
import struct
from typing import Any

from proxy import layouts
from proxy.capture import snapped
from proxy.capture.blocks import EPB_HEAD, LEGS, OPT_END, PADS, PcapNgBlocks, tool_version
from proxy.capture.header import (
    close_comment,
    frame_comment,
    frame_comment_head,
    frame_comment_tail,
    open_comment,
)
from proxy.capture.tcp import FLAG_ACK as _FLAG_ACK
from proxy.capture.tcp import FLAG_FIN as _FLAG_FIN
from proxy.capture.tcp import FLAG_PSH as _FLAG_PSH
from proxy.capture.tcp import FLAG_SYN as _FLAG_SYN
from proxy.capture.tcp import MAX_SEGMENT, Buffer, Stream, new_stream, payload_sum
from proxy.layouts import (
    R_API_KEY,
    R_API_VERSION,
    R_CLIENT_PAYLOAD,
    R_CONN,
    R_DIRECTION,
    R_UPSTREAM_API_VERSION,
    R_UPSTREAM_PAYLOAD,
    Record,
)
from proxy.wire import ApiKey, FrameError, peek_request_header, response_header_size

SASL_API_KEYS = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
EPB_PACKET_AT = EPB_HEAD.size  # where the packet data starts in an Enhanced Packet Block
_OPTION_HEAD = struct.Struct("<HH")
_SIZE_PREFIX = struct.Struct(">i")
_HEADER_RUN = layouts.HEADER_RUN


def _redact(record: Record, payload: bytes, direction: str) -> tuple[bytes, int | None]:
    """SASL bodies are replaced by their length (credentials are never written)."""
    if record.api_key not in SASL_API_KEYS:
        return payload, None
    try:
        if direction == "request":
            header_size = peek_request_header(payload).header_size
        else:
            header_size = response_header_size(payload, record.api_key, record.api_version)
    except FrameError:
        header_size = min(len(payload), 4)
    return payload[:header_size], len(payload) - header_size


class Synthesizer:
    """Records -> pcapng bytes. Runs in the writer process (`_writer_process_main`)."""

    def __init__(self) -> None:
        self._blocks = PcapNgBlocks(io.BytesIO())
        self._streams: dict[tuple[int, int], Stream] = {}
        # conn -> its (client, upstream) streams for the C builder's runs; dropped with them
        self._pairs: dict[int, tuple[Stream, Stream]] = {}
        self._brokers: dict[str, int] = {}
        self._json_cache: dict[str | None, str] = {}
        self._comment_heads: dict[tuple[Any, ...], str] = {}
        self.written_bytes = 0
        self.error: BaseException | None = None

    def batch(self, batch: list[Any]) -> list[Buffer]:
        """One marshalled batch from the proxy: frames as plain `Record` tuples, events tagged."""
        out: list[Buffer] = []
        run: list[tuple[Any, ...]] = []
        for entry in batch:
            packed = type(entry) is bytes  # header-only runs (most of what group scope records)
            if not packed and type(entry[R_CONN]) is int:  # a Record as a plain tuple (else an event)
                if run and (run[0][R_CONN] != entry[R_CONN] or run[0][R_DIRECTION] != entry[R_DIRECTION]):
                    self._flush_tuples(run, out)
                run.append(entry)
                continue
            if run:
                self._flush_tuples(run, out)
            try:
                if packed:
                    self._header_runs(entry, out)
                else:
                    self._write(entry, out)
            except Exception as exc:  # keep recording the rest; remember the first failure
                self.error = self.error or exc
        self._flush_tuples(run, out)
        return out

    def _header_runs(self, packed: bytes, out: list[Buffer]) -> None:
        """Runs of header-only frames, packed as `layouts.HEADER_RUN` + heads each (format 5: no
        comment; format 6: written on the client leg only, the upstream leg's stream skips them:
        `proxy.capture.snapped`). With the C builder, the whole item in one call per connection
        first seen in it (`snapped.native_header_runs`); the loop below is the reference."""
        if snapped.run_blocks is snapped.native_run_blocks:
            self._native_header_runs(packed, out)
            return
        streams = self._streams
        unpack = _HEADER_RUN.unpack_from
        step = _HEADER_RUN.size
        at = 0
        end = len(packed)
        while at < end:
            conn, ts_ns, length, whole = unpack(packed, at)
            to_server = length > 0
            if not to_server:
                length = -length
            at += step
            heads = packed[at : at + length]
            at += length
            client = streams.get((conn, 0)) or self._stream(conn, 0)
            upstream = streams.get((conn, 1)) or self._stream(conn, 1)
            out.append(snapped.run_blocks(client, upstream, to_server, ts_ns, heads, whole))
            self.written_bytes += step + length  # what the proxy counted for it

    def _native_header_runs(self, packed: bytes, out: list[Buffer]) -> None:
        pairs = self._pairs
        at, end = 0, len(packed)
        while at < end:
            blocks, at, written, error = snapped.native_header_runs(packed, at, pairs)
            if blocks:
                out.append(blocks)
            self.written_bytes += written
            if error is not None:
                raise ValueError(error)
            if at < end:  # a connection's first run: its streams, as the loop above makes them
                conn = _HEADER_RUN.unpack_from(packed, at)[0]
                pairs[conn] = (self._stream(conn, 0), self._stream(conn, 1))

    def _flush_tuples(self, run: list[tuple[Any, ...]], out: list[Buffer]) -> None:
        """The common run (nothing rewritten, no SASL, every frame fits a packet) takes
        `_write_plain_run`; anything else the general `_write_run`."""
        if not run:
            return
        plain = True
        for entry in run:
            if (
                entry[R_CLIENT_PAYLOAD] is not entry[R_UPSTREAM_PAYLOAD]
                or entry[R_API_VERSION] != entry[R_UPSTREAM_API_VERSION]
                or entry[R_API_KEY] in SASL_API_KEYS
            ):
                plain = False
                break
            if len(entry[R_CLIENT_PAYLOAD]) > MAX_SEGMENT - 4:
                plain = False
                break
        try:
            if plain:
                self._write_plain_run(run, out)
            else:
                self._write_run([Record._make(entry) for entry in run], out)
        except Exception as exc:  # keep recording the rest; remember the first failure
            self.error = self.error or exc
        run.clear()

    def _write_plain_run(self, run: list[tuple[Any, ...]], out: list[Buffer]) -> None:
        """`_write_run` for frames both legs saw alike: one set of packets, two streams.

        Per frame only the correlation id and timestamp are formatted into its comment; the rest
        of the comment is cached per (conn, direction, api_key, api_version, client_id, group_id).
        The comment codec is `proxy.capture.header` (`frame_comment_head`/`_tail`).
        """
        conn, direction = run[0][0], run[0][1]
        heads = self._comment_heads
        segments: list[tuple[bytes, bytes, int, int]] = []
        parts: list[bytes] = []
        options: list[bytes] = []
        size = 0
        first_ts = 0
        total = 0
        pack_size = _SIZE_PREFIX.pack
        pack_option = _OPTION_HEAD.pack
        tail = frame_comment_tail
        for _, _, ts_ns, api_key, api_version, _, correlation_id, client_id, group_id, payload, _ in run:
            key = (conn, direction, api_key, api_version, client_id, group_id)
            head = heads.get(key)
            if head is None:
                head = frame_comment_head(
                    conn, direction, api_key, api_version, self._json(client_id), self._json(group_id)
                )
                if len(heads) < 10_000:
                    heads[key] = head
            comment = (head + tail(correlation_id, ts_ns)).encode()
            length = 4 + len(payload)
            if size + length > MAX_SEGMENT:
                data = b"".join(parts)
                options.append(OPT_END)
                segments.append((data, b"".join(options), payload_sum(data), first_ts))
                parts, options, size = [], [], 0
            if not parts:
                first_ts = ts_ns
            parts += (pack_size(len(payload)), payload)
            options += (pack_option(1, len(comment)), comment, PADS[len(comment) & 3])
            size += length
            total += len(payload)
        if parts:
            data = b"".join(parts)
            options.append(OPT_END)
            segments.append((data, b"".join(options), payload_sum(data), first_ts))
        to_server = direction == "request"
        block = self._blocks.packet_block_with_options
        for leg in (0, 1):
            stream = self._stream(conn, leg)
            for data, packet_options, body, ts_ns in segments:
                out.append(
                    block(
                        stream.packet(to_server, _FLAG_PSH | _FLAG_ACK, data, body),
                        leg,
                        ts_ns,
                        packet_options,
                    )
                )
        self.written_bytes += total

    def _stream(self, conn: int, leg: int, upstream: str | None = None) -> Stream:
        key = (conn, leg)
        stream = self._streams.get(key)
        if stream is None:
            index = self._brokers.setdefault(upstream or "?", len(self._brokers) + 1) if leg else 0
            stream = self._streams[key] = new_stream(conn, leg, index)
        return stream

    def _write(self, entry: tuple[Any, ...], out: list[Buffer]) -> None:
        blocks = self._blocks
        match entry:
            case (layouts.OPEN, conn, ts_ns, client, upstream):
                for leg in (0, 1):
                    stream = self._stream(conn, leg, upstream)
                    comment = open_comment(conn, client, upstream)
                    syn = stream.packet(True, _FLAG_SYN, b"")
                    synack = stream.packet(False, _FLAG_SYN | _FLAG_ACK, b"")
                    ack = stream.packet(True, _FLAG_ACK, b"")
                    out.append(blocks.packet_block(syn, leg, ts_ns, comment))
                    out.append(blocks.packet_block(synack, leg, ts_ns, None))
                    out.append(blocks.packet_block(ack, leg, ts_ns, None))
            case (layouts.CLOSE, conn, ts_ns, reason, client_bytes, upstream_bytes):
                comment = close_comment(conn, reason, client_bytes, upstream_bytes)
                self._pairs.pop(conn, None)
                for leg in (0, 1):
                    closing = self._streams.pop((conn, leg), None)
                    if closing is None:
                        continue
                    out.append(
                        blocks.packet_block(
                            closing.packet(True, _FLAG_FIN | _FLAG_ACK, b""), leg, ts_ns, comment
                        )
                    )
                    out.append(
                        blocks.packet_block(
                            closing.packet(False, _FLAG_FIN | _FLAG_ACK, b""), leg, ts_ns, None
                        )
                    )
                    out.append(blocks.packet_block(closing.packet(True, _FLAG_ACK, b""), leg, ts_ns, None))

    def _json(self, text: str | None) -> str:
        cached = self._json_cache.get(text)
        if cached is None:
            cached = json.dumps(text)
            if len(self._json_cache) < 10_000:
                self._json_cache[text] = cached
        return cached

    def _comment(self, record: Record, api_version: int, redacted: int | None) -> bytes:
        return frame_comment(
            record.conn,
            record.direction,
            record.api_key,
            api_version,
            record.correlation_id,
            self._json(record.client_id),
            self._json(record.group_id),
            record.ts_ns,
            record.rewritten,
            redacted,
        )

    def _segments(self, run: list[Record], leg: int) -> list[tuple[Buffer, list[bytes], int, int]]:
        """(payload, comments, payload sum, ts_ns) per packet for one leg of a run of frames.

        Consecutive frames of one connection and direction share a packet (up to MAX_SEGMENT
        bytes), each with its own JSON comment, in order; a larger frame spans several packets
        and its comment rides on the first.
        """
        segments: list[tuple[Buffer, list[bytes], int, int]] = []
        parts: list[bytes] = []
        comments: list[bytes] = []
        size = 0
        first_ts = 0

        def flush() -> None:
            nonlocal parts, comments, size
            if parts:
                data = b"".join(parts)
                segments.append((data, comments, payload_sum(data), first_ts))
            parts, comments, size = [], [], 0

        for record in run:
            payload = record.client_payload if leg == 0 else record.upstream_payload
            api_version = record.api_version if leg == 0 else record.upstream_api_version
            redacted = None
            if record.api_key in SASL_API_KEYS:
                payload, redacted = _redact(record, payload, record.direction)
            comment = self._comment(record, api_version, redacted)
            length = 4 + len(payload)
            if size + length > MAX_SEGMENT:
                flush()
            if length > MAX_SEGMENT:
                data = memoryview(struct.pack(">i", len(payload)) + payload)  # pieces without copies
                first: list[bytes] = [comment]
                for start in range(0, length, MAX_SEGMENT):
                    piece = data[start : start + MAX_SEGMENT]
                    segments.append((piece, first, payload_sum(piece), record.ts_ns))
                    first = []
                continue
            if not parts:
                first_ts = record.ts_ns
            parts += (struct.pack(">i", len(payload)), payload)
            comments.append(comment)
            size += length
        flush()
        return segments

    def _write_run(self, run: list[Record], out: list[Buffer]) -> None:
        to_server = run[0].direction == "request"
        conn = run[0].conn
        packet_block = self._blocks.packet_block
        identical = all(
            r.client_payload is r.upstream_payload and r.api_version == r.upstream_api_version for r in run
        )
        shared = self._segments(run, 0) if identical else None
        for leg in (0, 1):
            stream = self._stream(conn, leg)
            segments = shared if shared is not None else self._segments(run, leg)
            for data, comments, body, ts_ns in segments:
                if len(data) < 4096:
                    packet = stream.packet(to_server, _FLAG_PSH | _FLAG_ACK, data, body)
                    out.append(packet_block(packet, leg, ts_ns, comments or None))
                    continue
                # A big segment: its block goes out in parts (written with writelines, not copied).
                header = stream.header(to_server, _FLAG_PSH | _FLAG_ACK, len(data), body)
                block = packet_block(header, leg, ts_ns, comments or None, len(data))
                out += (block[: EPB_PACKET_AT + len(header)], data, block[EPB_PACKET_AT + len(header) :])
        self.written_bytes += sum(len(r.client_payload) for r in run)


__all__ = [
    "LEGS",
    "MAX_SEGMENT",
    "SASL_API_KEYS",
    "Buffer",
    "PcapNgBlocks",
    "Synthesizer",
    "payload_sum",
    "tool_version",
]
