"""Length checks before kio's decoder (issue 18 defect 0): no claimed length can make it allocate.

Every request and response schema kio has: a populated entity (every array with two elements,
every tagged field set) encodes to bytes that pass the check exactly; thousands of mutated frames
of the group APIs decode or raise CodecError/FrameError, never abort the process; and the 23-byte
LeaveGroup v4 frame from the issue is refused in a child process that must exit normally.
"""

from __future__ import annotations

import datetime
import io
import random
import subprocess
import sys
import uuid
from dataclasses import fields
from functools import cache
from typing import Any

import pytest
from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map
from kio.serial import entity_writer
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
)

from proxy.wire import GROUP_API_KEYS, CodecError, FrameError, decode_request, decode_response, encode_request
from proxy.wire.bounds import LengthError, check_lengths

_VALUES: dict[str, Any] = {
    "bool": True,
    "int8": 1,
    "int16": 2,
    "uint16": 3,
    "int32": 4,
    "int64": 5,
    "float64": 1.5,
    "uuid": uuid.UUID(int=7),
    "string": "ab",
    "bytes": b"xy",
    "records": b"",
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(milliseconds=5),
    "timedelta_i64": datetime.timedelta(milliseconds=6),
    "datetime_i64": datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
}


def populated(schema: type[Any]) -> Any:
    """An entity with every field set: arrays of two, nested entities filled, tagged fields too."""
    values: dict[str, Any] = {}
    for field in fields(schema):
        kind = classify_field(field)
        if isinstance(kind, EntityTupleField):
            values[field.name] = (populated(kind.type_), populated(kind.type_))
        elif isinstance(kind, EntityField):
            values[field.name] = populated(kind.type_)
        else:
            value = _VALUES[get_schema_field_type(field)]
            values[field.name] = (value, value) if isinstance(kind, PrimitiveTupleField) else value
    return schema(**values)


def _versions() -> list[tuple[int, int]]:
    pairs = []
    for api_key in api_key_map:
        for api_version in range(0, 20):
            try:
                load_request_schema(api_key, api_version)
            except Exception:
                continue
            pairs.append((api_key, api_version))
    return pairs


@cache
def _body(schema: type[Any]) -> bytes:
    buffer = io.BytesIO()
    entity_writer(schema)(buffer, populated(schema))
    return buffer.getvalue()


@pytest.mark.parametrize("loader", [load_request_schema, load_response_schema], ids=["request", "response"])
def test_every_schema_passes_on_its_own_encoding(loader: Any) -> None:
    checked = 0
    for api_key, api_version in _versions():
        schema = loader(api_key, api_version)
        body = _body(schema)
        assert check_lengths(schema, b"pre" + body, 3) == 3 + len(body), schema
        if len(body) > 1:
            with pytest.raises(LengthError):
                check_lengths(schema, body[:-1])
        checked += 1
    assert checked > 250  # every (api_key, api_version) kio knows


def _group_frames() -> list[tuple[int, int, bytes, bool]]:
    """(api_key, api_version, frame, is_request) for every version of every group API."""
    frames = []
    for api_key, api_version in _versions():
        if api_key not in GROUP_API_KEYS:
            continue
        request = populated(load_request_schema(api_key, api_version))
        frames.append((api_key, api_version, encode_request(request, 9, "c")[4:], True))
        response = load_response_schema(api_key, api_version)
        header = b"\x00\x00\x00\x09" + (b"\x00" if response.__header_schema__.__flexible__ else b"")
        frames.append((api_key, api_version, header + _body(response), False))
    return frames


def test_mutated_group_frames_never_reach_an_unbounded_allocation() -> None:
    rng = random.Random(18)
    frames = _group_frames()
    outcomes = {"decoded": 0, "refused": 0}
    for number in range(6000):
        api_key, api_version, original, is_request = frames[number % len(frames)]
        data = bytearray(original)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            data[at : at + 4] = rng.choice(
                [
                    b"\xff\xff\xff\xff",
                    b"\x7f\xff\xff\xff",
                    b"\x80\x80\x80\x80\x10",
                    b"\xff",
                    b"\x7f",
                    bytes([rng.randrange(256)]),
                ]
            )
        try:
            if is_request:
                decode_request(bytes(data))
            else:
                decode_response(bytes(data), api_key, api_version)
            outcomes["decoded"] += 1
        except (CodecError, FrameError):
            outcomes["refused"] += 1
    assert outcomes["refused"] > 1000 and sum(outcomes.values()) == 6000


def test_the_23_byte_leave_group_is_refused_not_fatal() -> None:
    """In a child process: without the check, kio aborts it ("memory allocation of 34359738360
    bytes failed", exit -6)."""
    script = (
        "from proxy.wire import decode_request, CodecError\n"
        "body = b'\\x02g' + bytes([0x80, 0x80, 0x80, 0x80, 0x10])\n"
        "head = (13).to_bytes(2, 'big') + (4).to_bytes(2, 'big') + (1).to_bytes(4, 'big')\n"
        "frame = head + b'\\xff\\xff\\x00' + body\n"
        "try:\n    decode_request(frame)\nexcept CodecError as exc:\n    print('refused:', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused: " in done.stdout and "4294967295 elements" in done.stdout
