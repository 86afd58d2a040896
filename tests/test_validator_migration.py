"""The protocol migration view's transforms (validator.migration) on tiny hand-made frames: steps
from protocol switches, rejoins and partitions per step, time without partitions, timeline
segments, protocol paths, and the facts and hashes the comparison reads."""

from __future__ import annotations

from typing import Any

import pytest

from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
]

pytest.importorskip("pyspark")

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from tests.support.spark import shared_test_session  # noqa: E402
from tests.test_validator_transforms import ev  # noqa: E402
from validator import migration as M  # noqa: E402
from validator.schemas import (  # noqa: E402
    FACTS_SCHEMA,
    GROUP_PROTOCOL_SCHEMA,
    MIGRATION_STEPS_SCHEMA,
    MIGRATION_TIMELINE_SCHEMA,
    READ_SCHEMA,
)

KEY = ("s1", "as-recorded", "reference", "g")


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return shared_test_session()


def row(
    seq: int, ts: int, event: str, member: str, protocol: str, group_type: str | None, **kw: Any
) -> tuple:
    """An event of run `reference`; `protocol_name` range on classic joins unless given."""
    base = list(ev("reference", seq, event, member=member, ts_ms=ts, protocol=protocol, group_type=group_type,
                   assignment=kw.get("assignment"), detail=kw.get("detail")))  # fmt: skip
    base[11] = kw.get("assignor", "range" if protocol == "classic" else None)
    return tuple(base)


def rolling_upgrade() -> list[tuple]:
    """a (dynamic, leaves) then b (static, no LeaveGroup) switch from classic to consumer."""
    c, k = "classic", "consumer"
    steps: list[tuple[Any, ...]] = [
        (1000, "member_joined", "a", c, c, {}),
        (1000, "member_joined", "b", c, c, {}),
        (1000, "assignment_received", "a", c, c, {"assignment": ["t-0"]}),
        (1000, "assignment_received", "b", c, c, {"assignment": ["t-1"]}),
        # step 1 begins with a's LeaveGroup at 10 s; b (eager range) rejoins at 11 s
        (10000, "member_left", "a", c, c, {}),
        (10000, "assignment_revoked", "a", c, c, {"assignment": ["t-0"]}),
        (11000, "member_joined", "b", c, c, {}),
        (11500, "generation_completed", "b", c, c, {"assignment": ["t-0", "t-1"]}),
        (11500, "assignment_received", "b", c, c, {"assignment": ["t-0"]}),
        (12000, "group_converted", "a", k, k, {"detail": "classic -> consumer"}),
        (12000, "member_joined", "a", k, k, {}),
        # b, classic inside the consumer group, rejoins and gives t-0 up at once
        (13000, "member_joined", "b", c, k, {}),
        (13000, "generation_completed", "b", c, k, {"assignment": ["t-1"]}),
        (13000, "assignment_revoked", "b", c, k, {"assignment": ["t-0"]}),
        (14000, "assignment_received", "a", k, k, {"assignment": ["t-0"]}),
        # step 2 begins with b's first consumer heartbeat (a static member stops without leaving)
        (20000, "member_joined", "b", k, k, {}),
        (20000, "assignment_revoked", "b", k, k, {"assignment": ["t-1"]}),
        (21000, "assignment_received", "b", k, k, {"assignment": ["t-1"]}),
        (25000, "assignment_received", "a", k, k, {"assignment": []}),
    ]
    return [row(seq, ts, event, m, p, t, **kw) for seq, (ts, event, m, p, t, kw) in enumerate(steps)]


def frame(spark: SparkSession, rows: list[tuple]) -> DataFrame:
    return spark.createDataFrame(rows, READ_SCHEMA)


def stepped_of(spark: SparkSession, rows: list[tuple]) -> tuple[DataFrame, DataFrame]:
    stepped = M.with_steps(M.member_rows(frame(spark, rows)))
    return stepped, M.segments(stepped)


