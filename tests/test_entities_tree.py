"""The fast entity builders equal the general walker they shortcut (property tests).

`proxy.wire.entities.build_tree` (every request a replayed member sends) must build what
`proxy.wire.convert`'s walker builds from the same plain values, and `replay.member.entity`,
which builds JoinGroup v1+ and LeaveGroup v3+ directly, what building the newest version and
converting it down builds. Values are random: fields absent, None, scalars, nested entities as
mappings or as entities of another version, keys the version lacks.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire import request_schema, response_schema
from proxy.wire.apis import ApiKey
from proxy.wire.codec import UnsupportedVersion
from proxy.wire.convert import _build, convert
from proxy.wire.entities import build_tree, field_infos, is_entity_class, unwrap_optional
from replay.member import NEWEST, entity, from_values

# The group APIs replay's members and coordinator speak, every version kio has.
APIS = (
    ApiKey.JOIN_GROUP,
    ApiKey.SYNC_GROUP,
    ApiKey.HEARTBEAT,
    ApiKey.LEAVE_GROUP,
    ApiKey.OFFSET_COMMIT,
    ApiKey.CONSUMER_GROUP_HEARTBEAT,
)


def _versions(api_key: int) -> list[int]:
    found = []
    for api_version in range(12):
        try:
            request_schema(api_key, api_version)
        except UnsupportedVersion:  # kio has no such version
            continue
        found.append(api_version)
    return found


SCHEMAS = [
    (api_key, api_version, side)
    for api_key in APIS
    for api_version in _versions(api_key)
    for side in (request_schema, response_schema)
]
SCALARS = st.one_of(st.none(), st.integers(-3, 3), st.text(max_size=2), st.binary(max_size=2))


def _element(annotation: Any) -> tuple[Any, bool]:
    """(entity class or None, is a tuple) of a field annotation."""
    inner, _ = unwrap_optional(annotation)
    if getattr(inner, "__origin__", None) is tuple:
        element = inner.__args__[0]
        return (element if is_entity_class(element) else None), True
    return (inner if is_entity_class(inner) else None), False


def _values(draw: Any, schema: type[Any], depth: int = 0) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for info in field_infos(schema):
        if draw(st.integers(0, 3)) == 0:
            continue  # absent: the default
        nested, many = _element(info.annotation)
        if draw(st.integers(0, 5)) == 0:
            values[info.name] = None
        elif nested is not None and depth < 2:
            items = [_nested(draw, nested, depth) for _ in range(draw(st.integers(0, 2)) if many else 1)]
            values[info.name] = items if many else items[0]
        elif many:
            values[info.name] = draw(st.lists(SCALARS, max_size=2))
        else:
            values[info.name] = draw(SCALARS)
    if draw(st.booleans()):
        values["not_in_this_version"] = draw(SCALARS)
    return values


def _nested(draw: Any, cls: type[Any], depth: int) -> Any:
    values = _values(draw, cls, depth + 1)
    # a nested value may come as an entity already (of this class: what a caller re-uses)
    return _build(cls, values, "", []) if draw(st.booleans()) else values


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_build_tree_builds_what_convert_builds(data: st.DataObject) -> None:
    api_key, api_version, side = data.draw(st.sampled_from(SCHEMAS))
    schema = side(api_key, api_version)
    values = data.draw(st.composite(lambda d: _values(d, schema))())
    assert build_tree(schema, values) == _build(schema, values, "", [])


MEMBER_APIS = [(api_key, v) for api_key in NEWEST for v in _versions(api_key) if v <= NEWEST[api_key]]


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_member_entity_builds_what_newest_then_convert_builds(data: st.DataObject) -> None:
    api_key, api_version = data.draw(st.sampled_from(MEMBER_APIS))
    newest = request_schema(api_key, NEWEST[api_key])
    values = data.draw(st.composite(lambda d: _values(d, newest))())
    expected = convert(from_values(newest, values), api_version).entity
    assert entity(api_key, api_version, values) == expected


def test_every_member_version_is_covered() -> None:
    """The direct path is checked from JoinGroup v1 and LeaveGroup v3 up, and the adapters' own
    versions (JoinGroup v0, LeaveGroup v0-2) are among the sampled ones."""
    assert (int(ApiKey.JOIN_GROUP), 0) in MEMBER_APIS and (int(ApiKey.LEAVE_GROUP), 2) in MEMBER_APIS
    assert len(MEMBER_APIS) >= 20
