"""The sans-IO session: forwarding is byte-exact at any chunking; bad input closes the connection."""

from __future__ import annotations

import datetime
from typing import Any

import kio.schema.heartbeat.v4.request as hb4
import kio.schema.metadata.v12.response as md12
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i32, i32Timedelta

from proxy.addressing import AddressRewriter, StaticDirectory
from proxy.commands import Close, Closed, Opened, PassThrough, SendClient, SendUpstream
from proxy.session import ProxySession, Record
from proxy.wire import (
    ApiKey,
    FrameDecoder,
    build_response,
    decode_response,
    encode_request,
    encode_response,
    frame,
)
from tests.support.group_entities import join_request
from tests.support.session_feed import feed, split_at


def _join(cid: int) -> bytes:
    request = join_request(
        5,
        group_id="g1",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        group_instance_id="inst-1",
        metadata=b"\x00\x01",
    )
    return encode_request(request, correlation_id=cid, client_id="c1")


def _heartbeat(cid: int) -> bytes:
    request = hb4.HeartbeatRequest(group_id="g1", generation_id=i32(1), member_id="m", group_instance_id=None)
    return encode_request(request, correlation_id=cid, client_id="c1")


def _opaque(cid: int, body: bytes) -> bytes:
    # A Produce v7 header (v1: no tagged fields) followed by bytes the proxy never parses.
    prefix = (0).to_bytes(2, "big") + (7).to_bytes(2, "big") + cid.to_bytes(4, "big") + b"\xff\xff"
    return frame(prefix + body)


def _header_only(commands: list[object]) -> list[tuple[str, int, int | None, int]]:
    """(direction, correlation_id, api_key, size) of every header-only frame in `commands` (a
    response's head is its size and correlation id only: its api_key is None here)."""
    from proxy.layouts import HEADERS, REQUEST_HEADS, RESPONSE_HEADS

    out = []
    for command in commands:
        if type(command) is tuple and command[0] == HEADERS:
            _, _, _, direction, _, heads = command
            if direction == "request":
                out += [(direction, c, k, s) for s, k, _, c in REQUEST_HEADS.iter_unpack(heads)]
            else:
                out += [(direction, c, None, s) for s, c in RESPONSE_HEADS.iter_unpack(heads)]
    return out


def _run(session: ProxySession, chunks: list[bytes]) -> tuple[bytes, list[Record], list[Close]]:
    fed = feed(session.client_data, chunks, SendUpstream)
    return fed.forwarded, fed.records, fed.closes


@settings(max_examples=200, deadline=None)
@given(
    bodies=st.lists(st.binary(max_size=300), min_size=1, max_size=6),
    cuts=st.lists(st.integers(min_value=0, max_value=5000), max_size=12),
    record=st.booleans(),
)
def test_requests_are_forwarded_byte_exact_at_any_split(
    bodies: list[bytes], cuts: list[int], record: bool
) -> None:
    wire = b"".join(
        [_join(0)] + [_opaque(i + 1, body) if i % 2 else _heartbeat(i + 1) for i, body in enumerate(bodies)]
    )
    session = ProxySession(1, record=record)
    sent, records, closes = _run(session, split_at(wire, cuts))
    assert not closes
    assert sent == wire
    assert session.pending_requests == len(bodies) + 1
    if record:
        assert [r.correlation_id for r in records] == list(range(len(bodies) + 1))
        assert b"".join(frame(r.client_payload) for r in records) == wire
        assert records[0].group_id == "g1" and records[0].client_id == "c1"
        assert not any(r.rewritten for r in records)


def test_unsplit_chunk_of_opaque_frames_is_forwarded_as_the_same_object() -> None:
    wire = _opaque(1, b"x" * 100) + _opaque(2, b"y" * 10)
    session = ProxySession(1)
    [command] = session.client_data(wire, now_ns=0)
    assert isinstance(command, SendUpstream) and command.data is wire


def _metadata_response(cid: int) -> bytes:
    body = md12.MetadataResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        brokers=(
            md12.MetadataResponseBroker(node_id=BrokerId(1), host="broker-1", port=i32(19092), rack=None),
        ),
        cluster_id="c",
        controller_id=BrokerId(1),
        topics=(),
    )
    return encode_response(body, cid)


