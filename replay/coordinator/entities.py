"""What requests.py and responses.py both need to build kio entities of any api_version."""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

_FIELDS: dict[type[Any], frozenset[str]] = {}
_NESTED: dict[tuple[type[Any], str], type[Any]] = {}


def fields_of(schema: type[Any]) -> frozenset[str]:
    """Field names of a kio dataclass (cached: asked on every request and response built)."""
    names = _FIELDS.get(schema)
    if names is None:
        names = _FIELDS[schema] = frozenset(f.name for f in dataclasses.fields(schema))
    return names


def nested_of(schema: type[Any], name: str) -> type[Any]:
    """A nested entity class (e.g. `JoinGroupResponseMember`) defined beside a payload schema."""
    cls = _NESTED.get((schema, name))
    if cls is None:
        cls = _NESTED[(schema, name)] = getattr(importlib.import_module(schema.__module__), name)
    return cls


def build_entity(schema: type[Any], values: dict[str, Any]) -> Any:
    """`schema(**values)` keeping only the fields this version has."""
    names = fields_of(schema)
    return schema(**{k: v for k, v in values.items() if k in names})