def test_steps_begin_at_each_switch_and_count_rejoins_moves_and_time_without_partitions(
    spark: SparkSession,
) -> None:
    stepped, timeline = stepped_of(spark, rolling_upgrade())
    steps = M.migration_steps(stepped, timeline)
    expected = spark.createDataFrame(
        [
            # step 0: the group forms; each classic member joins once, 2 partitions received
            (*KEY, 0, 1000, 10000, [], "classic", [], 2, [("a", 1), ("b", 1)], []),
            # step 1 (a leaves at 10 s, comes back on consumer): b rejoins twice (eager range: it
            # holds nothing 11.0-11.5 s), a holds nothing from 12 s to 14 s; 2 partitions received
            (
                *KEY,
                1,
                10000,
                20000,
                ["a:consumer"],
                "consumer",
                ["classic -> consumer"],
                2,
                [("b", 2)],
                [("a", 2000), ("b", 500)],
            ),
            # step 2 (b's first consumer heartbeat, no LeaveGroup before it): b, left out of the
            # rejoins, holds nothing 20-21 s
            (*KEY, 2, 20000, 25000, ["b:consumer"], "consumer", [], 1, [], [("b", 1000)]),
        ],
        MIGRATION_STEPS_SCHEMA,
    )
    assertDataFrameEqual(steps, expected)


def test_switches_that_begin_together_are_one_step(spark: SparkSession) -> None:
    """An offline migration: everybody leaves at once, then all come back on the consumer protocol."""
    c, k = "classic", "consumer"
    rows = [
        row(0, 1000, "member_joined", "a", c, c),
        row(1, 1000, "member_joined", "b", c, c),
        row(2, 5000, "member_left", "a", c, c),
        row(3, 5000, "member_left", "b", c, c),
        row(4, 8000, "member_joined", "a", k, k),
        row(5, 8100, "member_joined", "b", k, k),
    ]
    stepped, timeline = stepped_of(spark, rows)
    got = M.migration_steps(stepped, timeline).select("step", "start_ms", "switched").collect()
    assert [tuple(r) for r in got] == [(0, 1000, []), (1, 5000, ["a:consumer", "b:consumer"])]


def test_timeline_segments_hold_empty_and_the_group_type(spark: SparkSession) -> None:
    _, timeline = stepped_of(spark, rolling_upgrade())
    c, k = "classic", "consumer"
    expected = spark.createDataFrame(
        [
            (*KEY, "", "group_type", c, 1000, 12000),
            (*KEY, "", "group_type", k, 12000, 25000),
            (*KEY, "a", "holding", c, 1000, 10000),
            (*KEY, "a", "empty", k, 12000, 14000),
            (*KEY, "a", "holding", k, 14000, 25000),
            (*KEY, "b", "holding", c, 1000, 11000),
            (*KEY, "b", "empty", c, 11000, 11500),
            (*KEY, "b", "holding", c, 11500, 20000),
            (*KEY, "b", "empty", k, 20000, 21000),
            (*KEY, "b", "holding", k, 21000, 25000),
        ],
        MIGRATION_TIMELINE_SCHEMA,
    )
    assertDataFrameEqual(timeline, expected)


def test_a_cooperative_classic_member_keeps_its_partitions_while_it_rejoins(spark: SparkSession) -> None:
    c = "classic"
    rows = [
        row(0, 1000, "member_joined", "a", c, c, assignor="cooperative-sticky"),
        row(1, 1000, "assignment_received", "a", c, c, assignment=["t-0"]),
        row(2, 5000, "member_joined", "a", c, c, assignor="cooperative-sticky"),
        row(3, 6000, "generation_completed", "a", c, c, assignment=["t-0"]),
        row(4, 9000, "member_joined", "a", c, c),  # range: eager, holds nothing until its SyncGroup
        row(5, 9500, "generation_completed", "a", c, c, assignment=["t-0"]),
    ]
    _, timeline = stepped_of(spark, rows)
    empty = timeline.where("state = 'empty'").select("start_ms", "end_ms").collect()
    assert [tuple(r) for r in empty] == [(9000, 9500)]