@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6))
def test_metadata_response_is_held_and_rewritten(cuts: list[int]) -> None:
    session = ProxySession(7, record=True, addresses=AddressRewriter(StaticDirectory("127.0.0.1", 30000)))
    metadata_request = frame(
        (3).to_bytes(2, "big")
        + (12).to_bytes(2, "big")
        + (5).to_bytes(4, "big")
        + b"\x00\x01c\x00\x01\x00\x00"
    )
    session.client_data(metadata_request, now_ns=0)
    session.client_data(_opaque(6, b"p"), now_ns=0)
    wire = _metadata_response(5) + encode_response(
        build_response(ApiKey.FIND_COORDINATOR, 3, node_id=BrokerId(1), host="broker-1", port=i32(19092)),
        6,
    )
    fed = feed(session.upstream_data, split_at(wire, cuts), SendClient)
    assert not fed.closes
    first, second = FrameDecoder().feed(fed.forwarded)
    _, body = decode_response(first, 3, 12)
    assert [(b.host, b.port) for b in body.brokers] == [("127.0.0.1", 30001)]
    assert second == FrameDecoder().feed(wire)[1]  # the opaque (Produce) response is untouched
    assert fed.records[0].rewritten and not fed.records[1].rewritten


def test_bad_inputs_close_with_a_reason() -> None:
    cases = [
        (b"\xff\xff\xff\xff", "negative frame size"),
        ((20_000).to_bytes(4, "big"), "exceeds the maximum of 10000"),
        (frame(b"\x00\x0b\x00"), "truncated request header (3 bytes)"),
        (
            frame((999).to_bytes(2, "big") + b"\x00\x00\x00\x00\x00\x01"),
            "not a Kafka request (unknown api_key)",
        ),
        (
            frame((11).to_bytes(2, "big") + (42).to_bytes(2, "big") + b"\x00\x00\x00\x01\xff\xff"),
            "JoinGroup v42",
        ),
    ]
    for wire, reason in cases:
        session = ProxySession(1, max_frame_bytes=10_000)
        commands = session.client_data(wire, 0)
        assert isinstance(commands[-1], Close), (wire, commands)
        assert reason in commands[-1].reason
        assert session.closed is not None


def test_out_of_order_response_closes() -> None:
    session = ProxySession(1)
    session.client_data(_heartbeat(1), 0)
    [close] = session.upstream_data(frame((2).to_bytes(4, "big") + b"\x00\x00"), 0)
    assert isinstance(close, Close) and "correlation_id=2" in close.reason
    assert session.upstream_data(b"more", 0) == []


def test_describe_cluster_and_batched_find_coordinator_are_rewritten() -> None:
    import kio.schema.describe_cluster.v1.response as dc1
    import kio.schema.find_coordinator.v4.response as fc4

    from proxy.wire import decode_response

    rewriter = AddressRewriter(StaticDirectory("127.0.0.1", 30000))
    cluster = build_response(
        ApiKey.DESCRIBE_CLUSTER,
        1,
        endpoint_type=i8(1),
        cluster_id="c",
        controller_id=BrokerId(2),
        brokers=(dc1.DescribeClusterBroker(broker_id=BrokerId(2), host="b2", port=i32(9093), rack=None),),
    )
    rewritten = rewriter.rewrite_response(60, 1, encode_response(cluster, 3)[4:])
    assert rewritten is not None
    _, body = decode_response(rewritten, 60, 1)
    assert [(b.host, b.port) for b in body.brokers] == [("127.0.0.1", 30002)]
    none_time = i32Timedelta.parse(datetime.timedelta(0))
    found = fc4.Coordinator(
        key="g1",
        node_id=BrokerId(2),
        host="b2",
        port=i32(9093),
        error_code=ErrorCode.none,
        error_message=None,
    )
    missing = fc4.Coordinator(
        key="g2",
        node_id=BrokerId(-1),
        host="",
        port=i32(-1),
        error_code=ErrorCode.coordinator_not_available,
        error_message=None,
    )
    coordinators = fc4.FindCoordinatorResponse(throttle_time=none_time, coordinators=(found, missing))
    rewritten = rewriter.rewrite_response(10, 4, encode_response(coordinators, 4)[4:])
    assert rewritten is not None
    _, body = decode_response(rewritten, 10, 4)
    got = [(c.key, c.host, c.port) for c in body.coordinators]
    assert got == [("g1", "127.0.0.1", 30002), ("g2", "", -1)]
    # Nothing to route: the frame is left alone.
    empty = fc4.FindCoordinatorResponse(throttle_time=none_time, coordinators=())
    assert rewriter.rewrite_response(10, 4, encode_response(empty, 4)[4:]) is None


