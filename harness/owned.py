"""Child processes this interpreter started and still owns: each is ended when the interpreter
exits (atexit), unless it was stopped before. One registry type for brokers (harness.broker) and
consumer processes (demo.clients); and the `with` of everything this harness starts: it stops on
the way out."""

from __future__ import annotations

import atexit
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Generic, Self, TypeVar

_Child = TypeVar("_Child")


class Owned(Generic[_Child]):
    """A thread-safe set of children; `end` is called on each one left at exit."""

    def __init__(self, end: Callable[[_Child], object]) -> None:
        self._children: set[_Child] = set()
        self._lock = threading.Lock()
        self._end = end
        atexit.register(self.end_all)

    def add(self, child: _Child) -> None:
        with self._lock:
            self._children.add(child)

    def discard(self, child: _Child) -> None:
        with self._lock:
            self._children.discard(child)

    def end_all(self) -> None:
        """End every child still owned (what runs at exit)."""
        with self._lock:
            children = list(self._children)
        for child in children:
            self._end(child)


class StopsOnExit(ABC):
    """`with thing:` stops `thing` however the block ends (a broker, a cluster of processes or of
    containers, a consumer process)."""

    @abstractmethod
    def stop(self) -> object: ...

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
