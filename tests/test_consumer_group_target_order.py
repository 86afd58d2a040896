"""Ties in the uniform assignor's hash order, replayed offline against what Kafka 4.0.1 did.

Kafka walks a member's current target (Assignment.fromRecord: a HashMap filled in record order)
when it keeps or revokes partitions, so two topics in one bucket are walked in record order, and
the record order is that of the assignor's own map, where computeIfAbsent pushes a new topic at the
head of its bucket (replay/coordinator/consumer/maporder.py). The cases are runs of the
differential scenario "regex-subscription" on a real 4.0.1 broker whose two topic ids share a
bucket of a 16-slot table (topic names and ids as that broker had them; `a` and `b` subscribe
with one regex to t (3 partitions) and u (2)), with what `a` kept when `b` joined. Before the
record order was modelled the reference broke such ties by topic id and disagreed with four.
"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from replay.coordinator.consumer import ConsumerGroupBehaviour
from replay.coordinator.consumer.assignors import java_hash_order
from replay.coordinator.consumer.maporder import JavaUuidMapOrder, record_order, uuid_spread
from tests.test_consumer_group_differential import SCENARIOS, Side, play

# What `a` kept once `b` had joined (broker log "Computed a new target assignment for epoch 3"):
# t whole, or u and t-0.
T_WHOLE = ("t-0", "t-1", "t-2")
U_AND_T0 = ("t-0", "u-0", "u-1")


def _tie(run: int, serial: int, t_id: str, u_id: str, kept: tuple[str, ...]) -> tuple[Any, ...]:
    """One case as (t name, u name, t id, u id, kept): the scenario's run `run` named its topics
    cg-t-RUN-SERIAL and cg-u-RUN-SERIAL+1."""
    return (f"cg-t-{run}-{serial}", f"cg-u-{run}-{serial + 1}", t_id, u_id, kept)


# Seen on Kafka 4.0.1: (run, serial, t id, u id, what a kept).
TIES = [
    _tie(17557, 70, "5b701dae-faa2-4df6-a7a5-3481dd63341b", "21c90cd2-8b89-4c77-851f-d13ee0f2c0f0", T_WHOLE),
    _tie(17557, 82, "ba95eb11-f0b8-44a6-8cb8-14bdbd83a43d", "6859aa1d-f396-492f-89c2-5a522166963a", U_AND_T0),
    _tie(13730, 91, "a8e2a357-152c-4ba3-911e-15acbc7ce5dd", "d187023c-6eec-48e4-85fd-d32159abb65d", T_WHOLE),
    _tie(13730, 94, "d0e3f018-4b57-4ced-a630-2a830c856527", "a7aaed27-ea8b-4393-823b-0a4e3d5d44cd", U_AND_T0),
    _tie(22747, 40, "eaf3f582-782e-430f-971f-fe41556950f9", "19c7a601-b5b7-4562-9055-f9dba5e31bc0", T_WHOLE),
    _tie(22747, 73, "dbfa13ac-fb1e-4c1c-88a7-46ca3dae25e7", "9ed3b13c-e209-4809-906f-913c635524d9", T_WHOLE),
    _tie(22747, 76, "c9e4f8ca-c2e0-4c32-8161-040c231ffa4e", "395d2af5-e901-45dc-abc0-1e9a052740d8", T_WHOLE),
]  # fmt: skip


@pytest.mark.parametrize("behaviour", [ConsumerGroupBehaviour.KAFKA_4_0, ConsumerGroupBehaviour.KAFKA_4_3])
@pytest.mark.parametrize(("t", "u", "t_id", "u_id", "kept"), TIES)
def test_a_tie_between_two_topics_goes_the_way_kafka_went(
    t: str, u: str, t_id: str, u_id: str, kept: tuple[str, ...], behaviour: ConsumerGroupBehaviour
) -> None:
    ids = {t: uuid.UUID(t_id), u: uuid.UUID(u_id), "cg-other-x": uuid.UUID(int=7)}
    assert uuid_spread(ids[t]) & 15 == uuid_spread(ids[u]) & 15  # the case: one bucket
    _, assignor, steps = SCENARIOS["regex-subscription"]
    created = {t: 3, u: 2, "cg-other-x": 2}
    logical = {"t": t, "u": u, "other": "cg-other-x"}
    side = Side(created, ids, None, behaviour=behaviour)
    seen = play(side, "g", tuple(created), steps[:7], assignor, logical)
    (_, settled) = seen[6]
    owned = {key: parts for key, _, parts in settled}
    short = {t: "t", u: "u"}
    assert tuple(sorted(f"{short[p.rsplit('-', 1)[0]]}-{p.rsplit('-', 1)[1]}" for p in owned["a"])) == kept


def test_compute_if_absent_pushes_a_new_key_at_the_head_of_its_bucket() -> None:
    """HashMap(0) then computeIfAbsent per partition, as assignRemainingPartitions fills a new
    member's map: the second topic of a bucket comes out first; put appends."""
    t = uuid.UUID("5b701dae-faa2-4df6-a7a5-3481dd63341b")
    u = uuid.UUID("21c90cd2-8b89-4c77-851f-d13ee0f2c0f0")
    # java -cp kafka 4.0.1 jars: UniformAssignor on one member, HashSet<Uuid> walked u then t,
    # printed the member's map as {t=[0, 1, 2], u=[0, 1]}.
    assert record_order(None, (), [(u, 2), (t, 3)]) == [t, u]
    table = JavaUuidMapOrder(0)
    for key, calls in [(u, 2), (t, 3)]:
        table.compute_if_absent(key, calls)
    assert table.capacity == 4  # 1, then 2 (the second call for u), then 4 (the second for t)
    copied = JavaUuidMapOrder(2)
    copied.put(u)
    copied.put(t)
    assert copied.order() == [u, t] == java_hash_order([u, t])
    # a deep copy keeps the old order, a topic handed out afterwards goes first in its bucket
    assert record_order([u], [u], [(t, 1)]) == [t, u]
