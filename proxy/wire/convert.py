"""Convert a kio request or response entity to another version of the same API.

One generic walker does the work: for every field of the target version's dataclass it takes the
source field of the same name (recursing into nested entities and tuples of them, whose classes
differ per version), fills the target default for a field the source lacks, and reports every
source field the target cannot carry (`group_instance_id` below JoinGroup v5, `reason` below v8)
as a `FieldLoss` -- but only when its value differs from the field's default, because a default
value is what the older version means anyway.

A handful of adapters exist only where Kafka itself gives a field a meaning across versions that a
name-by-name copy cannot express; each cites the Kafka code it follows:

* JoinGroup request v0 has no RebalanceTimeoutMs: the coordinator uses the session timeout
  (`GroupCoordinator.handleJoinGroup`, `rebalanceTimeoutMs = sessionTimeoutMs` for v0).
* JoinGroup response below v7: a null ProtocolName is sent as "" (`JoinGroupResponse` constructor).
* LeaveGroup v0-2 carry one `member_id`; v3+ a `members` list (`LeaveGroupRequest.Builder`
  refuses v0-2 with more than one member; `LeaveGroupResponse` folds member errors into the
  top-level error for v0-2).
* FindCoordinator v0-3 carry one `key`; v4+ `coordinator_keys` / `coordinators`
  (`FindCoordinatorRequest.Builder`, `FindCoordinatorResponse.prepareOldResponse`).
* OffsetFetch v0-7 carry one group; v8+ a `groups` list (`OffsetFetchRequest.Builder`,
  `OffsetFetchResponse` per-group data).

Pure: no IO, no clock.
"""

from __future__ import annotations

import enum
import functools
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from kio.static.constants import EntityType

from proxy.wire.apis import ApiKey
from proxy.wire.codec import Entity, UnsupportedVersion, request_schema, response_schema
from proxy.wire.entities import (
    MISSING,
    EntityError,
    FieldInfo,
    field_infos,
    is_entity_class,
    unwrap_optional,
    zero_value,
)
from proxy.wire.errors import ErrorCode

JOIN_GROUP = ApiKey.JOIN_GROUP
LEAVE_GROUP = ApiKey.LEAVE_GROUP
FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
OFFSET_FETCH = ApiKey.OFFSET_FETCH


@dataclass(frozen=True, slots=True)
class FieldLoss:
    """A source field (dotted path, `members[0].group_instance_id`) the target version cannot carry."""

    path: str
    value: object
    reason: str

    def __str__(self) -> str:
        return f"{self.path}={self.value!r} ({self.reason})"


@dataclass(frozen=True, slots=True)
class ConversionResult:
    entity: Entity
    dropped_fields: tuple[FieldLoss, ...]

    @property
    def lossless(self) -> bool:
        return not self.dropped_fields


class ConversionError(ValueError):
    """The entity cannot be converted at all (not a kio entity, or no schema for the target)."""


# Field metadata and Kafka's implicit defaults come from the one entity builder.
_MISSING = MISSING
_fields = field_infos
_is_entity_class = is_entity_class
_unwrap_optional = unwrap_optional


_ZEROS: dict[Any, Any] = {}


def _zero(tp: Any) -> Any:
    """Kafka's implicit default for `tp`, cached per annotation (every value is immutable: None,
    numbers, strings, empty tuples, frozen kio entities); a replayed member builds requests here."""
    try:
        return _ZEROS[tp]
    except KeyError:
        pass
    try:
        zero = _ZEROS[tp] = zero_value(tp)
    except EntityError as exc:
        raise ConversionError(str(exc)) from exc
    return zero


def _default(info: FieldInfo) -> Any:
    return _zero(info.annotation) if info.default is _MISSING else info.default


# A struct source is a mapping of field name -> value (entities are read into one); values of nested
# structs may be entities or mappings. Defaults of the source decide which dropped values matter.
_Source = Mapping[str, Any]


