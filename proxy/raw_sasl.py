"""SASL before KIP-152: after a SaslHandshake v0, the client's tokens travel raw (no Kafka
header, no correlation id) until the mechanism's rounds are done. `RawSaslTokens` is the part of
`proxy.session.ProxySession` that pairs them with the broker's raw answers and turns the fast
paths off and on again around them.
"""

from __future__ import annotations

from proxy.direction import Direction, Scan
from proxy.wire import KNOWN_API_KEYS, REQUEST_PREFIX_BYTES, CorrelationTable, peek_request_prefix

# A raw SASL token in the correlation table (it has no correlation id; its answer has none).
_RAW_SASL_TOKEN: tuple[int, int, int, None, int, None, int] = (-1, 0, -1, None, 0, None, 0)
# Client tokens per mechanism when the count is fixed (RFC 4616 PLAIN: one; RFC 5802 SCRAM: two;
# RFC 7628 OAUTHBEARER: one on success). Others: until a frame parses as a Kafka request.
_RAW_SASL_ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2, "OAUTHBEARER": 1}


class RawSaslTokens:
    """The session's raw-token state and its transitions (a mixin: the session owns the fields)."""

    table: CorrelationTable
    requests: int
    _raw_sasl_tokens: int | None
    _sasl_mechanism: str | None
    _requests: Direction
    _responses: Direction
    _scans: tuple[Scan | None, Scan | None]

    def _sasl_handshake_answered(self, payload: bytes) -> None:
        """A SaslHandshake v0 response: error_code 0 means raw tokens follow (header v0: 4 bytes)."""
        if len(payload) < 6 or int.from_bytes(payload[4:6], "big", signed=True) != 0:
            self._responses.scan = self._scans[1]
            return
        self._raw_sasl_tokens = _RAW_SASL_ROUNDS.get((self._sasl_mechanism or "").upper(), -1)
        self._requests.scan = self._responses.scan = None

    def _raw_sasl_token(self, source: bytes | bytearray, offset: int, size: int) -> bool:
        """True when this frame is a raw SASL token (paired with the broker's raw answer)."""
        tokens = self._raw_sasl_tokens
        assert tokens is not None
        if tokens < 0 and size >= REQUEST_PREFIX_BYTES:
            # Unknown mechanism (GSSAPI, ...): its tokens never start like a Kafka request header.
            api_key, api_version, _ = peek_request_prefix(source, offset)
            if api_key in KNOWN_API_KEYS and 0 <= api_version < 100:
                self._raw_sasl_done()
                return False
        self.table.pending.append(_RAW_SASL_TOKEN)
        self.requests += 1
        if tokens > 1:
            self._raw_sasl_tokens = tokens - 1
        elif tokens == 1:
            self._raw_sasl_done()
        return True

    def _raw_sasl_done(self) -> None:
        """No more raw client tokens: the fast paths come back (responses once the last raw
        answer is in)."""
        self._raw_sasl_tokens = None
        self._requests.scan = self._scans[0]
        if _RAW_SASL_TOKEN not in self.table.pending:
            self._responses.scan = self._scans[1]


__all__ = ["RawSaslTokens"]
