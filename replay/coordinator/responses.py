"""Version-aware construction of kio response entities.

A response must be the kio class of the request's (api_key, api_version); fields that a version
lacks are dropped, so handlers describe a response once in Kafka's latest terms. Rules that
Kafka applies while serialising old versions are followed here too (cited per function).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from kio.static.primitive import i32Timedelta

from proxy.wire.codec import response_schema
from proxy.wire.entities import build as build_entity
from proxy.wire.entities import fields_of, nested_of
from proxy.wire.errors import ErrorCode

ZERO_THROTTLE: Any = i32Timedelta.parse(datetime.timedelta(0))
# ErrorCode by value + 1 (-1 is UNKNOWN_SERVER_ERROR). A list, not a dict: hashing an enum member
# runs Enum.__hash__ in Python, indexing with one is C (IntEnum's __index__); the handlers pass
# ErrorCode members, and a Heartbeat looked one up twice.
_ERRORS: list[ErrorCode] = [ErrorCode.unknown_server_error] * (max(int(c.value) for c in ErrorCode) + 2)
for _code in ErrorCode:
    _ERRORS[int(_code.value) + 1] = _code


def error(code: int) -> ErrorCode:
    return _ERRORS[code + 1]


_fields = fields_of


def nested(api_key: int, api_version: int, name: str) -> type[Any]:
    """A nested entity class (e.g. `JoinGroupResponseMember`) of a response schema."""
    return nested_of(response_schema(api_key, api_version), name)


def build(schema: type[Any], values: dict[str, Any]) -> Any:
    """proxy.wire's one entity builder (a missing throttle time is zero, as any missing field
    takes Kafka's implicit default)."""
    return build_entity(schema, values)


def make(api_key: int, api_version: int, **values: Any) -> Any:
    return build(response_schema(api_key, api_version), values)


def slot_filler(schema: type[Any]) -> Any:
    """`schema(**values)` for a kio entity given every one of its fields: the instance made
    with `object.__new__` and each slot set through its descriptor, what the frozen dataclass's
    generated __init__ does with one `object.__setattr__` per field after parsing the keywords
    (2-3x the time; JoinGroup answers every classic rejoin of a rolling upgrade). An entity
    with a __post_init__ or fields that are not its slots is built by its own __init__.
    tests/test_coordinator_responses_fast.py compares both for every version."""
    slots = tuple(getattr(schema, "__slots__", ()))
    if hasattr(schema, "__post_init__") or frozenset(slots) != _fields(schema):
        return lambda values: schema(**values)
    setters = [(name, getattr(schema, name).__set__) for name in slots]
    new = object.__new__

    def fill(values: dict[str, Any]) -> Any:
        entity = new(schema)
        for name, set_slot in setters:
            set_slot(entity, values[name])
        return entity

    return fill


def make_nested(api_key: int, api_version: int, name: str, **values: Any) -> Any:
    return build(nested(api_key, api_version, name), values)


@lru_cache(maxsize=16)
def _join_constructor(api_version: int) -> Any:
    schema = response_schema(11, api_version)
    names = _fields(schema)
    member_cls = nested(11, api_version, "JoinGroupResponseMember")
    optional = [name for name in ("throttle_time", "protocol_type", "skip_assignment") if name in names]
    has_instance = api_version >= 5
    nullable_name = api_version >= 7
    fill = slot_filler(schema)

    def construct(
        code: int,
        member_id: str,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        leader: str,
        skip_assignment: bool,
        members: Sequence[tuple[str, str | None, bytes]],
    ) -> Any:
        if protocol_name is None and not nullable_name:
            protocol_name = ""
        values: dict[str, Any] = {
            "error_code": _ERRORS[code + 1],
            "generation_id": generation_id,
            "protocol_name": protocol_name,
            "leader": leader,
            "member_id": member_id,
            "members": tuple(
                member_cls(member_id=m_id, group_instance_id=inst, metadata=meta)
                if has_instance
                else member_cls(member_id=m_id, metadata=meta)
                for m_id, inst, meta in members
            )
            if members
            else (),
        }
        for name in optional:
            if name == "throttle_time":
                values[name] = ZERO_THROTTLE
            elif name == "protocol_type":
                values[name] = protocol_type
            else:
                values[name] = skip_assignment
        return fill(values)

    return construct


def join_group(
    api_version: int,
    error_code: int,
    *,
    member_id: str,
    generation_id: int = -1,
    protocol_type: str | None = None,
    protocol_name: str | None = None,
    leader: str = "",
    skip_assignment: bool = False,
    members: Sequence[tuple[str, str | None, bytes]] = (),
) -> Any:
    """JoinGroupResponse. Below v7 ProtocolName is not nullable: Kafka's JoinGroupResponse
    constructor sends "" for null (JoinGroupResponse.java)."""
    return _join_constructor(api_version)(
        error_code, member_id, generation_id, protocol_type, protocol_name, leader, skip_assignment, members
    )


