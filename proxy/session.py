"""Sans-IO relay of one proxied client connection: bytes in, commands out.

The asyncio shell (`proxy.server`) feeds `client_data` with what the client sent and
`upstream_data` with what the broker sent, and carries out the returned commands: `SendUpstream`,
`SendClient`, `Record` (hand a frame to the capture writer) and `Close` (with the reason to log).
The session never reads a clock: the shell passes `now_ns`.

Fast path (Kroxylicious' approach): a frame whose API nobody needs is parsed only as far as its
4-byte size and request-header prefix (api_key, api_version, correlation_id) or, for a response,
its correlation id; its bytes are forwarded as they arrive, and an input chunk made only of such
frames is forwarded as the very same bytes object. A frame is kept whole only when it is recorded,
decoded (the group APIs) or rewritten (broker addresses, a rewrite policy); it is held back from
the other side only when it is rewritten.

Runs of whole opaque frames inside one read (what a pipelining client sends) are walked by one
loop per read (`_scan_requests`/`_scan_responses`): per frame one `struct.unpack_from`, a set
lookup and a deque append or pop of a plain tuple, no call; the read still goes out as one write.
While recording, the same loop slices each frame once into its `Record`. Anything else (a frame
cut by the read, a group API, an address-bearing response, a rewrite policy) takes the general
frame-by-frame path, which emits the same commands (a property test checks this).
"""

from __future__ import annotations

import struct

from proxy.addressing import ADDRESS_API_KEYS, AddressRewriter
from proxy.commands import (
    Close,
    Closed,
    Command,
    Opened,
    PassThrough,
    ProtocolViolation,
    RewritePolicy,
    SendClient,
    SendUpstream,
)
from proxy.counts import ApiCounts
from proxy.direction import DEFAULT_MAX_BUFFERED_BYTES, BudgetExceeded, BufferBudget, Direction
from proxy.header_runs import WHOLE_FRAME_BYTES, HeaderRuns, append_run, native_append_heads
from proxy.layouts import (
    P_API_KEY,
    P_API_VERSION,
    P_CLIENT_ID,
    P_CORRELATION_ID,
    P_GROUP_ID,
    P_SENT_NS,
    P_UPSTREAM_API_VERSION,
    REQUEST_HEADS,
    RESPONSE_HEADS,
    WHOLE_FRAMES,
    Record,
    new_record,
    record_of,
)
from proxy.raw_sasl import _RAW_SASL_TOKEN, RawSaslTokens
from proxy.wire import (
    DEFAULT_MAX_FRAME_BYTES,
    GROUP_API_KEYS,
    KNOWN_API_KEYS,
    MAX_PENDING_REQUESTS,
    REQUEST_PREFIX_BYTES,
    ApiKey,
    CodecError,
    CorrelationError,
    CorrelationTable,
    FrameError,
    PendingRequest,
    api_name,
    decode_request_body,
    peek_correlation_id,
    peek_request_header,
    peek_request_prefix,
    request_group_id,
    request_header_version,
    supports,
)

# ---------------------------------------------------------------------------------------------
# Frame layouts the relay reads without decoding

_REQUEST_HEAD = struct.Struct(">ihhi")  # size, api_key, api_version, correlation_id
_RESPONSE_HEAD = struct.Struct(">ii")  # size, correlation_id
_RECORDED_REQUEST_HEAD = struct.Struct(">ihhih")  # ... and the client_id length
_JOIN_GROUP = int(ApiKey.JOIN_GROUP)
# Requests the relay never decodes: paired by correlation id and forwarded, nothing more.
OPAQUE_REQUEST_KEYS = KNOWN_API_KEYS - GROUP_API_KEYS - {ApiKey.SASL_HANDSHAKE}


# ---------------------------------------------------------------------------------------------
# The session


