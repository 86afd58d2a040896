"""The one public way to build a kio entity of any (api_key, api_version).

Callers describe an entity once, in Kafka's latest terms, and `build` keeps the fields that the
version has: JoinGroup v0 has no rebalance timeout, v5 adds the group instance id, ... A field
that is not given takes its schema default, or Kafka's implicit one where the schema has none
(0, "", false, empty array, null: what Kafka's generated `*Data` classes start from), so a
zero throttle time or an empty tagged field never has to be spelled out.

Hot paths that build the same entity millions of times (the coordinator's Heartbeat, JoinGroup
and SyncGroup responses) look the class up here once (`response_class`, `nested_of`) and call
its constructor directly; everything else goes through `build`.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from proxy.wire.codec import Entity, request_schema, response_schema
from proxy.wire.errors import ErrorCode

MISSING: Any = object()


@dataclasses.dataclass(frozen=True, slots=True)
class FieldInfo:
    name: str
    annotation: Any
    default: Any  # MISSING when the schema gives none


class EntityError(ValueError):
    """A value for which no entity field type has a zero (a schema kio added after this code)."""


_INFOS: dict[type[Any], tuple[FieldInfo, ...]] = {}


def field_infos(schema: type[Any]) -> tuple[FieldInfo, ...]:
    """Every field of a kio dataclass with its type and schema default (cached per class)."""
    cached = _INFOS.get(schema)
    if cached is not None:
        return cached
    hints = typing.get_type_hints(schema)
    infos = []
    for f in dataclasses.fields(schema):
        default: Any = MISSING
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        infos.append(FieldInfo(f.name, hints[f.name], default))
    cached = _INFOS[schema] = tuple(infos)
    return cached


_FIELDS: dict[type[Any], frozenset[str]] = {}


def fields_of(schema: type[Any]) -> frozenset[str]:
    """Field names of a kio dataclass (a dict look-up: asked for every entity built)."""
    names = _FIELDS.get(schema)
    if names is None:
        names = _FIELDS[schema] = frozenset(f.name for f in dataclasses.fields(schema))
    return names


_NESTED: dict[tuple[type[Any], str], type[Any]] = {}


def nested_of(schema: type[Any], name: str) -> type[Any]:
    """A nested entity class (`JoinGroupResponseMember`) defined beside a payload schema."""
    cls = _NESTED.get((schema, name))
    if cls is None:
        cls = _NESTED[(schema, name)] = getattr(importlib.import_module(schema.__module__), name)
    return cls


def is_entity_class(tp: Any) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and hasattr(tp, "__type__")


def unwrap_optional(tp: Any) -> tuple[Any, bool]:
    """(inner type, nullable) of `X | None`."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        nullable = len(args) != len(typing.get_args(tp))
        inner = args[0] if len(args) == 1 else tp
        return inner, nullable
    return tp, False


def _zero_timedelta(inner: Any) -> Any:
    parse: Callable[[datetime.timedelta], Any] = getattr(inner, "parse", inner)
    return parse(datetime.timedelta(0))


# Kafka's implicit default per primitive, first match wins (ErrorCode and bool before int).
_ZEROS: tuple[tuple[type[Any], Callable[[Any], Any]], ...] = (
    (ErrorCode, lambda _: ErrorCode.none),
    (bool, lambda _: False),
    (int, lambda inner: inner(0)),
    (float, lambda inner: inner(0.0)),
    (str, lambda _: ""),
    (bytes, lambda _: b""),
    (datetime.timedelta, _zero_timedelta),
    (uuid.UUID, lambda _: None),
)


def zero_value(tp: Any) -> Any:
    """Kafka's implicit default for a field of type `tp` with no explicit one."""
    inner, nullable = unwrap_optional(tp)
    if nullable:
        return None
    if typing.get_origin(inner) is tuple:
        return ()
    if is_entity_class(inner):
        return build(inner, {})
    if isinstance(inner, type):
        for base, zero in _ZEROS:
            if issubclass(inner, base):
                return zero(inner)
    raise EntityError(f"no zero value for field type {tp!r}")


def default_of(info: FieldInfo) -> Any:
    """The schema default of a field, else Kafka's implicit one."""
    return zero_value(info.annotation) if info.default is MISSING else info.default


_IMPLICIT: dict[type[Any], tuple[tuple[str, Any], ...]] = {}


