"""The validator's pure transforms on tiny hand-made frames (`assertDataFrameEqual`)."""

from __future__ import annotations

from typing import Any

import pytest

from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
]

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.testing import assertDataFrameEqual  # noqa: E402

from tests.support.spark import shared_test_session  # noqa: E402
from validator import compare as C  # noqa: E402
from validator import transforms as T  # noqa: E402
from validator.schemas import (  # noqa: E402
    DIFF_COLUMNS,
    FACTS_SCHEMA,
    JSON_READ_SCHEMA,
    OBSERVED_REBALANCES_SCHEMA,
    READ_SCHEMA,
)


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return shared_test_session()


def ev(
    run: str,
    seq: int,
    event: str,
    generation_id: int = -1,
    member: str = "a",
    *,
    leader: bool = False,
    assignment: list[str] | None = None,
    error_code: int = 0,
    session: str = "s1",
    ts_ms: int | None = None,
    join_api_version: int = 5,
    client_software: str | None = None,
    detail: str | None = None,
    protocol: str | None = None,
    group_type: str | None = None,
    member_epoch: int | None = None,
) -> tuple[Any, ...]:
    return (
        session,
        "as-recorded",
        run,
        "g",
        seq,
        ts_ms if ts_ms is not None else seq * 100,
        event,
        generation_id,
        member,
        f"{member}-{run}-uuid",
        None,
        "range" if event == "generation_completed" else None,
        leader,
        None,
        join_api_version,
        error_code,
        assignment,
        client_software,
        detail,
        protocol,
        group_type,
        member_epoch,
    )


def frame(spark: SparkSession, rows: list[tuple[Any, ...]]):
    return spark.createDataFrame(rows, READ_SCHEMA)


def one_run(run: str, first_generation: int, ts_offset: int = 0) -> list[tuple[Any, ...]]:
    """Two members, two completed generations; raw ids and times depend on the arguments."""
    g1, g2 = first_generation, first_generation + 1
    return [
        ev(run, 0, "member_joined", member="a", ts_ms=ts_offset),
        ev(run, 1, "member_joined", member="b", ts_ms=ts_offset + 5),
        ev(run, 2, "rebalance_started", g1 - 1, "a", ts_ms=ts_offset + 10),
        ev(
            run,
            3,
            "generation_completed",
            g1,
            "a",
            leader=True,
            assignment=["t-1", "t-0"],
            ts_ms=ts_offset + 20,
        ),
        ev(run, 4, "generation_completed", g1, "b", assignment=["t-2"], ts_ms=ts_offset + 21),
        ev(run, 5, "rebalance_started", g1, "a", ts_ms=ts_offset + 30),
        ev(run, 6, "generation_completed", g2, "a", leader=True, assignment=["t-0"], ts_ms=ts_offset + 40),
        ev(run, 7, "generation_completed", g2, "b", assignment=["t-1", "t-2"], ts_ms=ts_offset + 41),
    ]


def test_rebalances_are_numbered_by_completion_order_not_raw_generation(spark: SparkSession) -> None:
    events = frame(spark, one_run("reference", 1) + one_run("broker-3.9.1", 7, ts_offset=1000))
    expected = spark.createDataFrame(
        [
            ("s1", "as-recorded", "reference", "g", 1, 1, 20, "a", 2, "range", 0, 10),
            ("s1", "as-recorded", "reference", "g", 2, 2, 40, "a", 2, "range", 1, 10),
            ("s1", "as-recorded", "broker-3.9.1", "g", 1, 7, 1020, "a", 2, "range", 0, 10),
            ("s1", "as-recorded", "broker-3.9.1", "g", 2, 8, 1040, "a", 2, "range", 1, 10),
        ],
        OBSERVED_REBALANCES_SCHEMA,
    )
    assertDataFrameEqual(T.observed_rebalances(T.per_run(events)), expected)


