"""The random operation lists the consumer-group state-machine tests draw: (op, who) pairs, an
op from the test's own vocabulary and a client number, and the heartbeats its clients send,
written once for every such test."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

from replay.coordinator.consumer import HeartbeatRequest

Ops = list[tuple[str, int]]


def op_lists(ops: Sequence[str], clients: int, *, max_size: int, min_size: int = 0) -> st.SearchStrategy[Ops]:
    """Lists of (op, who): `ops` drawn evenly (repeat a name to draw it more often), `who` one of
    `clients` clients (0 .. clients-1)."""
    op = st.tuples(st.sampled_from(ops), st.integers(0, clients - 1))
    return st.lists(op, min_size=min_size, max_size=max_size)


def heartbeat_of(client: dict[str, Any], epoch: int, **fields: Any) -> HeartbeatRequest:
    """A ConsumerGroupHeartbeat to group g from a test's client (a dict with its member "id" and
    its "instance" id or None) at `epoch`, with the request's other `fields`."""
    return HeartbeatRequest("g", client["id"], epoch, instance_id=client["instance"], **fields)
