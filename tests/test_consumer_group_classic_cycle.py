"""classic_cycle's fast paths (a classic member's Heartbeat behind the target epoch, its
JoinGroup that changes nothing but its epoch, its SyncGroup) against the service's full paths
(classic_members and service.py, Kafka 4.3.1 classicGroup*ToConsumerGroup): random cycles of
static and dynamic classic members in an upgraded group, with stale generations, changed
JoinGroups, other protocol names, epoch bumps from consumer members joining and leaving,
silences and a growing topic; answers, events, every timer's deadline, the group and its
members must be the same both ways."""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.wire.consumer_protocol import encode_assignment, encode_subscription
from replay.coordinator import CoordinatorConfig
from replay.coordinator import requests as Q
from replay.coordinator.consumer import ConsumerGroupConfig
from replay.coordinator.consumer.group import MigrationPolicy
from tests.coordinator_sim import Sim
from tests.support.consumer_full_paths import (
    classic_cycle_full_paths,
    classic_members_full_paths,
    consumer_group_outcome,
    live_timers,
)
from tests.test_consumer_group_migration import _beat

V = 9  # JoinGroup v9 / SyncGroup v5 / Heartbeat v4
SUB = encode_subscription(["t"], 1)
SESSION = {"session_timeout_ms": 45_000}  # longer than the ops' silences, bar "wait"s
_JOINS: list[dict[str, Any]] = [  # what a classic member rejoins with (1: another client id)
    {"protocols": (("range", SUB),), **SESSION},  # as it joined: the rolling upgrade's case
    {"protocols": (("range", SUB),), **SESSION},
    {"protocols": (("range", encode_subscription(["t", "u"], 1)),), **SESSION},
    {"protocols": (("range", SUB),), "session_timeout_ms": 20_000},
    {"protocols": (("range", SUB),), "rebalance_timeout_ms": 40_000, **SESSION},
    {"protocols": (("range", encode_subscription(["t"], 1, owned_partitions=(("t", 1),))),), **SESSION},
    {"protocols": (("roundrobin", SUB), ("range", SUB)), **SESSION},
    {"protocols": (("range", SUB),), "protocol_type": "other", **SESSION},
    {"protocols": (("range", b"\x00"),), **SESSION},  # malformed
    {"protocols": (("range", SUB),), "session_timeout_ms": 5_000},  # under the minimum (6 s)
]
_SYNCS: list[tuple[int, dict[str, Any]]] = [  # (api_version, fields) of a SyncGroup
    (5, {}),
    (3, {"protocol_type": None, "protocol_name": None}),
    (5, {"protocol_name": "roundrobin"}),
    (5, {"protocol_type": "other"}),
    (5, {"protocol_type": None}),  # v5 without its mandatory protocol type
]


def _group(sim: Sim, static: bool) -> tuple[list[str], list[str | None], int]:
    """A Stable classic group of three range members of topic t (static: instance ids)."""
    instances: list[str | None] = [f"pod-{n}" if static else None for n in range(3)]
    ids: list[str] = []
    if not static:
        for conn in range(1, 4):
            ids.append(str(sim.answer(sim.join(conn, V, **_JOINS[0])).member_id))
    pending = [
        sim.join(c, V, ids[c - 1] if ids else "", group_instance_id=instances[c - 1], **_JOINS[0])
        for c in range(1, 4)
    ]
    sim.run_timers(sim.now_ms + 7_000)
    joins = [sim.answer(cid) for cid in pending]
    ids = [str(j.member_id) for j in joins]
    generation, leader = int(joins[0].generation_id), str(joins[0].leader)
    assignments = {
        m: encode_assignment({"t": [p for p in range(4) if p % 3 == n]}) for n, m in enumerate(ids)
    }
    for conn, member_id in enumerate(ids, start=1):
        kw = {"assignments": assignments} if member_id == leader else {}
        sim.sync(conn, 5, generation, member_id, group_instance_id=instances[conn - 1], **kw)
    return ids, instances, generation