def test_assignments_are_sorted_latest_report_wins_and_null_is_empty(spark: SparkSession) -> None:
    events = frame(
        spark,
        [
            ev("reference", 1, "generation_completed", 5, "a", leader=True, assignment=["t-1", "t-0"]),
            ev("reference", 2, "generation_completed", 5, "b", assignment=None),
            ev("reference", 3, "generation_completed", 5, "a", leader=True, assignment=["t-3", "t-2"]),
        ],
    )
    got = T.member_assignments(T.per_run(events)).select("member_key", "ordinal", "assignment")
    assertDataFrameEqual(got, [("a", 1, ["t-2", "t-3"]), ("b", 1, [])], checkRowOrder=False)


def test_run_summary_counts_and_lists_fenced_expired_left_and_errors(spark: SparkSession) -> None:
    events = frame(
        spark,
        [
            *one_run("broker-4.1.0", 3),
            ev("broker-4.1.0", 8, "request_failed", 4, "b", error_code=82),
            ev("broker-4.1.0", 9, "member_fenced", 4, "b", error_code=82),
            ev("broker-4.1.0", 10, "member_expired", 4, "a"),
            ev("broker-4.1.0", 11, "member_left", 4, "c"),
            ev("recorded", 0, "member_joined", member="a", error_code=79),
        ],
    )
    got = T.run_summary(T.per_run(events)).select(
        "run", "rebalance_count", "rebalances_started", "members", "fenced", "expired", "left", "error_codes"
    )
    assertDataFrameEqual(
        got,
        [
            ("broker-4.1.0", 2, 2, 3, ["b"], ["a"], ["c"], [82]),
            ("recorded", 0, 0, 1, [], [], [], [79]),
        ],
    )


def test_bad_rows_are_flagged_with_a_reason(spark: SparkSession) -> None:
    good = ev("reference", 0, "member_joined")
    unknown = ev("reference", 1, "member_teleported")
    missing = (None, *good[1:])
    unparseable = (*([None] * len(READ_SCHEMA.fields)), "{not json")
    rows = [(*r, None) for r in (good, unknown, missing)] + [unparseable]
    raw = spark.createDataFrame(rows, JSON_READ_SCHEMA)
    got = T.flag_bad_rows(raw).select("seq", "bad_reason")
    assertDataFrameEqual(
        got,
        [(0, None), (1, "unknown event member_teleported"), (0, "missing session_id"), (None, "unparseable")],
    )


def _runs(spark: SparkSession, scenario: str, runs: tuple[str, ...]):
    return spark.createDataFrame(
        [("s1", scenario, "g", r, None, 1, 0, 42) for r in runs],
        "session_id string, scenario string, group_id string, run string, not_run_detail string, "
        "rebalance_count int, partitions_moved int, facts_hash long",
    )


def test_pairs_compare_first_attempts_never_repeats(spark: SparkSession) -> None:
    runs = _runs(
        spark, "as-recorded", ("reference", "reference~2", "recorded", "broker-3.9.1", "broker-4.1.0~2")
    )
    got = C.comparisons(runs, "reference").select(
        "expected_run", "observed_run", "expected_present", "same_facts"
    )
    assertDataFrameEqual(
        got, [("reference", "recorded", True, True), ("reference", "broker-3.9.1", True, True)]
    )


def test_under_a_modified_scenario_recorded_is_never_compared(spark: SparkSession) -> None:
    """AGREED #5: the capture as it ran is no expectation for a replay that changed it."""
    runs = _runs(spark, "static-upgrade", ("reference", "recorded", "broker-3.9.2"))
    pairs = [("static-upgrade", "reference", "broker-3.9.2")]
    for expected_run in ("reference", "recorded"):  # --expected recorded falls back to the reference
        got = C.comparisons(runs, expected_run).select("scenario", "expected_run", "observed_run")
        assertDataFrameEqual(got, pairs)
    as_recorded = _runs(spark, "as-recorded", ("reference", "recorded", "broker-3.9.2"))
    got = C.comparisons(as_recorded, "recorded").select("expected_run", "observed_run")
    assertDataFrameEqual(got, [("recorded", "reference"), ("recorded", "broker-3.9.2")])


