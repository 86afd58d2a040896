"""Waiting on real confluent-kafka consumers (shared by the consumer-group serve and wire tests), and
the spec of a live client test's static member (demo.clients)."""

from __future__ import annotations

import time
from typing import Any

from demo.clients import ClientKind, ConsumerSpec


def settled(
    consumers: list[Any], partitions: int, timeout_s: float = 60.0, want: list[int] | None = None
) -> list[list[int]]:
    """Poll until every consumer holds something and together they hold each of `partitions`
    (and, with `want`, the consumers hold exactly [want]); the partitions each one holds."""
    deadline = time.monotonic() + timeout_s
    held: list[list[int]] = []
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.1)
        held = [sorted(p.partition for p in consumer.assignment()) for consumer in consumers]
        complete = sorted(p for h in held for p in h) == list(range(partitions))
        if complete and all(held) and (want is None or held == [want]):
            return held
    raise AssertionError(f"not settled after {timeout_s} s: {held}")


def static_member_of(kind: ClientKind, bootstrap: str, topic: str, name: str, **more: Any) -> ConsumerSpec:
    """A static member alone in the group `g-{topic}` on `topic`: group.instance.id `inst-{name}`,
    client.id `cli-{name}` (how the live client tests tell their members apart)."""
    return ConsumerSpec(
        kind,
        bootstrap,
        group_id=f"g-{topic}",
        topics=(topic,),
        group_instance_id=f"inst-{name}",
        client_id=f"cli-{name}",
        **more,
    )