def _opaque_as(cid: int, client_id: str | None, body: bytes) -> bytes:
    encoded = b"\xff\xff" if client_id is None else len(client_id).to_bytes(2, "big") + client_id.encode()
    # Metadata v12: a flexible (v2) request header, so an empty tagged-field set follows client_id.
    header = (3).to_bytes(2, "big") + (12).to_bytes(2, "big") + cid.to_bytes(4, "big") + encoded + b"\x00"
    return frame(header + body)


def _exchange(session: ProxySession, requests: list[bytes], responses: list[bytes]) -> list[object]:
    out: list[object] = []
    for i, request in enumerate(requests):
        out += session.client_data(request, now_ns=i)
    for i, response in enumerate(responses):
        out += session.upstream_data(response, now_ns=1000 + i)
    return out


def _fast_and_slow(
    requests: bytes, responses: bytes, cuts: list[int], **options: Any
) -> tuple[ProxySession, list[object], ProxySession, list[object]]:
    """The same exchange, cut at `cuts`, through a session with its run scans (the measured fast
    path) and one without (frame by frame): both relay every byte, close nothing and emit the same
    Records. Returns each session with what it emitted."""
    request_chunks = split_at(requests, cuts)
    response_chunks = split_at(responses, [c * 7 for c in cuts])
    fast = ProxySession(1, **options)
    slow = ProxySession(1, **options)
    slow._requests.scan = slow._responses.scan = None
    fast_out = _exchange(fast, request_chunks, response_chunks)
    slow_out = _exchange(slow, request_chunks, response_chunks)
    assert not any(isinstance(c, Close) for c in fast_out)
    assert b"".join(c.data for c in fast_out if isinstance(c, SendUpstream)) == requests
    assert b"".join(c.data for c in fast_out if isinstance(c, SendClient)) == responses
    assert [c for c in fast_out if isinstance(c, Record)] == [c for c in slow_out if isinstance(c, Record)]
    return fast, fast_out, slow, slow_out