def _facts(spark: SparkSession, rows: list[tuple[str, str, str, int, str]]):
    return spark.createDataFrame(
        [("s1", "x", run, "g", a, sub, o, v) for run, a, sub, o, v in rows], FACTS_SCHEMA
    )


def test_diff_labels_changed_missing_unexpected_and_noise(spark: SparkSession) -> None:
    facts = _facts(
        spark,
        [
            ("reference", "assignment", "a", 1, "t-0"),
            ("reference", "assignment", "b", 1, "t-1"),
            ("reference", "leader", "", 1, "a"),
            ("reference", "fenced", "b", 0, "fenced"),
            ("reference~2", "assignment", "a", 1, "t-1"),  # the reference itself is unstable here
            ("reference~2", "assignment", "b", 1, "t-1"),
            ("reference~2", "leader", "", 1, "a"),
            ("reference~2", "fenced", "b", 0, "fenced"),
            ("broker-9", "assignment", "a", 1, "t-1"),  # noise
            ("broker-9", "assignment", "b", 1, "t-0"),  # a real change
            ("broker-9", "leader", "", 1, "a"),
            ("broker-9", "expired", "a", 0, "expired"),  # unexpected
            # fenced b missing in broker-9; broker-8 has no facts at all but exists
        ],
    )
    summary = spark.createDataFrame(
        [
            ("s1", "x", r, "g", None, [], [5], False)
            for r in ("reference", "reference~2", "broker-9", "broker-8")
        ],
        "session_id string, scenario string, run string, group_id string, not_run_detail string, "
        "left_without_instance_id array<string>, join_api_versions array<int>, skip_assignment_seen boolean",
    )
    got = C.diff_runs(facts, summary, "reference").select("observed_run", *DIFF_COLUMNS, "is_noise")
    assertDataFrameEqual(
        got,
        [
            ("broker-9", "assignment", "a", 1, "t-0", "t-1", "changed", 1, True),
            ("broker-9", "assignment", "b", 1, "t-1", "t-0", "changed", 1, False),
            ("broker-9", "expired", "a", 0, None, "expired", "unexpected", 5, False),
            ("broker-9", "fenced", "b", 0, "fenced", None, "missing", 5, False),
            ("broker-8", "assignment", "a", 1, "t-0", None, "missing", 1, True),
            ("broker-8", "assignment", "b", 1, "t-1", None, "missing", 1, False),
            ("broker-8", "leader", "", 1, "a", None, "missing", 2, False),
            ("broker-8", "fenced", "b", 0, "fenced", None, "missing", 5, False),
        ],
    )


def _compare(events):
    runs = T.per_run(events)
    summary, facts = T.run_summary(runs), T.run_facts(runs)
    pairs = C.comparisons(runs, "reference")
    diffs = C.diff_runs(facts, summary, "reference")
    return facts, pairs, summary, diffs


def test_identical_rebalances_with_other_ids_times_and_generations_do_not_differ(spark: SparkSession) -> None:
    events = frame(spark, one_run("reference", 1) + one_run("broker-3.9.1", 41, ts_offset=777))
    facts, pairs, _summary, diffs = _compare(events)
    assert facts.count() == 2 * (1 + 2 + 4)  # count, two leaders, four assignments per run
    assert diffs.count() == 0
    verdicts = C.session_verdicts(pairs, diffs).select("observed_run", "status", "diffs")
    assertDataFrameEqual(verdicts, [("broker-3.9.1", "pass", 0)])


