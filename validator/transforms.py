"""Pure `DataFrame -> DataFrame` transforms: events in, rebalances, facts, diffs and verdicts out.

No I/O and no session here; `validator.jobs` reads, calls these and writes. Each function is tested
on tiny frames in `tests/test_validator_transforms.py`. This module holds the per-run stage (one
aggregation pass over the events gives every fact of a run); `validator.compare` the per-group
stage (one more gives the diff, the verdicts and the matrix).

What is compared (design section 4): how many rebalances each group went through, who led each
completed generation, each member's assignment after each completed generation, who was fenced or
expired, and the error codes each member saw. Completed generations are numbered by *ordinal*
(1, 2, ... in the order they completed), never by raw `generation_id`, and `member_id` and `ts_ms`
are never compared: a broker that starts a group at generation 7 with other member ids and other
timing still passes if the group went through the same rebalances.

Runs and repeats: a run named `X~N` (N >= 2) is the N-th repeat of run `X` (the same replay done
again, e.g. `reference~2`). Differences between `X` and its repeats are *noise* (Diffy's idea): a
fact on which a run disagrees with its own repeat is unstable in that session, so a difference on
that fact between any two runs of the session is labelled noise and does not fail the comparison.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from replay.events import RECORDED_RUN, REFERENCE_RUN, EventName
from replay.scenario import AS_RECORDED
from validator.churn import generations_with_churn, member_churn
from validator.explain import error_names
from validator.migration import MIGRATION_ASPECTS
from validator.schemas import (
    CORRUPT_RECORD_COLUMN,
    EVENT_NAMES,
    REQUIRED_EVENT_COLUMNS,
    RUN_KEY,
    RUN_SUMMARY_SCHEMA,
)

ASPECT_SEVERITY: dict[str, int] = {
    "assignment": 1,
    "leader": 2,
    "rebalance_count": 3,
    "error": 4,
    "expired": 5,
    "fenced": 5,
    **MIGRATION_ASPECTS,  # per migration step: partitions moved, switches, rejoins, group type
}
"""How bad a difference is; the worst one names a session's and a matrix cell's verdict."""

FAILED_SEVERITY = 9
"""Severity of a comparison whose expected run is missing or whose group never stabilized."""

NOT_RUN_SEVERITY = 8
"""Severity of a comparison with a side that could not be carried out."""

WHOLE_RUN = 0
"""`ordinal` of a fact about the whole run (rebalance count, fencing, expiry, errors)."""

REPEAT_SUFFIX = r"~(\d+)$"

AS_RECORDED_SCENARIO = AS_RECORDED.name

NOT_RUN = "not run"
"""Verdict of a comparison with a side that could not be carried out (event `not_run`)."""


def base_run(run: Column) -> Column:
    """`broker-3.9.1~2` -> `broker-3.9.1`."""
    return F.regexp_replace(run, REPEAT_SUFFIX, "")


def run_attempt(run: Column) -> Column:
    """`X` -> 1, `X~2` -> 2."""
    digits = F.regexp_extract(run, REPEAT_SUFFIX, 1)
    return F.when(digits == "", F.lit(1)).otherwise(digits.cast("int"))


def expected_run_for(scenario: Column, expected_run: str) -> Column:
    """The run a scenario's runs are compared against (AGREED #5).

    `recorded` is the capture as it ran, unmodified: it can only be the expectation (or be compared)
    under `as-recorded`. Under any other scenario the reference replaying that scenario is.
    """
    if expected_run != RECORDED_RUN:
        return F.lit(expected_run)
    return F.when(scenario == AS_RECORDED_SCENARIO, F.lit(RECORDED_RUN)).otherwise(F.lit(REFERENCE_RUN))


def is_observed(run: Column, scenario: Column, expected: Column) -> Column:
    """A first attempt other than the expected run; `recorded` only under `as-recorded`."""
    return (
        (run_attempt(run) == 1)
        & (run != expected)
        & ((scenario == AS_RECORDED_SCENARIO) | (base_run(run) != RECORDED_RUN))
    )


def _optional(frame: DataFrame, column: str) -> Column:
    """An optional event column, null when an older input lacks it."""
    return F.col(column) if column in frame.columns else F.lit(None).cast("string")


# ---- input hygiene ------------------------------------------------------------------------------


def flag_bad_rows(raw: DataFrame) -> DataFrame:
    """Adds `bad_reason`: null for a good row, else why the row cannot be used.

    Unparseable lines (the corrupt-record column is set), nulls in required columns and event
    names outside the contract are bad. Nothing is dropped here; the caller splits and counts.
    """
    missing = F.concat_ws(",", *[F.when(F.col(c).isNull(), F.lit(c)) for c in REQUIRED_EVENT_COLUMNS])
    reason = F.when(missing != "", F.concat(F.lit("missing "), missing)).when(
        ~F.col("event").isin(*EVENT_NAMES), F.concat(F.lit("unknown event "), F.col("event"))
    )
    if CORRUPT_RECORD_COLUMN in raw.columns:
        reason = F.when(F.col(CORRUPT_RECORD_COLUMN).isNotNull(), F.lit("unparseable")).otherwise(reason)
    return raw.withColumn("bad_reason", reason)


# ---- per run: one aggregation pass ------------------------------------------------------------


def empty_strings() -> Column:
    """An empty `array<string>` (a function: columns need an active session to be built)."""
    return F.array().cast("array<string>")


def _lit(value: Column | str | int) -> Column:
    return value if isinstance(value, Column) else F.lit(value)


def _fact(aspect: str, subject: Column | str, ordinal: Column | int, value: Column) -> Column:
    return F.struct(
        _lit(aspect).alias("aspect"),
        _lit(subject).alias("subject"),
        _lit(ordinal).cast("int").alias("ordinal"),
        value.cast("string").alias("value"),
    )


RUN_INPUTS: tuple[str, ...] = (
    "_generation",
    "_rebalance_started",
    "_member",
    "_fenced",
    "_expired",
    "_left",
    "_member_error",
    "_not_run",
    "_join_api_version",
    "_left_without_instance_id",
    "_start",
    "_done_seq",
    "_done_ts_ms",
    "_done_leader",
    "_done_protocol",
    "_report",
)
"""The columns `run_inputs` adds: each aggregation input of `per_run`, null where it does not apply."""


def run_inputs(events: DataFrame, extra_keys: tuple[str, ...] = ()) -> DataFrame:
    """The events reduced to what `per_run` aggregates: the run key, `extra_keys`, `ts_ms`,
    `skip_assignment`, `client_software` and one column per aggregation input (RUN_INPUTS); other
    columns (`member_id`, optional columns a newer replay adds) are left behind here.

    Why a projection of its own: `collect_list`/`collect_set` run in ObjectHashAggregate, which
    evaluates its input expressions *interpreted*, row by row (a `when(event = ..., struct(...))`
    per aggregation and row), while a projection is code-generated. The job applies this before
    its shuffle by session, so the optimizer cannot fold it back into the aggregation (1M rows:
    one such `collect_list` 4.8 s -> 0.7 s, bench/README.md). A completed generation's report
    (its assignment sorted) is built here too; `_generation` is its generation id, null for
    every other event.
    """
    event = F.col("event")
    member = F.col("member_key")

    def on(name: EventName, value: Column) -> Column:
        return F.when(event == name.value, value)

    ran = event != EventName.NOT_RUN.value
    done = (event == EventName.GENERATION_COMPLETED.value) & member.isNotNull()
    report = F.struct(
        "member_key",
        "seq",
        "ts_ms",
        "is_leader",
        "protocol_name",
        F.sort_array(F.coalesce(F.col("assignment"), empty_strings())).alias("assignment"),
    )
    return events.select(
        *RUN_KEY,
        *extra_keys,
        "ts_ms",
        "skip_assignment",
        _optional(events, "client_software").alias("client_software"),
        F.when(done, F.col("generation_id")).alias("_generation"),
        (event == EventName.REBALANCE_STARTED.value).alias("_rebalance_started"),
        F.when(ran, member).alias("_member"),
        on(EventName.MEMBER_FENCED, member).alias("_fenced"),
        on(EventName.MEMBER_EXPIRED, member).alias("_expired"),
        on(EventName.MEMBER_LEFT, member).alias("_left"),
        F.when(F.col("error_code") != 0, F.struct("member_key", "error_code")).alias("_member_error"),
        on(EventName.NOT_RUN, F.coalesce(_optional(events, "detail"), F.lit("no reason given"))).alias(
            "_not_run"
        ),
        F.when(ran, F.col("join_api_version")).alias("_join_api_version"),
        F.when((event == EventName.MEMBER_LEFT.value) & F.col("group_instance_id").isNull(), member).alias(
            "_left_without_instance_id"
        ),
        on(EventName.REBALANCE_STARTED, F.struct("seq", "ts_ms")).alias("_start"),
        F.when(done, F.col("seq")).alias("_done_seq"),
        F.when(done, F.col("ts_ms")).alias("_done_ts_ms"),
        F.when(done & F.col("is_leader"), member).alias("_done_leader"),
        F.when(done, F.col("protocol_name")).alias("_done_protocol"),
        F.when(done, report).alias("_report"),
    )


def _sorted_union(sets: str) -> Column:
    """The union of the per-generation `collect_set`s in column `sets`, sorted."""
    return F.sort_array(F.array_distinct(F.flatten(F.collect_list(sets))))


def _latest_assignments() -> Column:
    """Each member's assignment in a generation: from its latest report (the reports are sorted
    by member, then seq, so a member's last one)."""
    reports = F.col("reports")
    latest = F.filter(
        reports,
        lambda r, i: (
            (i + 1 == F.size(reports)) | (F.element_at(reports, i + 2)["member_key"] != r["member_key"])
        ),
    )
    return F.transform(
        latest, lambda r: F.struct(r["member_key"].alias("member_key"), r["assignment"].alias("assignment"))
    )