class ProxySession(RawSaslTokens, HeaderRuns):
    """Relays one client connection to its upstream broker.

    `record`: emit a `Record` for the frames of the APIs in `record_api_keys` (None: every frame;
    `proxy.capture.header.RecordScope` names the sets). Frames of other APIs stay on the fast path
    and are recorded as their header only: one `HeaderRun` per run of them (`proxy.layouts.HEADERS`:
    each frame's size and fixed header fields packed back to back, a few bytes a frame instead of
    a Record). With `header_runs` (a bytearray the shell's recorder drains) those runs are packed
    onto it instead (`proxy.layouts.HEADER_RUN` + heads each): no command and no call per read,
    which is most of what group scope cost the event loop per read; before a `Record` the
    session emits what `header_runs` holds as one `bytes` command, so the recorder keeps each
    connection's order. The session counts every byte each
    side sent (`client_bytes`, `upstream_bytes`, in the capture's close comment). `addresses`:
    rewrite broker endpoints so that clients come back through the proxy. `policy`: the rewrite
    hook.
    """

    def __init__(
        self,
        conn: int,
        *,
        record: bool = False,
        record_api_keys: frozenset[int] | None = None,
        policy: RewritePolicy | None = None,
        addresses: AddressRewriter | None = None,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
        budget: BufferBudget | None = None,
        count_apis: bool = False,
        header_runs: bytearray | None = None,
    ) -> None:
        self.conn = conn
        # Per API key (index): frames and bytes (size prefix included) each way, when asked for
        # (`count_apis`, the proxy's --metrics); a None check per frame otherwise.
        self.api_counts: ApiCounts | None = ApiCounts() if count_apis else None
        self.record = record
        self._record_all = record and record_api_keys is None
        self._record_keys: frozenset[int] = (record_api_keys or frozenset()) if record else frozenset()
        self._header_only = record and record_api_keys is not None  # the other frames' headers
        self._sink = header_runs if self._header_only else None  # where their runs go, packed
        self.client_bytes = 0  # everything the client sent, recorded or not
        self.upstream_bytes = 0
        self.policy: RewritePolicy = policy if policy is not None else PassThrough()
        self._passthrough = type(self.policy) is PassThrough  # skip the hook calls entirely
        self.addresses = addresses
        self.table = CorrelationTable()
        self.closed: str | None = None
        self._ended = False
        self.client_id: str | None = None
        self._raw_client_id: bytes | None = None  # client_id's bytes, to decode it once per change
        self._now_ns = 0
        # Counters for the proxy's summary (kept per run of frames, not per frame, on the fast path).
        self.requests = 0
        self.responses = 0
        self.group_requests = 0
        self.rewrites = 0
        self._events: list[Command] = []
        self._request_prefix = (0, 0, 0)
        self._response_for: PendingRequest | None = None
        self._response_policy = False
        self._requests = Direction(
            REQUEST_PREFIX_BYTES, max_frame_bytes, self._classify_request, self._finish_request
        )
        self._responses = Direction(4, max_frame_bytes, self._classify_response, self._finish_response)
        if self._passthrough:
            # No policy: runs of opaque frames skip the per-frame calls (and, when recording, the
            # generic keep-and-finish path: each frame is sliced once into its Record).
            self._requests.scan = self._scan_recorded_requests if self._record_all else self._scan_requests
            self._responses.scan = self._scan_recorded_responses if self._record_all else self._scan_responses
        self._requests.budget = self._responses.budget = budget
        self._scans = (self._requests.scan, self._responses.scan)
        # SASL before KIP-152: after a successful SaslHandshake v0 the client sends raw tokens
        # (a size prefix, no Kafka header) and the broker answers each with a raw token, until the
        # mechanism completes (Kafka's SaslServerAuthenticator). None: not in that state; else the
        # client tokens still to come (-1: unknown, until a frame parses as a Kafka request).
        self._raw_sasl_tokens: int | None = None
        self._sasl_mechanism: str | None = None
        self._max_frame_bytes = max_frame_bytes
        self._address_keys = ADDRESS_API_KEYS if addresses is not None else frozenset()
        # The unrecording scans stop at a recorded API's frame (the general path records it).
        self._opaque_request_keys = OPAQUE_REQUEST_KEYS - self._record_keys
        self._held_response_keys = self._address_keys | self._record_keys

    # -- input ---------------------------------------------------------------------------------

    def client_data(self, data: bytes, now_ns: int) -> list[Command]:
        """Bytes the client sent -> commands (SendUpstream first, then Records, or a Close)."""
        self.client_bytes += len(data)
        return self._feed(self._requests, data, now_ns, SendUpstream, "client")

    def upstream_data(self, data: bytes, now_ns: int) -> list[Command]:
        """Bytes the broker sent -> commands (SendClient first, then Records, or a Close)."""
        self.upstream_bytes += len(data)
        return self._feed(self._responses, data, now_ns, SendClient, "upstream")

    def _feed(
        self,
        direction: Direction,
        data: bytes,
        now_ns: int,
        send: type[SendUpstream] | type[SendClient],
        side: str,
    ) -> list[Command]:
        if self.closed is not None:
            return []
        self._now_ns = now_ns
        events = self._events = []
        try:
            pieces = direction.feed(data)
        except BudgetExceeded as exc:
            self.closed = str(exc)
        except (FrameError, ProtocolViolation, CodecError, CorrelationError) as exc:
            self.closed = f"malformed {side} frame: {exc}"
        if events and self._sink:  # runs after this read's Records: theirs to follow, in order
            events.append(bytes(self._sink))
            self._sink.clear()
        if self.closed is not None:
            self.release()
            return [*events, Close(self.closed)]
        commands: list[Command] = []
        if pieces:
            commands.append(send(pieces[0] if len(pieces) == 1 else b"".join(pieces)))
        commands += events
        return commands

    def connection_opened(self, now_ns: int, client: str, upstream: str) -> list[Command]:
        """The shell accepted the client and is connecting to `upstream`: [Opened] when recording.

        With `connection_closed`, this makes the capture a pure function of the session's
        commands: the shell hands Records, Opened and Closed to the recorder and nothing else."""
        return [Opened(self.conn, now_ns, client, upstream)] if self.record else []

    def connection_closed(self, now_ns: int, reason: str) -> list[Command]:
        """The connection ended (either side, or a Close this session asked for): [Closed] once
        when recording; its partial frames' bytes go back to the budget."""
        self.release()
        if self._ended:
            return []
        self._ended = True
        self.closed = self.closed or reason
        if not self.record:
            return []
        return [Closed(self.conn, now_ns, reason, self.client_bytes, self.upstream_bytes)]

    def release(self) -> None:
        """Give the partial frames' bytes back (the shell calls it when the connection ends)."""
        self._requests.release()
        self._responses.release()

    @property
    def pending_requests(self) -> int:
        return len(self.table)

    # -- fast path: runs of opaque frames ------------------------------------------------------

    def _scan_requests(self, data: bytes, pos: int, n: int) -> int:
        """Pairs each whole opaque request from `pos` on; stops at anything else (the general path
        then handles it: a partial frame, a group API, a bad size or api_key)."""
        unpack = _REQUEST_HEAD.unpack_from
        opaque = self._opaque_request_keys
        pending = self.table.pending
        append = pending.append
        client_id = self.client_id
        now_ns = self._now_ns
        maximum = self._max_frame_bytes
        before = len(pending)
        counts = self.api_counts
        start = pos
        while n - pos >= 12:
            size, api_key, api_version, correlation_id = unpack(data, pos)
            end = pos + 4 + size
            if end > n or size < REQUEST_PREFIX_BYTES or size > maximum or api_key not in opaque:
                break
            append((api_key, api_version, correlation_id, client_id, api_version, None, now_ns))
            if counts is not None:
                counts.requests[api_key] += 1
                counts.request_bytes[api_key] += 4 + size
            pos = end
        if self._header_only and pos > start:
            sink = self._sink  # inline: a call per read was ~1,000 instructions
            if sink is not None and native_append_heads is not None:  # the heads, walked in C
                native_append_heads(sink, self.conn, now_ns, True, data, start, pos)
            elif sink is not None and pos - start <= WHOLE_FRAME_BYTES * (len(pending) - before):
                append_run(sink, self.conn, now_ns, True, WHOLE_FRAMES, data, start, pos)
            else:
                self._header_frames("request", data, start, pos, len(pending) - before)
        self.requests += len(pending) - before
        if len(pending) > MAX_PENDING_REQUESTS:
            self.table.trim()  # amortized: a pass only when the table has grown enough
        return pos

    def _scan_responses(self, data: bytes, pos: int, n: int) -> int:
        """Pops the request each whole response from `pos` on answers, while it is the oldest
        pending one and needs no rewrite; stops at anything else (the general path decides)."""
        pending = self.table.pending
        unpack = _RESPONSE_HEAD.unpack_from
        popleft = pending.popleft
        held_keys = self._held_response_keys
        maximum = self._max_frame_bytes
        before = len(pending)
        counts = self.api_counts
        start = pos
        while n - pos >= 8 and pending:
            size, correlation_id = unpack(data, pos)
            end = pos + 4 + size
            if end > n or size < 4 or size > maximum:
                break
            head = pending[0]
            if head[P_CORRELATION_ID] != correlation_id or head[P_API_KEY] in held_keys:
                break
            popleft()
            if counts is not None:
                counts.responses[head[P_API_KEY]] += 1
                counts.response_bytes[head[P_API_KEY]] += 4 + size
                counts.latency_ns[head[P_API_KEY]] += self._now_ns - head[P_SENT_NS]
                if head[P_API_KEY] == _JOIN_GROUP:
                    counts.count_join(head[P_GROUP_ID])
            pos = end
        if self._header_only and pos > start:
            sink = self._sink  # as in `_scan_requests`
            if sink is not None and native_append_heads is not None:
                native_append_heads(sink, self.conn, self._now_ns, False, data, start, pos)
            elif sink is not None and pos - start <= WHOLE_FRAME_BYTES * (before - len(pending)):
                append_run(sink, self.conn, self._now_ns, False, WHOLE_FRAMES, data, start, pos)
            else:
                self._header_frames("response", data, start, pos, before - len(pending))
        self.responses += before - len(pending)
        return pos

    def _scan_recorded_requests(self, data: bytes, pos: int, n: int) -> int:  # noqa: C901 - measured
        # hot-path loop (bench/proxy_overhead.py): every check inline, no call per frame; it repeats
        # `_scan_requests`' checks deliberately (a shared helper would cost a call per frame)
        """`_scan_requests` while recording: also reads the client id and emits each `Record`."""
        unpack = _RECORDED_REQUEST_HEAD.unpack_from
        header_version = request_header_version
        opaque = OPAQUE_REQUEST_KEYS
        pending = self.table.pending
        append = pending.append
        emit = self._events.append
        conn = self.conn
        client_id = self.client_id
        raw_client_id = self._raw_client_id
        now_ns = self._now_ns
        maximum = self._max_frame_bytes
        before = len(pending)
        counts = self.api_counts
        while n - pos >= 14:
            size, api_key, api_version, correlation_id, client_id_len = unpack(data, pos)
            end = pos + 4 + size
            if end > n or size < 10 or size > maximum or api_key not in opaque:
                break
            if client_id_len >= 0:
                if client_id_len > size - 10:
                    break
                raw = data[pos + 14 : pos + 14 + client_id_len]
                if raw != raw_client_id:
                    raw_client_id = raw
                    client_id = raw.decode("utf-8", errors="replace")
            elif client_id_len == -1:
                raw_client_id = None
                client_id = None
            else:
                break
            if header_version(api_key, api_version) >= 2:
                # Flexible header: tagged fields follow; the common empty set is one zero byte.
                tags = pos + 14 + (client_id_len if client_id_len > 0 else 0)
                if tags >= end or data[tags]:
                    break
            payload = data[pos + 4 : end]
            append((api_key, api_version, correlation_id, client_id, api_version, None, now_ns))
            if counts is not None:
                counts.requests[api_key] += 1
                counts.request_bytes[api_key] += 4 + size
            emit(
                new_record(
                    (conn, "request", now_ns, api_key, api_version, api_version, correlation_id,
                     client_id, None, payload, payload)
                )
            )  # fmt: skip
            pos = end
        self.client_id = client_id
        self._raw_client_id = raw_client_id
        self.requests += len(pending) - before
        if len(pending) > MAX_PENDING_REQUESTS:
            self.table.trim()  # amortized: a pass only when the table has grown enough
        return pos

    def _scan_recorded_responses(self, data: bytes, pos: int, n: int) -> int:
        """`_scan_responses` while recording: also emits each `Record`."""
        # Deliberately repeats `_scan_responses`' loop: measured hot path (bench/proxy_overhead.py).
        pending = self.table.pending
        unpack = _RESPONSE_HEAD.unpack_from
        popleft = pending.popleft
        emit = self._events.append
        conn = self.conn
        now_ns = self._now_ns
        address_keys = self._address_keys
        maximum = self._max_frame_bytes
        before = len(pending)
        counts = self.api_counts
        while n - pos >= 8 and pending:
            size, correlation_id = unpack(data, pos)
            end = pos + 4 + size
            if end > n or size < 4 or size > maximum:
                break
            head = pending[0]
            if head[P_CORRELATION_ID] != correlation_id or head[P_API_KEY] in address_keys:
                break
            popleft()
            if counts is not None:
                counts.responses[head[P_API_KEY]] += 1
                counts.response_bytes[head[P_API_KEY]] += 4 + size
                counts.latency_ns[head[P_API_KEY]] += self._now_ns - head[P_SENT_NS]
                if head[P_API_KEY] == _JOIN_GROUP:
                    counts.count_join(head[P_GROUP_ID])
            payload = data[pos + 4 : end]
            emit(
                new_record(
                    (conn, "response", now_ns, head[P_API_KEY], head[P_API_VERSION],
                     head[P_UPSTREAM_API_VERSION], correlation_id, head[P_CLIENT_ID], head[P_GROUP_ID],
                     payload, payload)
                )
            )  # fmt: skip
            pos = end
        self.responses += before - len(pending)
        return pos

    # -- requests ------------------------------------------------------------------------------

    def _classify_request(self, source: bytes | bytearray, offset: int, size: int) -> tuple[bool, bool]:
        if self._raw_sasl_tokens is not None and self._raw_sasl_token(source, offset, size):
            return False, False
        if size < REQUEST_PREFIX_BYTES:
            raise ProtocolViolation(f"truncated request header ({size} bytes)")
        api_key, api_version, correlation_id = peek_request_prefix(source, offset)
        if api_key not in KNOWN_API_KEYS:
            # No header field is quoted: these bytes may be a secret (a raw SASL token).
            raise ProtocolViolation(f"a {size}-byte frame that is not a Kafka request (unknown api_key)")
        if self.api_counts is not None:
            self.api_counts.requests[api_key] += 1
            self.api_counts.request_bytes[api_key] += 4 + size
        decoded = api_key in GROUP_API_KEYS or (api_key == ApiKey.SASL_HANDSHAKE and api_version == 0)
        if decoded and not supports(api_key, api_version):
            raise ProtocolViolation(
                f"{api_name(api_key)} v{api_version} is not a version group-replay can decode"
            )
        hold = self._passthrough is False and self.policy.wants_request(api_key, api_version)
        if (self.record and (self._record_all or api_key in self._record_keys)) or decoded or hold:
            self._request_prefix = (api_key, api_version, correlation_id)
            return True, hold
        # Opaque: the prefix is all the proxy reads; the request is paired here and now.
        if self._header_only:
            head = REQUEST_HEADS.pack(size, api_key, api_version, correlation_id)
            self._header_run("request", head)
        self.requests += 1
        self.table.add(
            PendingRequest(
                api_key, api_version, correlation_id, self.client_id, api_version, None, self._now_ns
            )
        )
        return False, False

    def _finish_request(self, payload: bytes) -> bytes | None:  # noqa: C901 - one pass over a kept
        # request: SASL, decode, group id, record and rewrite, in the order they depend on each other
        api_key, api_version, correlation_id = self._request_prefix
        group_id: str | None = None
        upstream_payload = payload
        upstream_version = api_version
        must_change = not self._passthrough and self.policy.wants_request(api_key, api_version)
        self.requests += 1
        try:
            header = peek_request_header(payload)
        except FrameError:
            if must_change:
                raise
            header = None  # relayed as it is: only a frame the proxy must change may close (issue 18)
        self.client_id = header.client_id if header is not None else None
        self._raw_client_id = None
        if api_key in GROUP_API_KEYS:
            self.group_requests += 1
        if header is not None and (api_key in GROUP_API_KEYS or api_key == ApiKey.SASL_HANDSHAKE):
            try:
                body = decode_request_body(header, payload)
            except CodecError:
                if must_change:
                    raise
                body = None  # the broker decides what to make of it, as it would without the proxy
            if body is not None and api_key == ApiKey.SASL_HANDSHAKE:
                self._sasl_mechanism = str(body.mechanism)
                self._responses.scan = None  # its answer must reach _sasl_handshake_answered
            elif body is not None:
                group_id = request_group_id(api_key, body)
        if must_change:
            assert header is not None
            upstream_payload = self.policy.on_request(header, payload)
            if upstream_payload is not payload:
                self.rewrites += 1
                upstream_version = peek_request_prefix(upstream_payload)[1]
        self.table.add(
            PendingRequest(
                api_key, api_version, correlation_id, self.client_id, upstream_version, group_id, self._now_ns
            )
        )
        if self.record and (self._record_all or api_key in self._record_keys):
            self._recorded(
                Record(
                    conn=self.conn,
                    direction="request",
                    ts_ns=self._now_ns,
                    api_key=api_key,
                    api_version=api_version,
                    upstream_api_version=upstream_version,
                    correlation_id=correlation_id,
                    client_id=self.client_id,
                    group_id=group_id,
                    client_payload=payload,
                    upstream_payload=upstream_payload,
                )
            )
        return upstream_payload

    # -- responses -----------------------------------------------------------------------------

    def _classify_response(self, source: bytes | bytearray, offset: int, size: int) -> tuple[bool, bool]:
        pending = self.table.pending
        if pending and pending[0] is _RAW_SASL_TOKEN:
            pending.popleft()  # a raw SASL token answers a raw token: no header, never kept
            self.responses += 1
            if self._raw_sasl_tokens is None and _RAW_SASL_TOKEN not in pending:
                self._requests.scan, self._responses.scan = self._scans
            return False, False
        if size < 4:
            raise ProtocolViolation(f"truncated response header ({size} bytes)")
        request = self.table.pop(peek_correlation_id(source, offset))
        self.responses += 1
        if self.api_counts is not None:
            self.api_counts.responses[request.api_key] += 1
            self.api_counts.response_bytes[request.api_key] += 4 + size
            self.api_counts.latency_ns[request.api_key] += self._now_ns - request.sent_ns
            if request.api_key == _JOIN_GROUP:
                self.api_counts.count_join(request.group_id)
        self._response_for = request
        self._response_policy = self._passthrough is False and self.policy.wants_response(request)
        hold = self._response_policy or (self.addresses is not None and request.api_key in ADDRESS_API_KEYS)
        sasl_v0 = request.api_key == ApiKey.SASL_HANDSHAKE and request.api_version == 0
        recorded = self.record and (self._record_all or request.api_key in self._record_keys)
        keep = recorded or hold or sasl_v0
        if not keep and self._header_only:
            head = RESPONSE_HEADS.pack(size, request.correlation_id)
            self._header_run("response", head)
        return keep, hold

    def _finish_response(self, payload: bytes) -> bytes | None:
        request = self._response_for
        assert request is not None
        if request.api_key == ApiKey.SASL_HANDSHAKE and request.api_version == 0:
            self._sasl_handshake_answered(payload)
        client_payload = payload
        if self._response_policy:
            client_payload = self.policy.on_response(request, client_payload)
        if self.addresses is not None and request.api_key in ADDRESS_API_KEYS:
            rewritten = self.addresses.rewrite_response(request.api_key, request.api_version, client_payload)
            if rewritten is not None:
                client_payload = rewritten
        if client_payload is not payload:
            self.rewrites += 1
        if self.record and (self._record_all or request.api_key in self._record_keys):
            self._recorded(record_of(self.conn, "response", self._now_ns, request, client_payload, payload))
        return client_payload


__all__ = [
    "DEFAULT_MAX_BUFFERED_BYTES",
    "ApiCounts",
    "BudgetExceeded",
    "BufferBudget",
    "ProxySession",
    "Record",
]