def test_verdicts_name_what_differs_and_fail_without_expected_run(spark: SparkSession) -> None:
    broker = one_run("broker-4.1.0", 1)
    broker[6] = ev("broker-4.1.0", 6, "generation_completed", 2, "a", leader=True, assignment=["t-9"])
    broker += [
        ev("broker-4.1.0", 8, "rebalance_started", 2, "a"),
        ev("broker-4.1.0", 9, "generation_completed", 3, "a", leader=True, assignment=["t-0"]),
        ev("broker-4.1.0", 10, "generation_completed", 3, "b", assignment=["t-1", "t-2"]),
        ev("broker-4.1.0", 11, "member_fenced", 3, "b", error_code=82),
    ]
    orphan = [ev("broker-4.1.0", 0, "member_joined", session="s2")]
    events = frame(spark, one_run("reference", 1) + broker + orphan)
    _, pairs, _summary, diffs = _compare(events)
    got = C.session_verdicts(pairs, diffs).select(
        "session_id",
        "status",
        "rebalance_count_delta",
        "first_divergent_ordinal",
        "members_changed",
        "unexpected_fenced",
        "error_changes",
        "worst_aspect",
    )
    assertDataFrameEqual(
        got,
        [
            ("s1", "differs", 1, 2, ["a", "b"], ["b"], ["b: - -> fenced_instance_id(82)"], "fenced"),
            ("s2", "failed", None, 1, [], [], [], "expected run missing"),
        ],
    )


def test_client_dimension_prefers_client_software_then_join_versions(spark: SparkSession) -> None:
    events = frame(
        spark,
        [
            ev("reference", 0, "member_joined", member="a", session="s1", client_software="librdkafka/2.6.1"),
            ev("reference", 1, "member_joined", member="b", session="s1", client_software="java/3.9.1"),
            ev("reference", 0, "member_joined", member="a", session="s2", join_api_version=9),
            ev("reference", 1, "member_joined", member="b", session="s2", join_api_version=5),
        ],
    )
    assertDataFrameEqual(
        C.session_clients(T.per_run(events)),
        [("s1", "java/3.9.1+librdkafka/2.6.1"), ("s2", "JoinGroup v5+v9")],
    )


def test_matrix_counts_statuses_per_scenario_client_and_broker(spark: SparkSession) -> None:
    cols = (
        "session_id string, scenario string, group_id string, expected_run string, observed_run string, "
        "status string, diffs long, noise_diffs long, worst_severity int, worst_aspect string, "
        "expected_partitions_moved int, observed_partitions_moved int"
    )
    verdicts = spark.createDataFrame(
        [
            ("s1", "up", "g", "reference", "broker-3.9.1", "pass", 0, 2, None, None, 3, 3),
            ("s2", "up", "g", "reference", "broker-3.9.1", "differs", 3, 0, 1, "assignment", 3, 5),
            ("s3", "up", "g", "reference", "broker-3.9.1", "differs", 1, 0, 5, "fenced", 0, 2),
            ("s4", "up", "g", "recorded", "reference", "failed", 0, 0, 9, "never stabilized", 4, 0),
        ],
        cols,
    )
    clients = spark.createDataFrame(
        [("s1", "java/3.9.1"), ("s2", "java/3.9.1"), ("s3", "java/3.9.1"), ("s4", "java/3.9.1")],
        "session_id string, client string",
    )
    got = C.compatibility_matrix(verdicts, clients).select(
        "observed_run",
        "broker_version",
        "sessions",
        "passed",
        "differs",
        "failed",
        "noise_diffs",
        "worst_aspect",
        "worst_session",
        "expected_partitions_moved",
        "partitions_moved",
    )
    assertDataFrameEqual(
        got,
        [
            ("broker-3.9.1", "3.9.1", 3, 1, 2, 0, 2, "fenced", "s3", 6, 10),
            ("reference", "reference", 1, 0, 0, 1, 0, "never stabilized", "s4", 4, 0),
        ],
    )


NOT_RUN_REASON = "JoinGroup v9 needs a broker with KIP-814 (Kafka 3.2+)"


def _with_detail(events):
    """The `detail` column (AGREED #1) on the rows of event `not_run`."""
    if "detail" in events.columns:
        events = events.drop("detail")
    return events.withColumn(
        "detail", F.when(F.col("event") == "not_run", F.lit(NOT_RUN_REASON)).cast("string")
    )