def _generation_entry() -> Column:
    """A completed generation from its row of the first aggregation (null for the row of the
    run's other events): first report, time, leader, protocol, each member's assignment and
    `facts_hash`, a hash of the generation's facts (leader and assignments; see `run_facts`)."""
    entry = F.struct(
        F.col("first_seq"),
        F.col("_generation").alias("generation_id"),
        F.col("ts_ms"),
        F.col("leader"),
        F.col("protocol_name"),
        F.col("assignments"),
        F.xxhash64(F.coalesce(F.col("leader"), F.lit("(none)")), F.col("assignments")).alias("facts_hash"),
    )
    return F.when(F.col("_generation").isNotNull(), entry)


def run_facts_column(generations: Column, fenced: Column, expired: Column, errors: Column) -> Column:
    """Every comparable fact of a run as `array<struct<aspect, subject, ordinal, value>>` (see
    `run_facts`), from its generations, fenced and expired members and `(member, error_code)`s."""
    error_members = F.sort_array(F.array_distinct(F.transform(errors, lambda e: e["member_key"])))

    def member_error(member: Column) -> Column:
        codes = F.transform(F.filter(errors, lambda e: e["member_key"] == member), lambda e: e["error_code"])
        return _fact("error", member, WHOLE_RUN, error_names(F.sort_array(F.array_distinct(codes))))

    return F.concat(
        F.array(_fact("rebalance_count", "", WHOLE_RUN, F.size(generations))),
        F.transform(
            generations, lambda g: _fact("leader", "", g["ordinal"], F.coalesce(g["leader"], F.lit("(none)")))
        ),
        F.flatten(
            F.transform(
                generations,
                lambda g: F.transform(
                    g["assignments"],
                    lambda a: _fact(
                        "assignment", a["member_key"], g["ordinal"], F.array_join(a["assignment"], ",")
                    ),
                ),
            )
        ),
        F.transform(fenced, lambda m: _fact("fenced", m, WHOLE_RUN, F.lit("fenced"))),
        F.transform(expired, lambda m: _fact("expired", m, WHOLE_RUN, F.lit("expired"))),
        F.transform(error_members, member_error),
    )