def _implicit_defaults(schema: type[Any]) -> tuple[tuple[str, Any], ...]:
    """Fields without a schema default, with Kafka's implicit one (what `build` fills in)."""
    cached = _IMPLICIT.get(schema)
    if cached is not None:
        return cached
    cached = _IMPLICIT[schema] = tuple(
        (info.name, zero_value(info.annotation)) for info in field_infos(schema) if info.default is MISSING
    )
    return cached


def build(schema: type[Any], values: Mapping[str, Any]) -> Entity:
    """`schema(**values)` keeping only the fields this version has; a field without a value takes
    its default (Kafka's implicit one where the schema gives none)."""
    names = fields_of(schema)
    kwargs = {k: v for k, v in values.items() if k in names}
    if len(kwargs) != len(names):
        for name, zero in _implicit_defaults(schema):
            if name not in kwargs:
                kwargs[name] = zero
    return schema(**kwargs)


# How `build_tree` fills one field, worked out once per class: (name, kind, nested entity class,
# nullable, default when absent, zero when given None). Kinds as proxy.wire.convert's walker.
_SCALAR, _TUPLE, _ENTITY, _ENTITY_TUPLE = range(4)
_TREE_PLANS: dict[type[Any], tuple[tuple[str, int, Any, bool, Any, Any], ...]] = {}


def _tree_plan(schema: type[Any]) -> tuple[tuple[str, int, Any, bool, Any, Any], ...]:
    plan = []
    for info in field_infos(schema):
        inner, nullable = unwrap_optional(info.annotation)
        kind, nested = _SCALAR, None
        if typing.get_origin(inner) is tuple:
            element = typing.get_args(inner)[0]
            kind, nested = (_ENTITY_TUPLE, element) if is_entity_class(element) else (_TUPLE, None)
        elif is_entity_class(inner):
            kind, nested = _ENTITY, inner
        zero = None if nullable else zero_value(info.annotation)
        plan.append((info.name, kind, nested, nullable, default_of(info), zero))
    cached = _TREE_PLANS[schema] = tuple(plan)
    return cached


def build_tree(schema: type[Any], values: Any) -> Entity:
    """An entity of `schema` from plain values, nested entities (and arrays of them) given as
    mappings or as entities of any version: what `proxy.wire.convert` builds from a mapping, without
    its loss report (a key the version lacks is dropped, None in a non-nullable field takes Kafka's
    implicit zero, an absent field its default). A replayed member builds every request here:
    the per-field work is looked up once per class (tests/test_entities_tree.py: equal to
    convert's walker on random values)."""
    if type(values) is not dict and not isinstance(values, Mapping):
        values = {name: getattr(values, name) for name in fields_of(type(values))}
    plan = _TREE_PLANS.get(schema) or _tree_plan(schema)
    kwargs: dict[str, Any] = {}
    for name, kind, nested, nullable, default, zero in plan:
        if name not in values:
            kwargs[name] = default
            continue
        value = values[name]
        if value is None:
            kwargs[name] = None if nullable else zero
        elif kind == _SCALAR:
            kwargs[name] = value
        elif kind == _TUPLE:
            kwargs[name] = tuple(value)
        elif kind == _ENTITY:
            kwargs[name] = build_tree(nested, value)
        else:
            kwargs[name] = tuple([build_tree(nested, item) for item in value])
    return schema(**kwargs)


def build_request(api_key: int, api_version: int, **values: Any) -> Entity:
    return build(request_schema(api_key, api_version), values)


def build_response(api_key: int, api_version: int, **values: Any) -> Entity:
    return build(response_schema(api_key, api_version), values)


def request_class(api_key: int, api_version: int, nested: str | None = None) -> type[Any]:
    """The request payload class, or one of its nested entity classes by name."""
    schema = request_schema(api_key, api_version)
    return schema if nested is None else nested_of(schema, nested)


def response_class(api_key: int, api_version: int, nested: str | None = None) -> type[Any]:
    schema = response_schema(api_key, api_version)
    return schema if nested is None else nested_of(schema, nested)


__all__ = [
    "EntityError",
    "FieldInfo",
    "build",
    "build_request",
    "build_response",
    "build_tree",
    "default_of",
    "field_infos",
    "fields_of",
    "is_entity_class",
    "nested_of",
    "request_class",
    "response_class",
    "unwrap_optional",
    "zero_value",
]