# The fields a follower's JoinGroup answer does not share with every other one.
_FOLLOWER_FIELDS = frozenset({"member_id", "generation_id", "protocol_type", "protocol_name"})


@lru_cache(maxsize=16)
def join_follower_constructor(api_version: int) -> Any:
    """`join_follower` for one version (its arguments but the first)."""
    schema = response_schema(11, api_version)
    general = _join_constructor(api_version)
    slots = tuple(getattr(schema, "__slots__", ()))
    if hasattr(schema, "__post_init__") or frozenset(slots) != _fields(schema):
        return lambda m, g, t, n: general(0, m, g, t, n, "", False, ())
    sample = general(0, "", -1, None, "", "", False, ())  # the other fields' values
    constant = [
        (schema.__dict__[name].__set__, getattr(sample, name))
        for name in slots
        if name not in _FOLLOWER_FIELDS
    ]
    set_member, set_generation, set_name = (
        schema.__dict__[name].__set__ for name in ("member_id", "generation_id", "protocol_name")
    )
    set_type = schema.__dict__["protocol_type"].__set__ if "protocol_type" in slots else None
    nullable_name = api_version >= 7
    new = object.__new__

    def construct(
        member_id: str, generation_id: int, protocol_type: str | None, protocol_name: str | None
    ) -> Any:
        entity = new(schema)
        for set_slot, value in constant:
            set_slot(entity, value)
        set_member(entity, member_id)
        set_generation(entity, generation_id)
        set_name(entity, "" if protocol_name is None and not nullable_name else protocol_name)
        if set_type is not None:
            set_type(entity, protocol_type)
        return entity

    return construct


def join_follower(
    api_version: int, member_id: str, generation_id: int, protocol_type: str | None, protocol_name: str | None
) -> Any:
    """`join_group(api_version, 0, member_id=..., generation_id=..., protocol_type=...,
    protocol_name=...)`: a JoinGroup answer without error, leader or members, what every classic
    member's rejoin in a consumer group gets (classicGroupJoinToConsumerGroup), with the fields
    all such answers share set from a per-version list rather than a dict of every field."""
    return join_follower_constructor(api_version)(member_id, generation_id, protocol_type, protocol_name)


@lru_cache(maxsize=16)
def _sync_constructor(api_version: int) -> Any:
    schema = response_schema(14, api_version)
    names = _fields(schema)
    has_throttle = "throttle_time" in names
    has_protocol = "protocol_type" in names
    fill = slot_filler(schema)

    def construct(code: int, assignment: bytes, protocol_type: str | None, protocol_name: str | None) -> Any:
        values: dict[str, Any] = {"error_code": _ERRORS[code + 1], "assignment": assignment}
        if has_throttle:
            values["throttle_time"] = ZERO_THROTTLE
        if has_protocol:
            values["protocol_type"] = protocol_type
            values["protocol_name"] = protocol_name
        return fill(values)

    return construct


def sync_group(
    api_version: int,
    error_code: int,
    *,
    assignment: bytes = b"",
    protocol_type: str | None = None,
    protocol_name: str | None = None,
) -> Any:
    """SyncGroupResponse (a constructor per version is built once: SyncGroup is on the hot path
    of every rebalance)."""
    return _sync_constructor(api_version)(error_code, assignment, protocol_type, protocol_name)


_HEARTBEATS: dict[int, list[Any]] = {}


def heartbeat(api_version: int, error_code: int) -> Any:
    """HeartbeatResponse; entities are frozen, so one instance per (version, error) is shared."""
    by_code = _HEARTBEATS.get(api_version)
    if by_code is None:
        by_code = _HEARTBEATS[api_version] = [None] * len(_ERRORS)
    response = by_code[error_code + 1]
    if response is None:
        response = by_code[error_code + 1] = make(12, api_version, error_code=error(error_code))
    return response


def leave_group(
    api_version: int, top_level_error: int, members: Sequence[tuple[str, str | None, int]]
) -> Any:
    """LeaveGroupResponse. v0-2 carry one error code: the top-level error, else the first member
    error (LeaveGroupResponse.java `getError`)."""
    if api_version <= 2:
        code = top_level_error
        if code == 0:
            code = next((member_error for _, _, member_error in members if member_error != 0), 0)
        return make(13, api_version, error_code=error(code))
    member_cls = nested(13, api_version, "MemberResponse")
    entries = tuple(
        member_cls(member_id=m_id, group_instance_id=inst, error_code=error(code))
        for m_id, inst, code in members
    )
    return make(13, api_version, error_code=error(top_level_error), members=entries)
