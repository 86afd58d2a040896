"""Kafka wire codec facade over kio: framing, header peek, decode/encode, correlation table.

Pure and synchronous (sans-IO): bytes in, frames and typed entities out. Nothing here opens a
socket, starts a thread or reads a clock. Everything the rest of group-replay knows about
Kafka message layouts comes from kio, which is generated from Kafka's own JSON schemas.
"""

from proxy.wire.apis import CONSUMER_PROTOCOL_API_KEYS, GROUP_API_KEYS, KNOWN_API_KEYS, ApiKey, api_name
from proxy.wire.codec import (
    CodecError,
    UnsupportedVersion,
    decode_request,
    decode_request_body,
    decode_response,
    decode_response_body,
    encode_request,
    encode_response,
    request_schema,
    response_schema,
    supports,
)
from proxy.wire.correlation import MAX_PENDING_REQUESTS, CorrelationError, CorrelationTable, PendingRequest
from proxy.wire.entities import (
    build,
    build_request,
    build_response,
    fields_of,
    nested_of,
    request_class,
    response_class,
)
from proxy.wire.errors import ErrorCode, error_code, error_name
from proxy.wire.framing import DEFAULT_MAX_FRAME_BYTES, FrameDecoder, FrameError, frame
from proxy.wire.groups import GroupFields, group_protocol, request_fields, request_group_id, response_fields
from proxy.wire.headers import (
    REQUEST_PREFIX_BYTES,
    RequestHeaderInfo,
    peek_correlation_id,
    peek_request_header,
    peek_request_prefix,
    request_header_version,
    response_header_size,
    response_header_version,
)

__all__ = [
    "CONSUMER_PROTOCOL_API_KEYS",
    "DEFAULT_MAX_FRAME_BYTES",
    "GROUP_API_KEYS",
    "KNOWN_API_KEYS",
    "MAX_PENDING_REQUESTS",
    "REQUEST_PREFIX_BYTES",
    "ApiKey",
    "CodecError",
    "CorrelationError",
    "CorrelationTable",
    "ErrorCode",
    "FrameDecoder",
    "FrameError",
    "GroupFields",
    "PendingRequest",
    "RequestHeaderInfo",
    "UnsupportedVersion",
    "api_name",
    "build",
    "build_request",
    "build_response",
    "decode_request",
    "decode_request_body",
    "decode_response",
    "decode_response_body",
    "encode_request",
    "encode_response",
    "error_code",
    "error_name",
    "fields_of",
    "frame",
    "group_protocol",
    "nested_of",
    "peek_correlation_id",
    "peek_request_header",
    "peek_request_prefix",
    "request_class",
    "request_fields",
    "request_group_id",
    "request_header_version",
    "request_schema",
    "response_class",
    "response_fields",
    "response_header_size",
    "response_header_version",
    "response_schema",
    "supports",
]
