"""Framing and header peek: the parts of the codec every relayed byte goes through."""

from __future__ import annotations

import pytest

from proxy.wire import FrameDecoder, FrameError, decode_request, encode_request, frame, peek_request_header
from tests.support.group_entities import join_request


def _join_v9() -> object:
    return join_request(
        session_timeout_ms=10_000,
        rebalance_timeout_ms=30_000,
        group_instance_id="inst-1",
        metadata=b"\x00\x01",
        reason="test",
    )


def test_frames_split_across_feeds_are_reassembled() -> None:
    wire = frame(b"abc") + frame(b"") + frame(b"0123456789")
    decoder = FrameDecoder()
    got: list[bytes] = []
    for i in range(len(wire)):
        got += decoder.feed(wire[i : i + 1])
    assert got == [b"abc", b"", b"0123456789"]
    assert decoder.buffered == 0


@pytest.mark.parametrize("size", [-1, 1025])
def test_bad_sizes_raise(size: int) -> None:
    decoder = FrameDecoder(max_frame_bytes=1024)
    with pytest.raises(FrameError):
        decoder.feed(size.to_bytes(4, "big", signed=True) + b"x")


def test_request_round_trip_and_peek() -> None:
    request = _join_v9()
    wire = encode_request(request, correlation_id=42, client_id="cli")
    [payload] = FrameDecoder().feed(wire)
    header = peek_request_header(payload)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (11, 9, 42, "cli")
    decoded_header, decoded = decode_request(payload)
    assert decoded_header == header
    assert decoded == request


def test_truncated_header_raises() -> None:
    with pytest.raises(FrameError):
        peek_request_header(b"\x00\x0b\x00")