def _facts_of() -> Column:
    return run_facts_column(F.col("generations"), F.col("fenced"), F.col("expired"), F.col("member_errors"))


def per_run_order(extra_keys: tuple[str, ...] = ()) -> tuple[str, ...]:
    """The columns `per_run`'s first aggregation groups by, in order (its second groups by all but
    the last). Input sorted by them within partitions (ascending, nulls first) lets Spark run both
    aggregations as one streaming sort-based pass each, with no partial/final split and no hash
    map (`spark.sql.execution.replaceHashWithSortAgg`, set by validator.session)."""
    return (*RUN_KEY, *extra_keys, "_generation")


def per_run(events: DataFrame, extra_keys: tuple[str, ...] = ()) -> DataFrame:
    """One row per (session, scenario, run, group) with everything later stages read: the
    summary columns, `generations` (completed generations in completion order, numbered by
    `ordinal`, with each member's assignment and the churn), `member_errors`, `facts_hash` (equal
    runs have equal hashes of what `run_facts` compares) and the client columns of the matrix.

    Two aggregations, one over the other, both keyed by the session (so neither shuffles after the
    job's one shuffle by session) and with no join: (1) per run and completed generation (one more
    row per run for its other events) every summary input and the generation's reports; (2) per
    run, those rows merged and the generations sorted by completion. Only the run's few
    generations are left to (interpreted) higher-order functions (latest report per member,
    churn); the facts themselves are built only for the runs that are diffed (`run_facts`).
    `extra_keys` are grouped by as well (the job passes `bad_reason`, so bad rows are counted by
    the same pass: `event_rows`). `events` are raw events or already `run_inputs(events,
    extra_keys)` (what the job passes, computed before its shuffle).
    """
    if not set(RUN_INPUTS) <= set(events.columns):
        events = run_inputs(events, extra_keys)
    *keys, generation = per_run_order(extra_keys)
    # (1) per run and completed generation, plus one row per run for its other events
    per_generation = events.groupBy(*keys, generation).agg(
        F.count("*").alias("event_rows"),
        F.count(F.when(F.col("_rebalance_started"), True)).alias("rebalances_started"),
        F.collect_set("_member").alias("member_keys"),
        F.collect_set("_fenced").alias("fenced"),
        F.collect_set("_expired").alias("expired"),
        F.collect_set("_left").alias("left"),
        F.collect_set("_member_error").alias("member_errors"),
        F.max("ts_ms").alias("last_ts_ms"),
        F.max("_not_run").alias("not_run_detail"),
        F.collect_set("_join_api_version").alias("join_api_versions"),
        F.collect_set("_left_without_instance_id").alias("left_without_instance_id"),
        F.max("skip_assignment").alias("skip_assignment_seen"),
        F.collect_set("client_software").alias("client_software"),
        F.collect_list("_start").alias("starts"),
        F.min("_done_seq").alias("first_seq"),
        F.min("_done_ts_ms").alias("ts_ms"),
        F.min("_done_leader").alias("leader"),
        F.min("_done_protocol").alias("protocol_name"),
        F.sort_array(F.collect_list("_report")).alias("reports"),
    )
    # (2) per run: the generations' rows merged (same partitioning, no shuffle). The assignments
    # in a projection of their own: the entry reads them twice.
    with_assignments = per_generation.select("*", _latest_assignments().alias("assignments"))
    entries = with_assignments.select("*", _generation_entry().alias("entry"))
    aggregated = entries.groupBy(*keys).agg(
        F.sum("event_rows").alias("event_rows"),
        F.sum("rebalances_started").alias("rebalances_started"),
        F.size(F.array_distinct(F.flatten(F.collect_list("member_keys")))).alias("member_count"),
        _sorted_union("fenced").alias("fenced"),
        _sorted_union("expired").alias("expired"),
        _sorted_union("left").alias("left"),
        F.array_distinct(F.flatten(F.collect_list("member_errors"))).alias("member_errors"),
        F.max("last_ts_ms").alias("last_ts_ms"),
        F.max("not_run_detail").alias("not_run_detail"),
        _sorted_union("join_api_versions").alias("join_api_versions"),
        _sorted_union("left_without_instance_id").alias("left_without_instance_id"),
        F.coalesce(F.max("skip_assignment_seen"), F.lit(False)).alias("skip_assignment_seen"),
        F.array_distinct(F.flatten(F.collect_list("client_software"))).alias("client_software"),
        F.sort_array(F.flatten(F.collect_list("starts"))).alias("starts"),
        F.sort_array(F.collect_list("entry")).alias("sorted_generations"),
    )
    # Every fact of the run in one hash, without building the facts: the generations' hashes in
    # completion order (their number is the rebalance count), fenced, expired, (member, error).
    facts_hash = F.xxhash64(
        F.col("sorted_generations.facts_hash"),
        F.col("fenced"),
        F.col("expired"),
        F.sort_array(F.col("member_errors")),
    )
    with_hash = aggregated.select("*", facts_hash.alias("facts_hash"))
    # Projections of their own: the churn reads each generation's predecessor and the facts
    # read the generations several times; an inlined expression would be rebuilt for every use
    # (Spark keeps non-cheap expressions referenced more than once in their own projection).
    with_generations = with_hash.select(
        *[c for c in with_hash.columns if c not in ("starts", "sorted_generations")],
        generations_with_churn(F.col("sorted_generations"), F.col("starts")).alias("generations"),
    )
    generations_col = F.col("generations")
    errors = F.col("member_errors")
    return with_generations.select(
        *keys,
        "event_rows",
        F.size(generations_col).cast("int").alias("rebalance_count"),
        "rebalances_started",
        F.col("member_count").cast("long").alias("members"),
        "fenced",
        "expired",
        "left",
        F.sort_array(F.array_distinct(F.transform(errors, lambda e: e["error_code"]))).alias("error_codes"),
        "last_ts_ms",
        "not_run_detail",
        "join_api_versions",
        "left_without_instance_id",
        "skip_assignment_seen",
        "client_software",
        F.aggregate(generations_col, F.lit(0), lambda acc, g: acc + g["partitions_moved"]).alias(
            "partitions_moved"
        ),
        member_churn(generations_col).alias("member_churn"),
        "generations",
        "member_errors",
        "facts_hash",
    )


