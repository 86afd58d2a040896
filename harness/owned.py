"""Child processes this interpreter started and still owns: each is ended when the interpreter
exits (atexit), unless it was stopped before. One registry type for brokers (harness.broker) and
consumer processes (demo.clients)."""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

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
