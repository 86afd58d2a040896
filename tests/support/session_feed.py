"""Feeding bytes to one direction of a proxy session at arbitrary cuts, written once for the session
and codec property tests."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from proxy.commands import Close
from proxy.session import Record


def split_at(data: bytes, cuts: Iterable[int]) -> list[bytes]:
    """`data` cut at every point of `cuts` (taken modulo its length + 1): no chunk is empty."""
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in itertools.pairwise(points) if b > a]


@dataclass
class Fed:
    """What one direction of a session returned: the bytes it forwarded, its records, its closes."""

    forwarded: bytes = b""
    records: list[Record] = field(default_factory=list)
    closes: list[Close] = field(default_factory=list)


def feed(direction: Callable[[bytes, int], Iterable[object]], chunks: Iterable[bytes], forward: type) -> Fed:
    """Each chunk to `direction` (`session.client_data` or `session.upstream_data`, the chunk's index
    as its time); `forward` is the command that carries bytes on (SendUpstream or SendClient). Any
    other command fails the test."""
    fed = Fed()
    for i, chunk in enumerate(chunks):
        for command in direction(chunk, i):
            if isinstance(command, forward):
                fed.forwarded += command.data  # type: ignore[attr-defined]
            elif isinstance(command, Record):
                fed.records.append(command)
            elif isinstance(command, Close):
                fed.closes.append(command)
            else:
                raise AssertionError(command)
    return fed
