"""Which member leads: Kafka's members map order (replay.coordinator.hashorder), on real captures.

When the leader leaves, Kafka makes the first key of its members map the leader (GroupMetadata
.scala `remove`: `members.keys.headOption`, a Scala mutable.HashMap, on 3.9's default coordinator;
ClassicGroup.java `remove`: `members.keySet().iterator().next()`, a java.util.HashMap, on the new
one). An as-recorded replay gives each member the id the recorded broker issued, so the reference
picks the leader the recorded broker picked, including where that is not the oldest member.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from proxy.capture.reader import read_capture
from replay.coordinator.hashorder import MemberMapKind, hash_order, improved_hash
from replay.events import EventName, RebalanceEvent
from replay.plan import build_plan, recorded_events, recorded_member_ids
from replay.run import replay_reference
from tests.support.corpus import CORPUS_DIR, load_manifest

# Dynamic rolling restarts whose leader leaves and whose recorded new leader is not the oldest
# remaining member: one per members map kind (3.9.2 ran the Scala coordinator, 4.3.1 the Java one).
CAPTURES = {
    "scala-hash-map": "kafka-3.9.2--java-3.9.2--dynamic-rolling",
    "java-hash-map": "kafka-4.3.1--java-4.3.1--dynamic-rolling",
}


def leaders(events: list[RebalanceEvent] | tuple[RebalanceEvent, ...]) -> dict[int, str]:
    return {
        e.generation_id: e.member_key for e in events if e.event == EventName.MEMBER_JOINED and e.is_leader
    }


def first_joins(events: list[RebalanceEvent] | tuple[RebalanceEvent, ...]) -> dict[str, int]:
    joined: dict[str, int] = {}
    for e in events:
        if e.event == EventName.MEMBER_JOINED:
            joined.setdefault(e.member_id, e.ts_ms)
    return joined


@pytest.mark.parametrize("stem", CAPTURES.values(), ids=CAPTURES.keys())
def test_the_reference_picks_the_leader_the_recorded_broker_picked(stem: str) -> None:
    entry = next(e for e in load_manifest() if Path(e.file).stem == stem)
    plan = build_plan(read_capture(CORPUS_DIR / entry.file), stem)
    recorded = recorded_events(plan)
    replayed = replay_reference(plan).events
    assert leaders(replayed) == leaders(recorded)
    # the case this is about: some generation's recorded leader is not its oldest member
    members: dict[int, list[RebalanceEvent]] = {}
    for e in recorded:
        if e.event == EventName.MEMBER_JOINED:
            members.setdefault(e.generation_id, []).append(e)
    since = first_joins(recorded)
    not_oldest = [
        gen
        for gen, rows in members.items()
        if any(r.is_leader for r in rows)
        and min(rows, key=lambda r: since[r.member_id]).member_key != leaders(recorded)[gen]
    ]
    assert not_oldest, "this capture no longer shows a new leader other than the oldest member"
    # and the replay really ran on the recorded ids
    issued = {i for ids in recorded_member_ids(plan).values() for i in ids}
    assert {e.member_id for e in replayed if e.event == EventName.MEMBER_JOINED} <= issued


def test_java_and_scala_maps_order_one_bucket_differently() -> None:
    """Java keeps a bucket in insertion order, Scala 2.13 sorts it by the improved hash."""
    ids = [f"consumer-{n}" for n in range(200)]
    by_bucket: dict[int, list[str]] = {}
    for member_id in ids:
        by_bucket.setdefault(improved_hash(member_id) & 15, []).append(member_id)
    pair = next(
        (a, b)
        for bucket in by_bucket.values()
        for a, b in itertools.pairwise(bucket)
        if improved_hash(a) > improved_hash(b)
    )
    assert hash_order(MemberMapKind.JAVA_HASH_MAP, pair) == list(pair)
    assert hash_order(MemberMapKind.SCALA_HASH_MAP, pair) == [pair[1], pair[0]]


def test_the_table_never_shrinks() -> None:
    """A map that once held 13 members iterates its 2 survivors by a 32-slot table."""
    a, b = next(
        (a, b)
        for a in (f"m-{n}" for n in range(100))
        for b in (f"m-{n}" for n in range(100, 200))
        if improved_hash(a) & 15 == improved_hash(b) & 15 and improved_hash(a) & 31 > improved_hash(b) & 31
    )
    assert hash_order(MemberMapKind.JAVA_HASH_MAP, [a, b]) == [a, b]
    assert hash_order(MemberMapKind.JAVA_HASH_MAP, [a, b], peak_size=13) == [b, a]