def test_a_run_not_carried_out_is_a_not_run_verdict_never_a_pass(spark: SparkSession) -> None:
    events = _with_detail(
        frame(
            spark,
            one_run("reference", 1)
            + one_run("broker-3.9.2", 1)
            + [ev("broker-2.8.2", 0, "not_run", member="")],
        )
    )
    _, pairs, summary, diffs = _compare(events)
    not_run = summary.where("run = 'broker-2.8.2'").select("rebalance_count", "members", "not_run_detail")
    assertDataFrameEqual(not_run, [(0, 0, NOT_RUN_REASON)])
    assert diffs.where("observed_run = 'broker-2.8.2'").count() == 0, "not run is not 'everything missing'"
    verdicts = C.session_verdicts(pairs, diffs)
    got = verdicts.select("observed_run", "status", "worst_aspect", "not_run_detail", "explanation")
    reason = f"broker-2.8.2 not run: {NOT_RUN_REASON}"
    assertDataFrameEqual(
        got,
        [
            ("broker-3.9.2", "pass", None, None, None),
            ("broker-2.8.2", "not run", "not run", reason, reason),
        ],
    )
    clients = spark.createDataFrame([("s1", "java/3.9.1")], "session_id string, client string")
    cells = C.compatibility_matrix(verdicts, clients).select(
        "observed_run", "passed", "not_run", "worst_aspect"
    )
    assertDataFrameEqual(cells, [("broker-3.9.2", 1, 0, None), ("broker-2.8.2", 0, 1, "not run")])


def test_an_expected_run_not_carried_out_makes_every_comparison_not_run(spark: SparkSession) -> None:
    events = _with_detail(
        frame(spark, [ev("reference", 0, "not_run", member=""), *one_run("broker-3.9.2", 1)])
    )
    _, pairs, _summary, diffs = _compare(events)
    assert diffs.count() == 0
    got = C.session_verdicts(pairs, diffs).select("observed_run", "status")
    assertDataFrameEqual(got, [("broker-3.9.2", "not run")])


def _causes(diffs) -> dict[tuple[str, str], tuple[str, str | None]]:
    return {
        (r["aspect"], r["subject"]): (r["cause"], r["next_step"])
        for r in diffs.select("aspect", "subject", "cause", "next_step").collect()
    }


def test_differences_are_explained_fencing_and_extra_rebalance(spark: SparkSession) -> None:
    broker = one_run("broker-3.9.2", 1)
    broker += [
        ev("broker-3.9.2", 8, "member_left", 2, "c"),  # dynamic: no group_instance_id
        ev("broker-3.9.2", 9, "rebalance_started", 2, "a"),
        ev("broker-3.9.2", 10, "generation_completed", 3, "a", leader=True, assignment=["t-0"]),
        ev("broker-3.9.2", 11, "generation_completed", 3, "b", assignment=["t-1", "t-2"]),
        ev("broker-3.9.2", 12, "member_fenced", 3, "b", error_code=82),
    ]
    _, _, _, diffs = _compare(frame(spark, one_run("reference", 1) + broker))
    causes = _causes(diffs)
    assert causes[("fenced", "b")][0] == "fenced: two live members share group.instance.id b (KIP-345)"
    assert "group.instance.id" in (causes[("fenced", "b")][1] or "")
    assert causes[("rebalance_count", "")][0] == "extra rebalance: member left without group.instance.id (c)"
    assert causes[("error", "b")][0] == "b saw other errors: none -> fenced_instance_id(82)"
    assert all(cause for cause, _ in causes.values()), causes