def _read(entity: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """(values, defaults) of an entity or a mapping (a mapping has no defaults: every key matters)."""
    if isinstance(entity, _Partial):
        return dict(entity), dict(entity.defaults)
    if isinstance(entity, Mapping):
        return dict(entity), {}
    cls = type(entity)
    values = {info.name: getattr(entity, info.name) for info in _fields(cls)}
    defaults = {info.name: _default(info) for info in _fields(cls)}
    return values, defaults


class _Kind(enum.Enum):
    SCALAR = enum.auto()
    TUPLE = enum.auto()
    ENTITY = enum.auto()
    ENTITY_TUPLE = enum.auto()


@functools.cache
def _shape(tp: Any) -> tuple[bool, _Kind, Any]:
    """(nullable, kind, entity class) of a field annotation, worked out once per annotation."""
    inner, nullable = _unwrap_optional(tp)
    if typing.get_origin(inner) is tuple:
        (element_tp, *_rest) = typing.get_args(inner)
        if _is_entity_class(element_tp):
            return nullable, _Kind.ENTITY_TUPLE, element_tp
        return nullable, _Kind.TUPLE, None
    if _is_entity_class(inner):
        return nullable, _Kind.ENTITY, inner
    return nullable, _Kind.SCALAR, None


def _convert_value(value: Any, tp: Any, path: str, losses: list[FieldLoss]) -> Any:
    nullable, kind, entity_cls = _shape(tp)
    if value is None:
        if nullable:
            return None
        zero = _zero(tp)
        losses.append(FieldLoss(path, None, "null not representable in this version"))
        return zero
    match kind:
        case _Kind.SCALAR:
            return value
        case _Kind.TUPLE:
            return tuple(value)
        case _Kind.ENTITY:
            return _build(entity_cls, value, path, losses)
        case _Kind.ENTITY_TUPLE:
            return tuple(_build(entity_cls, item, f"{path}[{i}]", losses) for i, item in enumerate(value))


def _build(target_cls: type[Any], source: Any, path: str, losses: list[FieldLoss]) -> Any:
    values, defaults = _read(source)
    kwargs: dict[str, Any] = {}
    for info in _fields(target_cls):
        field_path = f"{path}.{info.name}" if path else info.name
        if info.name in values:
            kwargs[info.name] = _convert_value(values.pop(info.name), info.annotation, field_path, losses)
        else:
            kwargs[info.name] = _default(info)
    for name, value in values.items():
        if name in defaults and _same(value, defaults[name]):
            continue
        field_path = f"{path}.{name}" if path else name
        losses.append(FieldLoss(field_path, value, f"absent in v{target_cls.__version__}"))
    return target_cls(**kwargs)


def _same(value: Any, default: Any) -> bool:
    if value is None or default is None:
        return value is default
    return bool(value == default)


# --- adapters where Kafka gives a field meaning across versions (see the module docstring) ---------

_Adapter = Callable[[dict[str, Any], int, int, Any, list[FieldLoss]], None]


def _pop_one(
    values: dict[str, Any],
    name: str,
    dst: int,
    losses: list[FieldLoss],
    noun: str,
    lost: Callable[[Any], Any] = len,
) -> Any:
    """Pops the array `name` that v`dst` carries as one value (Kafka's single-key/-group/-member
    versions): its first element or None, with a loss (`lost(array)`) unless it held exactly one."""
    items = values.pop(name)
    if len(items) != 1:
        losses.append(FieldLoss(name, lost(items), f"v{dst} carries exactly one{noun}"))
    return items[0] if items else None


def _moved_into_one(
    values: dict[str, Any],
    src: int,
    dst: int,
    losses: list[FieldLoss],
    *,
    since: int,
    array: str,
    empty: Mapping[str, Any],
    noun: str,
) -> None:
    """Top-level fields (the keys of `empty`, their values when the array is empty) that v`since`
    moved into the array `array` (LeaveGroup v3 `members`, OffsetFetch v8 `groups`)."""
    if src < since <= dst:
        values[array] = ({name: values.pop(name) for name in empty},)
    elif dst < since <= src:
        one = _pop_one(values, array, dst, losses, noun)
        moved, defaults = _read(one) if one is not None else (dict(empty), {})
        for name in empty:
            values[name] = moved.pop(name)
        _note_dropped(f"{array}[0]", moved, defaults, dst, losses)


def _asked(request: Any, name: str, array: str, element: Callable[[Any], str]) -> str:
    """What the request a response answers asked for, in either of its versions' shapes: its
    top-level `name`, else that of the first of `array` ("" without a request)."""
    if request is None:
        return ""
    return getattr(request, name, None) or next((element(item) for item in getattr(request, array, ())), "")


def _note_dropped(
    path: str, rest: dict[str, Any], defaults: dict[str, Any], dst: int, losses: list[FieldLoss]
) -> None:
    """A loss for each field of `path` v`dst` has no place for, unless it holds its default."""
    for name, value in rest.items():
        if not _same(value, defaults.get(name)):
            losses.append(FieldLoss(f"{path}.{name}", value, f"absent in v{dst}"))


def _join_group_request(
    values: dict[str, Any], src: int, dst: int, _req: Any, losses: list[FieldLoss]
) -> None:
    if src == 0 and dst >= 1:
        values["rebalance_timeout"] = values["session_timeout"]
    elif src >= 1 and dst == 0:
        # v0 means rebalance timeout == session timeout; any other value (even the -1 default) is lost
        rebalance_timeout = values.pop("rebalance_timeout")
        if rebalance_timeout != values["session_timeout"]:
            losses.append(FieldLoss("rebalance_timeout", rebalance_timeout, "v0 uses the session timeout"))


def _join_group_response(
    values: dict[str, Any], src: int, dst: int, _req: Any, losses: list[FieldLoss]
) -> None:
    if dst < 7 and values.get("protocol_name", "") is None:
        values["protocol_name"] = ""


def _leave_group_request(
    values: dict[str, Any], src: int, dst: int, _req: Any, losses: list[FieldLoss]
) -> None:
    empty = {"member_id": ""}
    _moved_into_one(values, src, dst, losses, since=3, array="members", empty=empty, noun=" member")


def _leave_group_response(
    values: dict[str, Any], src: int, dst: int, request: Any, losses: list[FieldLoss]
) -> None:
    if src < 3 <= dst:
        member_ids: list[dict[str, Any]] = []
        if request is not None:
            for m in getattr(request, "members", None) or (
                [{"member_id": request.member_id}] if hasattr(request, "member_id") else []
            ):
                mv, _ = _read(m)
                member_ids.append(
                    {
                        "member_id": mv.get("member_id", ""),
                        "group_instance_id": mv.get("group_instance_id"),
                        "error_code": values["error_code"],
                    }
                )
        values["members"] = tuple(member_ids)
    elif dst < 3 <= src:
        members = values.pop("members")
        if values["error_code"] == ErrorCode.none:
            for m in members:
                if m.error_code != ErrorCode.none:
                    values["error_code"] = m.error_code
                    break


def _find_coordinator_request(
    values: dict[str, Any], src: int, dst: int, _req: Any, losses: list[FieldLoss]
) -> None:
    if src < 4 <= dst:
        values["coordinator_keys"] = (values.pop("key"),)
    elif dst < 4 <= src:
        key = _pop_one(values, "coordinator_keys", dst, losses, " key", lost=tuple)
        values["key"] = key if key is not None else ""


def _find_coordinator_response(
    values: dict[str, Any], src: int, dst: int, request: Any, losses: list[FieldLoss]
) -> None:
    if src < 4 <= dst:
        key = _asked(request, "key", "coordinator_keys", lambda key: key)
        coordinator = {name: values.pop(name) for name in ("node_id", "host", "port", "error_code")}
        coordinator["error_message"] = values.pop("error_message", None)
        coordinator["key"] = key
        values["coordinators"] = (coordinator,)
    elif dst < 4 <= src:
        coordinator = _pop_one(values, "coordinators", dst, losses, "")
        if coordinator is not None:
            first, _ = _read(coordinator)
            first.pop("key", None)
            message = first.pop("error_message", None)
            if dst >= 1:
                values["error_message"] = message
            elif message is not None:
                losses.append(FieldLoss("coordinators[0].error_message", message, f"absent in v{dst}"))
            values.update(first)


def _offset_fetch_request(
    values: dict[str, Any], src: int, dst: int, _req: Any, losses: list[FieldLoss]
) -> None:
    empty = {"group_id": "", "topics": ()}
    _moved_into_one(values, src, dst, losses, since=8, array="groups", empty=empty, noun=" group")


def _offset_fetch_response(
    values: dict[str, Any], src: int, dst: int, request: Any, losses: list[FieldLoss]
) -> None:
    if src < 8 <= dst:
        group_id = _asked(request, "group_id", "groups", lambda group: group.group_id)
        values["groups"] = (
            {
                "group_id": group_id,
                "topics": values.pop("topics"),
                "error_code": values.pop("error_code", ErrorCode.none),
            },
        )
    elif dst < 8 <= src:
        one = _pop_one(values, "groups", dst, losses, " group")
        group, _ = _read(one) if one is not None else ({"topics": (), "error_code": ErrorCode.none}, {})
        values["topics"] = group["topics"]
        if dst >= 2:  # the top-level ErrorCode is "versions": "2-7" in OffsetFetchResponse.json
            values["error_code"] = group["error_code"]
        elif group["error_code"] != ErrorCode.none:
            losses.append(FieldLoss("groups[0].error_code", group["error_code"], f"absent in v{dst}"))


_ADAPTERS: dict[tuple[int, EntityType], _Adapter] = {
    (JOIN_GROUP, EntityType.request): _join_group_request,
    (JOIN_GROUP, EntityType.response): _join_group_response,
    (LEAVE_GROUP, EntityType.request): _leave_group_request,
    (LEAVE_GROUP, EntityType.response): _leave_group_response,
    (FIND_COORDINATOR, EntityType.request): _find_coordinator_request,
    (FIND_COORDINATOR, EntityType.response): _find_coordinator_response,
    (OFFSET_FETCH, EntityType.request): _offset_fetch_request,
    (OFFSET_FETCH, EntityType.response): _offset_fetch_response,
}


def target_schema(entity: Entity, target_api_version: int) -> type[Entity]:
    cls = type(entity)
    kind = getattr(cls, "__type__", None)
    api_key = int(getattr(cls, "__api_key__", -1))
    try:
        if kind == EntityType.request:
            return request_schema(api_key, target_api_version)
        if kind == EntityType.response:
            return response_schema(api_key, target_api_version)
    except UnsupportedVersion as exc:
        raise ConversionError(str(exc)) from exc
    raise ConversionError(f"{cls.__name__} is not a kio request or response entity")


def convert(entity: Entity, target_api_version: int, *, request: Entity | None = None) -> ConversionResult:
    """`entity` re-encoded as `target_api_version` of its API, with what the target cannot carry.

    `request` (responses only, optional) is the request the response answers, in the version the
    client sent; FindCoordinator and LeaveGroup responses take their keys and members from it when
    a newer version has to name what an older one left implicit.
    """
    target_cls = target_schema(entity, target_api_version)
    source_api_version = int(type(entity).__version__)
    if source_api_version == target_api_version:
        return ConversionResult(entity, ())
    losses: list[FieldLoss] = []
    values, defaults = _read(entity)
    adapter = _ADAPTERS.get((int(type(entity).__api_key__), type(entity).__type__))
    if adapter is not None:
        adapter(values, source_api_version, target_api_version, request, losses)
        # keys the adapter synthesised have no source default: keep only defaults of untouched keys
        # and a synthesised key that only an older or newer layout has matters only when it is set
        defaults = {k: defaults[k] if k in defaults else _falsy_default(v) for k, v in values.items()}
        source: Any = _Partial(values, defaults)
    else:
        source = entity
    converted = _build(target_cls, source, "", losses)
    return ConversionResult(converted, tuple(losses))


def _falsy_default(value: Any) -> Any:
    return value if not value else None


class _Partial(dict[str, Any]):
    """A field mapping that still knows the source defaults (used after an adapter ran)."""

    def __init__(self, values: dict[str, Any], defaults: dict[str, Any]) -> None:
        super().__init__(values)
        self.defaults = defaults


__all__ = ["ConversionError", "ConversionResult", "FieldLoss", "convert", "target_schema"]