def _cycles(ops: list[tuple[str, int, int]], static: bool) -> list[Any]:
    sim = Sim(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
    sim.coordinator.consumer.coordinator.config = ConsumerGroupConfig(
        migration_policy=MigrationPolicy.UPGRADE, assignment_interval_ms=0
    )
    sim.coordinator.consumer.use_topics({"t": 4})
    ids, instances, generation = _group(sim, static)
    consumers = {"c0000000-0000-4000-8000-000000000001": 0}
    generations = dict.fromkeys(ids, generation)
    seen: list[Any] = []
    for op, who, variant in ops:
        sim.tick(sim.now_ms + (20_000 if op == "wait" else 1_000))
        member_id, conn = ids[who], who + 1
        instance_id = instances[(who + (variant == 9)) % 3]  # 9: another member's instance id
        if op == "beat":
            request = Q.heartbeat(
                4, "g", generations[member_id] - variant % 2, member_id, group_instance_id=instance_id
            )
            seen.append(sim.call(conn, 4, request))
        elif op == "rejoin":
            fields = _JOINS[variant % len(_JOINS)]
            request = Q.join_group(V, "g", member_id, group_instance_id=instance_id, **fields)
            joined = sim.answer(sim.send(conn, V, request, client_id=f"c{conn}" if variant != 1 else "other"))
            seen.append(joined)
            if joined is not None and int(joined.error_code) == 0:
                generations[member_id] = int(joined.generation_id)
        elif op == "sync":
            api_version, fields = _SYNCS[variant % len(_SYNCS)]
            generation_id = generations[member_id] - (len(_SYNCS) <= variant < 8)  # 5-7: stale
            request = Q.sync_group(
                api_version, "g", generation_id, member_id, group_instance_id=instance_id, **fields
            )
            seen.append(sim.answer(sim.send(conn, api_version, request)))
        elif op == "consumer":  # a consumer member joins, heartbeats or leaves: epoch bumps
            member = f"c0000000-0000-4000-8000-00000000000{variant % 3 + 1}"
            epoch = consumers.get(member, 0)
            answer = _beat(sim, member, -1 if variant >= 6 and member in consumers else epoch, owned={})
            seen.append(answer)
            if variant >= 6 or int(answer.error_code):
                consumers.pop(member, None)
            else:
                consumers[member] = int(answer.member_epoch)
        elif op == "bounds":  # group.max.session.timeout.ms under the members' 45 s, or back
            max_ms = 30_000 if variant else CoordinatorConfig().group_max_session_timeout_ms
            sim.coordinator.config = dataclasses.replace(
                sim.coordinator.config, group_max_session_timeout_ms=max_ms
            )
        elif op == "grow":
            sim.coordinator.consumer.coordinator.topic_partitions["t"] += 1
        seen.append(live_timers(sim))
    return seen + consumer_group_outcome(sim)


_OPS = st.lists(
    st.tuples(
        st.sampled_from(["beat", "rejoin", "rejoin", "sync", "sync", "consumer", "wait", "grow"]),
        st.integers(0, 2),
        st.integers(0, 9),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None)
@given(_OPS, st.booleans())
def test_classic_cycles_in_a_consumer_group_are_the_full_path(
    ops: list[tuple[str, int, int]], static: bool
) -> None:
    """The rolling upgrade's cycle first (everyone behind, rejoining as it was, syncing), then
    random steps; with classic_cycle's fast paths, and without them."""
    cycle = [("consumer", 1, 0)] + [(op, w, 0) for w in range(3) for op in ("beat", "rejoin", "sync", "beat")]
    odd = [
        ("consumer", 0, 1),
        ("beat", 0, 0),
        ("beat", 0, 0),
        ("beat", 1, 9),
        ("rejoin", 0, 9),
        ("rejoin", 0, 0),
    ]
    odd += [("sync", 0, v) for v in (9, 7, 3, 2, 1, 0)] + [("beat", 0, 0), ("beat", 0, 1)]
    odd += [("grow", 0, 0), ("rejoin", 1, 0), ("sync", 1, 0), ("beat", 2, 0)]
    # The checks made before the group is looked up: session timeout bounds, v5 protocol fields.
    odd += [("rejoin", 1, 19), ("sync", 1, 4), ("bounds", 0, 1), ("rejoin", 2, 0), ("bounds", 0, 0)]
    ops = cycle + odd + ops + cycle
    fast = _cycles(ops, static)
    with contextlib.ExitStack() as full:
        for patch in classic_cycle_full_paths():
            full.enter_context(patch)
        slow = _cycles(ops, static)
    assert fast == slow
    with contextlib.ExitStack() as full:  # and with classic_members' remembered steps done anew
        for patch in classic_cycle_full_paths() + classic_members_full_paths():
            full.enter_context(patch)
        assert _cycles(ops, static) == fast


def test_the_upgrade_cycle_takes_the_fast_paths() -> None:
    """Each step of the rolling upgrade's cycle is answered by its fast path (so the property
    above compares them, not the full path with itself)."""
    cycle = [("consumer", 1, 0)] + [(op, w, 0) for w in range(3) for op in ("beat", "rejoin", "sync")]
    taken: list[str] = []
    patches = []
    from replay.coordinator.consumer import classic_cycle

    for name in ("behind", "rejoin", "sync"):
        real = getattr(classic_cycle, name)

        def spy(*args: Any, real: Any = real, name: str = name) -> Any:
            answered = real(*args)  # behind: True; rejoin, sync: the answer (None: not taken)
            if answered is not None and answered is not False:
                taken.append(name)
            return answered

        patches.append(mock.patch.object(classic_cycle, name, spy))
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch)
        _cycles(cycle, static=False)
        _cycles(cycle, static=True)
    assert taken == ["behind", "rejoin", "sync"] * 6
