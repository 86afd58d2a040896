"""Decode and encode whole request and response frames through kio.

Frames here are the bytes after the int32 size prefix; `encode_*` return framed bytes (with the
prefix) ready to write to a socket. Readers and writers are built once per (api_key, api_version).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from kio.index import KioIndexError, load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.static.primitive import i16, i32

from proxy.wire.bounds import LengthError, check_lengths
from proxy.wire.framing import FrameError, frame
from proxy.wire.headers import RequestHeaderInfo, peek_request_header

Entity = Any  # a kio request or response dataclass (kio's own protocols are not precise enough for mypy)


class CodecError(ValueError):
    """A frame that kio cannot decode as the (api_key, api_version) it claims to be."""


class UnsupportedVersion(CodecError):
    """kio has no schema for this (api_key, api_version)."""


def supports(api_key: int, api_version: int) -> bool:
    try:
        load_request_schema(api_key, api_version)
    except KioIndexError:
        return False
    return True


def _schema(
    load: Callable[[int, int], type[Entity]], what: str, api_key: int, api_version: int
) -> type[Entity]:
    try:
        return load(api_key, api_version)
    except KioIndexError as exc:
        raise UnsupportedVersion(f"no {what} schema for api_key={api_key} api_version={api_version}") from exc


@lru_cache(maxsize=4096)
def request_schema(api_key: int, api_version: int) -> type[Entity]:
    return _schema(load_request_schema, "request", api_key, api_version)


@lru_cache(maxsize=4096)
def response_schema(api_key: int, api_version: int) -> type[Entity]:
    return _schema(load_response_schema, "response", api_key, api_version)


_READERS: dict[object, Callable[[bytes, int], tuple[Entity, int]]] = {}
_WRITERS: dict[object, Callable[[io.BytesIO, Entity], None]] = {}


def _reader(schema: type[Entity]) -> Callable[[bytes, int], tuple[Entity, int]]:
    reader = _READERS.get(schema)
    if reader is None:
        reader = _READERS[schema] = entity_reader(schema)
    return reader


def _writer(schema: type[Entity]) -> Callable[[io.BytesIO, Entity], None]:
    writer = _WRITERS.get(schema)
    if writer is None:
        writer = _WRITERS[schema] = entity_writer(schema)
    return writer


def _read(schema: type[Entity], data: bytes, offset: int, what: str) -> Entity:
    try:
        check_lengths(schema, data, offset)  # before kio allocates what a length claims (bounds.py)
    except LengthError as exc:
        raise CodecError(f"cannot decode {what}: {exc}") from exc
    try:
        entity, size = _reader(schema)(data, offset)
    except (ValueError, IndexError, UnicodeDecodeError, OverflowError, TypeError) as exc:
        raise CodecError(f"cannot decode {what}: {exc}") from exc
    except Exception as exc:  # kio's native reader raises its own errors on truncated input
        raise CodecError(f"cannot decode {what}: {type(exc).__name__}: {exc}") from exc
    if offset + size != len(data):
        raise CodecError(f"{what}: {len(data) - offset - size} trailing bytes after the body")
    return entity


def decode_request_body(header: RequestHeaderInfo, request_frame: bytes) -> Entity:
    schema = request_schema(header.api_key, header.api_version)
    return _read(schema, request_frame, header.header_size, f"{schema.__name__} v{header.api_version}")


def decode_request(request_frame: bytes) -> tuple[RequestHeaderInfo, Entity]:
    """Header and kio entity of a request frame. Raises FrameError, UnsupportedVersion or CodecError."""
    header = peek_request_header(request_frame)
    return header, decode_request_body(header, request_frame)


def decode_response_body(response_frame: bytes, api_key: int, api_version: int, body_offset: int) -> Entity:
    schema = response_schema(api_key, api_version)
    return _read(schema, response_frame, body_offset, f"{schema.__name__} v{api_version}")


def decode_response(response_frame: bytes, api_key: int, api_version: int) -> tuple[int, Entity]:
    """(correlation_id, entity) of a response frame whose request was (api_key, api_version)."""
    schema = response_schema(api_key, api_version)
    header_schema = schema.__header_schema__
    if len(response_frame) < 4:
        raise FrameError(f"truncated response header ({len(response_frame)} bytes)")
    try:
        check_lengths(header_schema, response_frame, 0)
        header, header_size = _reader(header_schema)(response_frame, 0)
    except Exception as exc:
        raise CodecError(f"cannot decode response header: {exc}") from exc
    body = _read(schema, response_frame, header_size, f"{schema.__name__} v{api_version}")
    return int(header.correlation_id), body


def encode_request(entity: Entity, correlation_id: int, client_id: str | None) -> bytes:
    """A framed request: size, header (v1 or v2 as the schema says), body."""
    header_schema = type(entity).__header_schema__
    header = header_schema(
        request_api_key=i16(type(entity).__api_key__),
        request_api_version=i16(type(entity).__version__),
        correlation_id=i32(correlation_id),
        client_id=client_id,
    )
    buffer = io.BytesIO()
    _writer(header_schema)(buffer, header)
    _writer(type(entity))(buffer, entity)
    return frame(buffer.getvalue())


def encode_response(entity: Entity, correlation_id: int) -> bytes:
    """A framed response: size, header (v0 or v1 as the schema says), body."""
    header_schema = type(entity).__header_schema__
    buffer = io.BytesIO()
    _writer(header_schema)(buffer, header_schema(correlation_id=i32(correlation_id)))
    _writer(type(entity))(buffer, entity)
    return frame(buffer.getvalue())