def observed_rebalances(runs: DataFrame) -> DataFrame:
    """One row per completed generation per run, numbered by completion order (`ordinal`)."""
    generation = F.explode("generations").alias("g")
    return runs.select(*RUN_KEY, generation).select(
        *RUN_KEY,
        *[
            F.col(f"g.{c}").alias(c)
            for c in (
                "ordinal",
                "generation_id",
                "ts_ms",
                "leader",
                "members",
                "protocol_name",
                "partitions_moved",
                "pause_ms",
            )
        ],
    )


def member_assignments(runs: DataFrame) -> DataFrame:
    """Each member's assignment (sorted) after each completed generation, keyed by ordinal."""
    generation = runs.select(*RUN_KEY, F.explode("generations").alias("g"))
    return generation.select(*RUN_KEY, "g.ordinal", F.explode("g.assignments").alias("a")).select(
        *RUN_KEY, "a.member_key", "ordinal", "a.assignment"
    )


def run_summary(runs: DataFrame) -> DataFrame:
    """Per run and group: rebalance count, members, who was fenced, expired or left, error codes,
    why it was not run, and the context `validator.explain` reads (RUN_SUMMARY_SCHEMA's columns)."""
    return runs.select(*RUN_SUMMARY_SCHEMA.fieldNames())


def run_facts(runs: DataFrame) -> DataFrame:
    """Everything that must not drift between runs, one comparable (aspect, subject, ordinal) each:
    the rebalance count, each generation's leader, each member's assignment per generation, who
    was fenced or expired, and each member's error names (FACTS_SCHEMA's columns)."""
    return runs.select(*RUN_KEY, F.explode(_facts_of()).alias("f")).select(*RUN_KEY, "f.*")