@settings(max_examples=150, deadline=None)
@given(
    frames=st.lists(
        st.tuples(st.sampled_from(["hb", "a", "b", None]), st.binary(max_size=200)), min_size=1, max_size=12
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
    record=st.booleans(),
)
def test_fast_path_emits_what_the_frame_by_frame_path_emits(
    frames: list[tuple[str | None, bytes]], cuts: list[int], record: bool
) -> None:
    """The run-of-opaque-frames scan is an optimisation only: same bytes, Records, pairing."""
    requests = b"".join(
        _heartbeat(i) if kind == "hb" else _opaque_as(i, kind, body) for i, (kind, body) in enumerate(frames)
    )
    responses = b"".join(frame(i.to_bytes(4, "big") + body) for i, (_, body) in enumerate(frames))
    fast, fast_out, slow, _ = _fast_and_slow(requests, responses, cuts, record=record)
    assert len([c for c in fast_out if isinstance(c, Record)]) == (2 * len(frames) if record else 0)
    assert fast.pending_requests == slow.pending_requests == 0


class _WantsJoin(PassThrough):
    """A policy that must change every JoinGroup (so it must decode it); changes nothing."""

    name = "wants-join"

    def wants_request(self, api_key: int, api_version: int) -> bool:
        return api_key == 11


def _undecodable_joins() -> list[bytes]:
    join = _join(1)[4:]
    at = join.index(b"consumer")
    bad_utf8 = join[:at] + b"\xff\xfe" + join[at + 2 :]
    negative_client_id = join[:8] + b"\xff\xf0" + join[10:]
    return [join[:-5], join + b"extra", bad_utf8, negative_client_id]


def test_undecodable_frames_the_proxy_need_not_change_are_relayed_as_they_are() -> None:
    """Issue 18 defect 6: trailing bytes, invalid UTF-8, a cut body, a negative client_id length:
    the broker answers these (or closes), not the proxy; recorded as they came."""
    for payload in _undecodable_joins():
        for record in (False, True):
            session = ProxySession(1, record=record)
            sent, records, closes = _run(session, [frame(payload)])
            assert closes == [] and sent == frame(payload)
            if record:
                [recorded] = records
                assert recorded.client_payload == payload and recorded.group_id is None
            # The answer still pairs with it.
            response = frame((1).to_bytes(4, "big") + b"\x00" * 8)
            commands = session.upstream_data(response, 1)
            assert isinstance(commands[0], SendClient) and not any(isinstance(c, Close) for c in commands)
        changing = ProxySession(1, policy=_WantsJoin())
        commands = changing.client_data(frame(payload), 0)
        assert isinstance(commands[-1], Close), payload


def _sasl_handshake_v0(cid: int, mechanism: bytes) -> bytes:
    body = len(mechanism).to_bytes(2, "big") + mechanism
    return frame(
        (17).to_bytes(2, "big") + (0).to_bytes(2, "big") + cid.to_bytes(4, "big") + b"\xff\xff" + body
    )


def _handshake_ok(cid: int) -> bytes:
    mechanisms = b"\x00\x00\x00\x01\x00\x05PLAIN"
    return frame(cid.to_bytes(4, "big") + b"\x00\x00" + mechanisms)


SECRET = b"s3cr3t-pa55word"


@pytest.mark.parametrize("record", [False, True])
@pytest.mark.parametrize(
    ("mechanism", "tokens"),
    [
        (b"PLAIN", [b"\x00bob\x00" + SECRET]),
        (b"SCRAM-SHA-512", [b"n,,n=bob,r=" + SECRET, b"c=biws,r=x,p=" + SECRET]),
        (b"GSSAPI", [b"\x60\x82" + SECRET, b"\x05\x04" + SECRET]),
    ],
)
def test_raw_sasl_tokens_after_handshake_v0_are_relayed_and_never_recorded(
    mechanism: bytes, tokens: list[bytes], record: bool
) -> None:
    """Issue 18 defect 7: pre-KIP-152 clients send raw tokens (no header) after SaslHandshake v0."""
    session = ProxySession(1, record=record)
    wire = _sasl_handshake_v0(1, mechanism)
    assert session.client_data(wire, 0)[0] == SendUpstream(wire)
    assert isinstance(session.upstream_data(_handshake_ok(1), 1)[0], SendClient)
    everything: list[object] = []
    for number, token in enumerate(tokens):
        commands = session.client_data(frame(token), 2)
        assert commands[0] == SendUpstream(frame(token)), commands
        everything += commands[1:]
        answer = frame(b"" if number == len(tokens) - 1 else b"server-token")  # PLAIN success: empty
        commands = session.upstream_data(answer, 3)
        assert commands[0] == SendClient(answer), commands
        everything += commands[1:]
    assert not any(isinstance(c, Close) for c in everything)
    assert all(SECRET not in c.client_payload for c in everything if isinstance(c, Record))
    # Afterwards, ordinary Kafka requests again, recorded as usual.
    sent, records, closes = _run(session, [_heartbeat(5)])
    assert closes == [] and sent == _heartbeat(5)
    assert [r.group_id for r in records] == (["g1"] if record else [])
    commands = session.upstream_data(frame((5).to_bytes(4, "big") + b"\x00" * 6), 4)
    assert isinstance(commands[0], SendClient) and not any(isinstance(c, Close) for c in commands)


def test_an_unexpected_raw_token_closes_without_quoting_it() -> None:
    session = ProxySession(1)
    [close] = session.client_data(frame(b"\x00bob\x00" + SECRET), 0)
    assert isinstance(close, Close)
    assert "bob" not in close.reason and str(int.from_bytes(b"\x00bob"[2:6], "big")) not in close.reason


def test_connection_open_and_close_are_session_commands() -> None:
    """The capture is the stream of session commands: the shell passes the time in."""
    session = ProxySession(4, record=True)
    assert session.connection_opened(5, "c:1", "b:2") == [Opened(4, 5, "c:1", "b:2")]
    assert session.connection_closed(9, "client closed") == [Closed(4, 9, "client closed")]
    assert session.connection_closed(10, "again") == []  # once
    assert session.client_data(_heartbeat(1), 11) == []  # nothing after the end
    quiet = ProxySession(5)
    assert quiet.connection_opened(5, "c:1", "b:2") == [] and quiet.connection_closed(6, "x") == []


def test_hot_path_tuple_layouts_match_their_named_tuples() -> None:
    """proxy.layouts names the positions the relay and the writer index; they must be the
    NamedTuples' own field positions."""
    from proxy import layouts
    from proxy.wire import PendingRequest

    for name in dir(layouts):
        if name.startswith("R_"):
            field = {"DIRECTION": "direction"}.get(name[2:], name[2:].lower())
            assert Record._fields[getattr(layouts, name)] == field, name
        elif name.startswith("P_"):
            assert PendingRequest._fields[getattr(layouts, name)] == name[2:].lower(), name


def _group_scope_wire(frames: list[tuple[str, bytes]]) -> tuple[bytes, bytes]:
    """Requests (a heartbeat, a Produce or a Metadata-keyed opaque frame each) and their answers."""

    def wire(i: int, kind: str, body: bytes) -> bytes:
        match kind:
            case "hb":
                return _heartbeat(i)
            case "produce":
                return _opaque(i, body)
        return _opaque_as(i, "c1", body)

    requests = b"".join(wire(i, kind, body) for i, (kind, body) in enumerate(frames))
    responses = b"".join(frame(i.to_bytes(4, "big") + body) for i, (_, body) in enumerate(frames))
    return requests, responses


_GROUP_SCOPE_FRAMES = st.lists(
    st.tuples(st.sampled_from(["hb", "produce", "metadata"]), st.binary(max_size=200)),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(
    frames=_GROUP_SCOPE_FRAMES,
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
)
def test_group_scope_records_group_frames_and_their_lookups_only(
    frames: list[tuple[str, bytes]], cuts: list[int]
) -> None:
    """Issue 12: with RecordScope.GROUP a Produce frame is relayed byte-exact and recorded as its
    header only (a HEADERS run); heartbeats and Metadata become whole Records (both paths alike), and every
    byte is counted."""
    from proxy.capture.header import RecordScope

    requests, responses = _group_scope_wire(frames)
    fast, fast_out, slow, slow_out = _fast_and_slow(
        requests, responses, cuts, record=True, record_api_keys=RecordScope.GROUP.api_keys, count_apis=True
    )
    records = [c for c in fast_out if isinstance(c, Record)]
    expected = [(i, "request") for i, (kind, _) in enumerate(frames) if kind != "produce"]
    assert sorted((r.correlation_id, r.direction) for r in records if r.direction == "request") == expected
    assert sum(r.direction == "response" for r in records) == len(expected)
    assert {r.api_key for r in records} <= {12, 3}
    # Produce frames are recorded as their headers (layouts.HEADERS runs): size and fixed fields.
    heads = _header_only(fast_out)
    assert heads == _header_only(slow_out)
    produced = [i for i, (kind, _) in enumerate(frames) if kind == "produce"]
    assert sorted((cid, direction) for direction, cid, _, _ in heads) == sorted(
        [(i, "request") for i in produced] + [(i, "response") for i in produced]
    )
    for direction, cid, api_key, size in heads:
        body = frames[cid][1]
        assert api_key == (0 if direction == "request" else None)
        assert size == (len(_opaque(cid, body)) - 4 if direction == "request" else 4 + len(body))
    # The metrics' per-API counters agree between the paths and with the input.
    assert fast.api_counts is not None and slow.api_counts is not None
    assert vars_of(fast.api_counts) == vars_of(slow.api_counts)
    assert sum(fast.api_counts.request_bytes) == len(requests)
    assert sum(fast.api_counts.response_bytes) == len(responses)
    assert fast.api_counts.requests[0] == sum(kind == "produce" for kind, _ in frames)
    assert fast.pending_requests == 0
    assert (fast.client_bytes, fast.upstream_bytes) == (len(requests), len(responses))
    [closed] = fast.connection_closed(5, "done")
    assert isinstance(closed, Closed) and (closed.client_bytes, closed.upstream_bytes) == (
        len(requests),
        len(responses),
    )


def vars_of(counts: object) -> tuple[list[int], ...]:
    return tuple(
        getattr(counts, name) for name in ("requests", "request_bytes", "responses", "response_bytes")
    )


def _frame_starts(frames: bytes) -> list[int]:
    starts, at = [], 0
    while at < len(frames):
        starts.append(at)
        at += 4 + int.from_bytes(frames[at : at + 4], "big", signed=True)
    return starts


def _recorded_in_order(commands: list[object], left: bytes = b"") -> list[tuple[object, ...]]:
    """What a group-scope session hands the recorder, in order, one entry per frame: a Record's
    (direction, correlation id), a header-only frame's (direction, ts_ns, head bytes) whether it
    came as a HEADERS run or packed (`layouts.HEADER_RUN`, a session given `header_runs`; `left`:
    what the sink still holds at the end)."""
    from proxy.layouts import HEADER_RUN, REQUEST_HEADS, RESPONSE_HEADS

    out: list[tuple[object, ...]] = []
    for command in [*commands, *([left] if left else [])]:
        if isinstance(command, Record):
            out.append(("record", command.direction, command.correlation_id))
        elif type(command) is tuple:
            _, conn, ts_ns, direction, _, heads = command
            stride = REQUEST_HEADS.size if direction == "request" else RESPONSE_HEADS.size
            out += [(conn, direction, ts_ns, heads[i : i + stride]) for i in range(0, len(heads), stride)]
        elif type(command) is bytes:
            at = 0
            while at < len(command):
                conn, ts_ns, length, whole = HEADER_RUN.unpack_from(command, at)
                direction = "request" if length > 0 else "response"
                captured = REQUEST_HEADS.size if length > 0 else RESPONSE_HEADS.size
                run = command[at + HEADER_RUN.size : at + HEADER_RUN.size + abs(length)]
                # Whole frames (small ones): each frame's first bytes are its head.
                starts = list(_frame_starts(run)) if whole else range(0, len(run), captured)
                out += [(conn, direction, ts_ns, run[i : i + captured]) for i in starts]
                at += HEADER_RUN.size + abs(length)
    return out


@settings(max_examples=150, deadline=None)
@given(
    frames=_GROUP_SCOPE_FRAMES,
    cuts=st.lists(st.integers(min_value=0, max_value=3000), max_size=8),
    scans=st.booleans(),
)
def test_header_runs_packed_onto_a_sink_keep_the_commands_order(
    frames: list[tuple[str, bytes]], cuts: list[int], scans: bool
) -> None:
    """Group scope with `header_runs` (the server's sessions: the recorder's bytearray) packs the
    header-only runs there instead of emitting HEADERS commands, and emits what it holds as one
    bytes command before a Record: the recorder gets the same frames, timestamps and order as
    from a session without it, whether the scans or the general path handle them."""
    from proxy.capture.header import RecordScope

    requests, responses = _group_scope_wire(frames)
    request_chunks = split_at(requests, cuts)
    response_chunks = split_at(responses, [c * 7 for c in cuts])
    sink = bytearray()
    packed = ProxySession(3, record=True, record_api_keys=RecordScope.GROUP.api_keys, header_runs=sink)
    plain = ProxySession(3, record=True, record_api_keys=RecordScope.GROUP.api_keys)
    if not scans:
        packed._requests.scan = packed._responses.scan = None
    packed_out = _exchange(packed, request_chunks, response_chunks)
    plain_out = _exchange(plain, request_chunks, response_chunks)
    assert not any(type(c) is tuple for c in packed_out)
    assert _recorded_in_order(packed_out, bytes(sink)) == _recorded_in_order(plain_out)
    assert b"".join(c.data for c in packed_out if isinstance(c, SendUpstream)) == requests
    assert b"".join(c.data for c in packed_out if isinstance(c, SendClient)) == responses