def test_protocol_paths_say_where_the_members_started_and_ended(spark: SparkSession) -> None:
    c, k = "classic", "consumer"

    def run(name: str, rows: list[tuple]) -> list[tuple]:
        return [(*r[:2], name, *r[3:]) for r in rows]

    mixed = [row(0, 1, "member_joined", "a", c, k), row(1, 1, "member_joined", "b", k, k)]
    refused = [
        row(0, 1, "member_joined", "a", c, c),
        row(1, 1, "member_joined", "b", c, c),
        row(2, 5, "request_failed", "b", k, c),
    ]
    rows = run("up", rolling_upgrade()) + run("mixed", mixed) + run("refused", refused)
    paths = M.protocol_paths(M.with_steps(M.member_rows(frame(spark, rows))))
    expected = spark.createDataFrame(
        [
            ("s1", "as-recorded", "up", "g", "classic -> consumer"),
            ("s1", "as-recorded", "mixed", "g", "classic+consumer"),
            ("s1", "as-recorded", "refused", "g", "classic -> classic+consumer"),
        ],
        GROUP_PROTOCOL_SCHEMA,
    )
    assertDataFrameEqual(paths, expected)
    expected_run = F.lit("refused")
    by_group = M.group_protocols(paths, expected_run).collect()
    assert [r["protocol"] for r in by_group] == ["classic -> classic+consumer"]


def test_facts_per_step_and_their_hash(spark: SparkSession) -> None:
    stepped, timeline = stepped_of(spark, rolling_upgrade())
    steps = M.migration_steps(stepped, timeline)
    facts = M.migration_facts(steps)
    expected = spark.createDataFrame(
        [
            (*KEY, "group_type", "", 0, "classic"),
            (*KEY, "partitions_moved", "", 0, "2"),
            (*KEY, "rejoins", "a", 0, "1"),
            (*KEY, "rejoins", "b", 0, "1"),
            (*KEY, "group_type", "", 1, "consumer"),
            (*KEY, "partitions_moved", "", 1, "2"),
            (*KEY, "protocol_switch", "", 1, "a:consumer"),
            (*KEY, "rejoins", "b", 1, "2"),
            (*KEY, "group_type", "", 2, "consumer"),
            (*KEY, "partitions_moved", "", 2, "1"),
            (*KEY, "protocol_switch", "", 2, "b:consumer"),
        ],
        FACTS_SCHEMA,
    )
    assertDataFrameEqual(facts, expected)
    # equal facts, equal hashes (times are not facts); one changed fact, another hash
    later = [(*r[:5], r[5] + 7, *r[6:]) for r in rolling_upgrade()]
    one_less = [r for r in rolling_upgrade() if r[4] != 11]  # b's second rejoin in step 1

    def hash_of(rows: list[tuple]) -> int:
        s, t = stepped_of(spark, rows)
        return M.facts_hashes(M.migration_facts(M.migration_steps(s, t))).collect()[0]["migration_hash"]

    assert hash_of(later) == hash_of(rolling_upgrade()) != hash_of(one_less)


def test_runs_without_migration_facts_keep_their_hash(spark: SparkSession) -> None:
    runs = spark.createDataFrame(
        [("s1", "x", "reference", "g", 11), ("s1", "x", "broker-4.3.1", "g", 11)],
        "session_id string, scenario string, run string, group_id string, facts_hash long",
    )
    hashes = spark.createDataFrame(
        [("s1", "x", "broker-4.3.1", "g", 5)],
        "session_id string, scenario string, run string, group_id string, migration_hash long",
    )
    got = {r["run"]: r["facts_hash"] for r in M.with_migration_hash(runs, hashes).collect()}
    assert got["reference"] == 11 and got["broker-4.3.1"] not in (11, None)


def test_only_groups_that_saw_the_consumer_protocol_get_a_migration_view(spark: SparkSession) -> None:
    c, k = "classic", "consumer"
    rows = [row(0, 1, "member_joined", "a", c, c)]
    rows += [(r[0], "other", *r[2:]) for r in [row(0, 1, "member_joined", "a", c, k)]]
    keys = [tuple(r) for r in M.consumer_groups(frame(spark, rows)).collect()]
    assert keys == [("s1", "other", "g")]
