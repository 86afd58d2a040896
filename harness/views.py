"""`PartView`: a read-only attribute of a harness object that is the same-named attribute of one
of its parts (a Broker's `kafka_version` is its launch plan's, its `pid` its process's)."""

from __future__ import annotations

from typing import Any, Generic, Self, TypeVar, cast, overload

_T = TypeVar("_T")


class PartView(Generic[_T]):
    """`kafka_version = PartView[str]("plan")` in a class body reads `self.plan.kafka_version`."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...

    def __get__(self, obj: Any, owner: type | None = None) -> _T | Self:
        if obj is None:
            return self
        return cast(_T, getattr(getattr(obj, self.part), self.name))