def test_fencing_and_expiry_are_explained_whichever_run_saw_them(spark: SparkSession) -> None:
    reference = one_run("reference", 1)
    reference += [
        ev("reference", 8, "member_fenced", 2, "b", error_code=82),
        ev("reference", 9, "member_expired", 2, "c"),
    ]
    broker = [*one_run("broker-3.9.2", 1), ev("broker-3.9.2", 8, "member_expired", 2, "a")]
    causes = _causes(_compare(frame(spark, reference + broker))[3])
    assert causes[("fenced", "b")] == (
        "not fenced: b was fenced in the expected run (KIP-345)",
        "check that the observed coordinator rejects a duplicate group.instance.id "
        "(static membership needs JoinGroup v5+, Kafka 2.3+)",
    )
    assert causes[("expired", "a")][0] == "expired: a missed its session timeout"
    assert "session.timeout.ms" in (causes[("expired", "a")][1] or "")
    assert causes[("expired", "c")] == (
        "not expired: c expired in the expected run",
        "compare the session timeout bounds of the two coordinators",
    )


def test_leader_that_did_not_skip_assignment_is_explained_by_kip_814(spark: SparkSession) -> None:
    def run(name: str, skip: bool, join_api_version: int, second: list[str]):
        rows = one_run(name, 1)
        rows[6] = ev(name, 6, "generation_completed", 2, "a", leader=True, assignment=second)
        rows = [(*r[:13], skip if r[6] == "generation_completed" else None, *r[14:]) for r in rows]
        return [(*r[:14], join_api_version, *r[15:]) for r in rows]

    events = frame(spark, run("reference", True, 9, ["t-0"]) + run("broker-2.8.2", False, 7, ["t-9"]))
    _, _, _, diffs = _compare(events)
    assert _causes(diffs)[("assignment", "a")][0] == (
        "leader did not skip assignment: JoinGroup below v9 (KIP-814)"
    )


def test_churn_counts_partitions_moved_and_time_without_partitions(spark: SparkSession) -> None:
    """Generation #2 moves t-1 from a to b: one partition moved (at its new owner); each member
    sat through both rebalances' pauses (10 ms each: rebalance_started -> completion)."""
    runs = T.per_run(frame(spark, one_run("reference", 1)))
    got = T.observed_rebalances(runs).select("ordinal", "partitions_moved", "pause_ms")
    assertDataFrameEqual(got, [(1, 0, 10), (2, 1, 10)])
    churn = runs.select(F.explode("member_churn").alias("m")).select("m.*")
    assertDataFrameEqual(churn, [("a", 0, 20), ("b", 1, 20)])
    assert runs.select("partitions_moved").first()[0] == 1


def test_facts_hash_is_equal_for_equal_facts_and_differs_on_each_compared_fact(spark: SparkSession) -> None:
    """Runs are diffed fact by fact only when their `facts_hash` differ: other ids, times and raw
    generations keep it equal; a changed assignment, leader, extra rebalance or fencing changes it."""
    base = one_run("reference", 1)
    assignment = one_run("broker-a", 1)
    assignment[7] = ev("broker-a", 7, "generation_completed", 2, "b", assignment=["t-1"])
    leader = one_run("broker-b", 1)
    leader[6] = ev("broker-b", 6, "generation_completed", 2, "a", assignment=["t-0"])
    leader[7] = ev("broker-b", 7, "generation_completed", 2, "b", leader=True, assignment=["t-1", "t-2"])
    extra = [*one_run("broker-c", 1), ev("broker-c", 8, "generation_completed", 3, "a", assignment=["t-0"])]
    fenced = [*one_run("broker-d", 1), ev("broker-d", 8, "member_fenced", 2, "b")]
    same = one_run("broker-e", 40, ts_offset=999)
    runs = T.per_run(frame(spark, base + assignment + leader + extra + fenced + same))
    hashes = {r["run"]: r["facts_hash"] for r in runs.select("run", "facts_hash").collect()}
    assert hashes["broker-e"] == hashes["reference"]
    changed = [hashes[r] for r in ("reference", "broker-a", "broker-b", "broker-c", "broker-d")]
    assert len(set(changed)) == len(changed), hashes
