"""Length checks before kio's compiled decoder sees a frame (issue 18, defect 0).

kio's native reader allocates an array or string as soon as it reads its length, before reading
its elements: a 23-byte LeaveGroup v4 whose members array claims 2^32 entries asks for 34 GB and
the process aborts (no Python exception can catch that). Kafka itself checks every length against
the bytes that remain before allocating (`ByteBufferAccessor`/`Readable.readArray` via the
generated `*Data.read`: "Tried to allocate a collection of size N, but there are only M bytes
remaining", clients/src/main/java/org/apache/kafka/common/protocol/MessageUtil.java and the
message generator's `readArray` template). `check_lengths(schema, data, offset)` walks the
schema's fields the way kio's reader will (same field classification: `kio.serial._introspect`)
and raises `LengthError` at the first array, string or bytes field whose length claims more than
is left, or more elements than the remaining bytes could hold (each element has a known minimum
size). Tagged fields are checked inside the window their size prefix gives. The walk allocates
nothing proportional to a claimed length.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import Any

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)

from proxy.wire.framing import FrameError, read_uvarint

_FIXED = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "error_code": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "uuid": 16,
}
_VARIABLE = frozenset({"string", "bytes", "records"})

# Plan steps: (kind, argument) or, for arrays, (_ARR, element kind, element argument). Kinds:
_FIX, _STR, _ARR, _ENT, _NENT = range(5)
Step = tuple[Any, ...]


class LengthError(FrameError):
    """A length or element count that claims more bytes than the frame has left."""


class _Plan:
    __slots__ = ("flexible", "min_size", "steps", "tags")

    def __init__(self) -> None:
        self.flexible = False
        self.steps: list[Step] = []
        self.tags: dict[int, Step] = {}
        self.min_size = 0


def _step(field: Any, flexible: bool, is_request_header: bool) -> Step:
    kind = classify_field(field)
    if isinstance(kind, EntityTupleField):
        return (_ARR, _ENT, _plan(kind.type_))
    if isinstance(kind, EntityField):
        return (_NENT if is_optional(field) else _ENT, _plan(kind.type_))
    kafka_type = get_schema_field_type(field)
    if is_request_header and field.name == "client_id":
        element: Step = (_STR, (False, 2))  # always a legacy string (RequestHeader.json)
    elif kafka_type in _VARIABLE:
        element = (_STR, (flexible, 4 if kafka_type != "string" else 2))
    else:
        element = (_FIX, _FIXED[kafka_type])
    if isinstance(kind, PrimitiveTupleField):
        return (_ARR, *element)
    return element


@cache
def _plan(schema: type[Any]) -> _Plan:
    plan = _Plan()
    flexible = bool(getattr(schema, "__flexible__", False))
    plan.flexible = flexible
    is_request_header = schema.__name__ == "RequestHeader"
    for field in fields(schema):
        step = _step(field, flexible, is_request_header)
        tag = get_field_tag(field)
        if tag is not None:
            plan.tags[int(tag)] = step
        else:
            plan.steps.append(step)
    plan.min_size = sum(_min_size(step, flexible) for step in plan.steps) + (1 if flexible else 0)
    return plan


def _min_size(step: Step, flexible: bool) -> int:
    match step[0]:
        case 0:  # _FIX
            return int(step[1])
        case 1:  # _STR: a compact length is at least one byte, a legacy one 2 (string) or 4 (bytes)
            return 1 if step[1][0] else int(step[1][1])
        case 2:  # _ARR
            return 1 if flexible else 4
        case 3:  # _ENT
            return int(step[1].min_size)
        case _:  # _NENT: the null marker
            return 1


def _signed(data: bytes, pos: int, size: int, end: int) -> tuple[int, int]:
    if end - pos < size:
        raise LengthError(f"truncated field at byte {pos}")
    return int.from_bytes(data[pos : pos + size], "big", signed=True), pos + size


def _length(data: bytes, pos: int, end: int, flexible: bool, legacy_size: int) -> tuple[int, int]:
    """(length or -1 for null, position after the length prefix)."""
    if flexible:
        value, pos = read_uvarint(data, pos, end, LengthError)
        return value - 1, pos
    value, pos = _signed(data, pos, legacy_size, end)
    if value < -1:
        raise LengthError(f"negative length {value} at byte {pos - legacy_size}")
    return value, pos


def _walk_step(step: Step, data: bytes, pos: int, end: int, flexible: bool) -> int:
    kind = step[0]
    if kind == _FIX:
        pos += step[1]
        if pos > end:
            raise LengthError(f"truncated field ending at byte {pos}")
        return pos
    if kind == _STR:
        compact, legacy_size = step[1]
        length, pos = _length(data, pos, end, compact, legacy_size)
        if length > end - pos:
            raise LengthError(f"a length of {length} bytes at byte {pos} with {end - pos} bytes left")
        return pos + max(length, 0)
    if kind == _ENT:
        return _walk(step[1], data, pos, end)
    if kind == _NENT:
        marker, pos = _signed(data, pos, 1, end)
        return pos if marker < 0 else _walk(step[1], data, pos, end)
    # _ARR: (kind, element kind, element argument)
    element = (step[1], step[2])
    count, pos = _length(data, pos, end, flexible, 4)
    if count <= 0:
        return pos
    element_min = max(1, _min_size(element, flexible))
    if count > (end - pos) // element_min:
        raise LengthError(
            f"an array of {count} elements at byte {pos} with {end - pos} bytes left "
            f"(each at least {element_min} bytes)"
        )
    for _ in range(count):
        pos = _walk_step(element, data, pos, end, flexible)
    return pos


def _walk(plan: _Plan, data: bytes, pos: int, end: int) -> int:
    flexible = plan.flexible
    for step in plan.steps:
        pos = _walk_step(step, data, pos, end, flexible)
    if flexible:
        count, pos = read_uvarint(data, pos, end, LengthError)
        if count > end - pos:
            raise LengthError(f"{count} tagged fields at byte {pos} with {end - pos} bytes left")
        for _ in range(count):
            tag, pos = read_uvarint(data, pos, end, LengthError)
            size, pos = read_uvarint(data, pos, end, LengthError)
            if size > end - pos:
                raise LengthError(f"tagged field {tag} of {size} bytes with {end - pos} bytes left")
            known = plan.tags.get(tag)
            if known is not None:
                _walk_step(known, data, pos, pos + size, flexible)
            pos += size
    return pos


def check_lengths(schema: type[Any], data: bytes, offset: int = 0) -> int:
    """Raises LengthError unless every length in `data[offset:]` read as `schema` fits in the
    bytes present; returns where the entity ends. Nothing is allocated per claimed element."""
    return _walk(_plan(schema), data, offset, len(data))  # type: ignore[arg-type]


__all__ = ["LengthError", "check_lengths"]
