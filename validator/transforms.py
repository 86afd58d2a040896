"""Pure `DataFrame -> DataFrame` transforms: events in, rebalances, facts, diffs and verdicts out.

No I/O and no session here; `validator.jobs` reads, calls these and writes. Each function is tested
on tiny frames in `tests/test_validator_transforms.py`.

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

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from replay.scenario import AS_RECORDED
from validator.explain import error_names
from validator.schemas import (
    CORRUPT_RECORD_COLUMN,
    EVENT_NAMES,
    GROUP_KEY,
    REQUIRED_EVENT_COLUMNS,
    RUN_KEY,
)

ASPECT_SEVERITY: dict[str, int] = {
    "assignment": 1,
    "leader": 2,
    "rebalance_count": 3,
    "error": 4,
    "expired": 5,
    "fenced": 5,
}
"""How bad a difference is; the worst one names a session's and a matrix cell's verdict."""

FAILED_SEVERITY = 9
"""Severity of a comparison whose expected run is missing or whose group never stabilized."""

NOT_RUN_SEVERITY = 8
"""Severity of a comparison with a side that could not be carried out."""

WHOLE_RUN = 0
"""`ordinal` of a fact about the whole run (rebalance count, fencing, expiry, errors)."""

REPEAT_SUFFIX = r"~(\d+)$"

RECORDED, REFERENCE = "recorded", "reference"
"""Run names (AGREED #4): the capture as it ran, and the reference coordinator's replay."""

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
    if expected_run != RECORDED:
        return F.lit(expected_run)
    return F.when(scenario == AS_RECORDED_SCENARIO, F.lit(RECORDED)).otherwise(F.lit(REFERENCE))


def is_observed(run: Column, scenario: Column, expected: Column) -> Column:
    """A first attempt other than the expected run; `recorded` only under `as-recorded`."""
    return (
        (run_attempt(run) == 1)
        & (run != expected)
        & ((scenario == AS_RECORDED_SCENARIO) | (base_run(run) != RECORDED))
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


# ---- per run ------------------------------------------------------------------------------------


def observed_rebalances(events: DataFrame) -> DataFrame:
    """One row per completed generation per run, numbered by completion order (`ordinal`).

    A generation counts once however many members reported it completed; its time, leader and
    size come from those reports.
    """
    done = events.where(F.col("event") == "generation_completed")
    per_generation = done.groupBy(*RUN_KEY, "generation_id").agg(
        F.min("seq").alias("first_seq"),
        F.min("ts_ms").alias("ts_ms"),
        F.min(F.when(F.col("is_leader"), F.col("member_key"))).alias("leader"),
        F.size(F.collect_set("member_key")).cast("long").alias("members"),
        F.min("protocol_name").alias("protocol_name"),
    )
    order = Window.partitionBy(*RUN_KEY).orderBy("first_seq", "generation_id")
    return per_generation.select(
        *RUN_KEY,
        F.row_number().over(order).cast("int").alias("ordinal"),
        "generation_id",
        "ts_ms",
        "leader",
        "members",
        "protocol_name",
    )


def member_assignments(events: DataFrame, rebalances: DataFrame) -> DataFrame:
    """Each member's assignment (sorted) after each completed generation, keyed by ordinal."""
    done = events.where(F.col("event") == "generation_completed").select(
        *RUN_KEY, "generation_id", "member_key", "seq", "assignment"
    )
    ordinals = rebalances.select(*RUN_KEY, "generation_id", "ordinal")
    latest = done.join(ordinals, [*RUN_KEY, "generation_id"]).groupBy(*RUN_KEY, "member_key", "ordinal")
    return latest.agg(F.max_by("assignment", "seq").alias("assignment")).select(
        *RUN_KEY,
        "member_key",
        "ordinal",
        F.array_sort(F.coalesce(F.col("assignment"), F.array().cast("array<string>"))).alias("assignment"),
    )


def _members_with(event_name: str) -> Column:
    return F.array_sort(F.collect_set(F.when(F.col("event") == event_name, F.col("member_key"))))


def run_summary(events: DataFrame, rebalances: DataFrame) -> DataFrame:
    """Per run and group: rebalance count, members, who was fenced, expired or left, error codes."""
    per_run = events.groupBy(*RUN_KEY).agg(
        F.count(F.when(F.col("event") == "rebalance_started", True)).alias("rebalances_started"),
        F.size(F.collect_set(F.when(F.col("event") != "not_run", F.col("member_key"))))
        .cast("long")
        .alias("members"),
        _members_with("member_fenced").alias("fenced"),
        _members_with("member_expired").alias("expired"),
        _members_with("member_left").alias("left"),
        F.array_sort(F.collect_set(F.when(F.col("error_code") != 0, F.col("error_code")))).alias(
            "error_codes"
        ),
        F.max("ts_ms").alias("last_ts_ms"),
        F.max(
            F.when(
                F.col("event") == "not_run",
                F.coalesce(_optional(events, "detail"), F.lit("no reason given")),
            )
        ).alias("not_run_detail"),
        F.array_sort(F.collect_set(F.when(F.col("event") != "not_run", F.col("join_api_version")))).alias(
            "join_api_versions"
        ),
        F.array_sort(
            F.collect_set(
                F.when(
                    (F.col("event") == "member_left") & F.col("group_instance_id").isNull(),
                    F.col("member_key"),
                )
            )
        ).alias("left_without_instance_id"),
        F.coalesce(F.max(F.col("skip_assignment")), F.lit(False)).alias("skip_assignment_seen"),
    )
    counts = rebalances.groupBy(*RUN_KEY).agg(F.count("*").cast("int").alias("rebalance_count"))
    return per_run.join(counts, list(RUN_KEY), "left").select(
        *RUN_KEY,
        F.coalesce(F.col("rebalance_count"), F.lit(0)).alias("rebalance_count"),
        "rebalances_started",
        "members",
        "fenced",
        "expired",
        "left",
        "error_codes",
        "last_ts_ms",
        "not_run_detail",
        "join_api_versions",
        "left_without_instance_id",
        "skip_assignment_seen",
    )


def _fact(frame: DataFrame, aspect: str, subject: Column, ordinal: Column, value: Column) -> DataFrame:
    return frame.select(
        *RUN_KEY,
        F.lit(aspect).alias("aspect"),
        subject.alias("subject"),
        ordinal.cast("int").alias("ordinal"),
        value.cast("string").alias("value"),
    )


def run_facts(
    events: DataFrame, summary: DataFrame, rebalances: DataFrame, assignments: DataFrame
) -> DataFrame:
    """Everything that must not drift between runs, one comparable (aspect, subject, ordinal) each."""
    whole_run = F.lit(WHOLE_RUN)
    no_subject = F.lit("")
    counts = summary.select(*RUN_KEY, F.col("rebalance_count").alias("n"))
    marks = events.where(F.col("event").isin("member_fenced", "member_expired")).select(
        *RUN_KEY, "member_key", F.regexp_replace("event", "^member_", "").alias("aspect")
    )
    errors = (
        events.where(F.col("error_code") != 0)
        .groupBy(*RUN_KEY, "member_key")
        .agg(F.array_sort(F.collect_set("error_code")).alias("codes"))
    )
    return (
        _fact(counts, "rebalance_count", no_subject, whole_run, F.col("n"))
        .unionByName(
            _fact(
                rebalances,
                "leader",
                no_subject,
                F.col("ordinal"),
                F.coalesce(F.col("leader"), F.lit("(none)")),
            )
        )
        .unionByName(
            _fact(
                assignments,
                "assignment",
                F.col("member_key"),
                F.col("ordinal"),
                F.array_join("assignment", ","),
            )
        )
        .unionByName(
            marks.distinct().select(
                *RUN_KEY,
                "aspect",
                F.col("member_key").alias("subject"),
                whole_run.cast("int").alias("ordinal"),
                F.col("aspect").alias("value"),
            )
        )
        .unionByName(
            _fact(
                errors,
                "error",
                F.col("member_key"),
                whole_run,
                error_names(F.col("codes")),
            )
        )
    )


# ---- pairing and diffing ------------------------------------------------------------------------


def comparison_pairs(runs: DataFrame, expected_run: str) -> DataFrame:
    """Which runs to compare, per (session, scenario, group).

    `compare`: the scenario's expected run (`expected_run_for`) against every observed run of the
    same scenario (`is_observed`: `recorded` only under `as-recorded`). `noise`: a run against each
    of its repeats (`reference` vs `reference~2`), only where both exist. A missing expected run
    still yields its `compare` pairs, so the verdict can say so.
    """
    named = runs.select(*GROUP_KEY, "run").distinct()
    named = named.select(
        *GROUP_KEY,
        "run",
        base_run(F.col("run")).alias("base"),
        run_attempt(F.col("run")).alias("attempt"),
        expected_run_for(F.col("scenario"), expected_run).alias("expected_run"),
    )
    firsts = named.where(F.col("attempt") == 1)
    compare = firsts.where(is_observed(F.col("run"), F.col("scenario"), F.col("expected_run"))).select(
        *GROUP_KEY,
        "expected_run",
        F.col("run").alias("observed_run"),
        F.lit("compare").alias("role"),
    )
    repeats = named.where(F.col("attempt") > 1).alias("r")
    noise = repeats.join(
        firsts.select(*GROUP_KEY, F.col("run").alias("first_run")),
        [*GROUP_KEY],
    ).where(F.col("first_run") == F.col("base"))
    noise = noise.select(
        *GROUP_KEY,
        F.col("first_run").alias("expected_run"),
        F.col("run").alias("observed_run"),
        F.lit("noise").alias("role"),
    )
    return compare.unionByName(noise)


FACT_KEY: tuple[str, ...] = ("aspect", "subject", "ordinal")


def diff_runs(facts: DataFrame, summary: DataFrame, expected_run: str) -> DataFrame:
    """Facts that differ between the expected run and each observed run, labelled noise or not.

    One grouped pass, no pairwise joins: per (session, scenario, group, fact) the values of all
    runs go into a map; each observed run (`is_observed`) is compared with the scenario's expected
    run (`expected_run_for`), and the fact is *unstable* (its differences are noise) when any run
    disagrees with one of its own repeats. `change` is `changed`, `missing` (expected has it,
    observed not) or `unexpected` (the reverse). Runs that were not carried out (`not_run`) have
    no facts and are left out here: their verdict says "not run" instead of listing everything as
    missing.
    """
    ran = F.col("not_run_detail").isNull()
    runs = summary.groupBy(*GROUP_KEY).agg(
        F.collect_set(F.when(ran, F.col("run"))).alias("runs"),
        F.collect_set(F.when(~ran, F.col("run"))).alias("not_run"),
    )
    values = facts.groupBy(*GROUP_KEY, *FACT_KEY).agg(
        F.map_from_entries(F.collect_list(F.struct("run", "value"))).alias("values")
    )
    by_fact = values.join(runs, list(GROUP_KEY)).withColumn(
        "expected_run", expected_run_for(F.col("scenario"), expected_run)
    )

    def value_of(run: Column) -> Column:
        return F.try_element_at(F.col("values"), run)

    unstable = F.exists(
        "runs",
        lambda r: (
            (run_attempt(r) > 1)
            & F.array_contains(F.col("runs"), base_run(r))
            & ~value_of(r).eqNullSafe(value_of(base_run(r)))
        ),
    )
    expected = F.col("expected_run")
    observed_runs = F.when(
        ~F.array_contains(F.col("not_run"), expected),
        F.filter("runs", lambda r: is_observed(r, F.col("scenario"), expected)),
    ).otherwise(F.array().cast("array<string>"))
    exploded = by_fact.select(
        *GROUP_KEY,
        *FACT_KEY,
        "values",
        "expected_run",
        unstable.alias("is_noise"),
        F.explode(observed_runs).alias("observed_run"),
    )
    expected_value = value_of(expected)
    observed_value = value_of(F.col("observed_run"))
    change = (
        F.when(expected_value.isNull(), F.lit("unexpected"))
        .when(observed_value.isNull(), F.lit("missing"))
        .otherwise(F.lit("changed"))
    )
    severity = F.create_map(
        *[x for aspect, sev in ASPECT_SEVERITY.items() for x in (F.lit(aspect), F.lit(sev))]
    )
    return exploded.where(~expected_value.eqNullSafe(observed_value)).select(
        *GROUP_KEY,
        "expected_run",
        "observed_run",
        *FACT_KEY,
        expected_value.alias("expected_value"),
        observed_value.alias("observed_value"),
        change.alias("change"),
        severity[F.col("aspect")].cast("int").alias("severity"),
        "is_noise",
    )


def session_verdicts(pairs: DataFrame, summary: DataFrame, diffs: DataFrame) -> DataFrame:
    """Per compared pair: pass / differs / failed / not run, with what differed and why.

    `not run`: either side could not be carried out (event `not_run`; `detail` says why): never a
    pass. `failed`: the expected run is missing, or the observed group never completed a generation
    while the expected one did. `differs`: at least one difference that is not noise.
    `explanation` is the cause of the worst difference (`validator.explain`), or why the comparison
    could not be made.
    """
    compare = pairs.where(F.col("role") == "compare").drop("role")
    counts = summary.select(*GROUP_KEY, "run", "rebalance_count", "not_run_detail")
    expected_counts = counts.select(
        *GROUP_KEY,
        F.col("run").alias("expected_run"),
        F.col("rebalance_count").alias("expected_rebalances"),
        F.col("not_run_detail").alias("expected_not_run"),
    )
    observed_counts = counts.select(
        *GROUP_KEY,
        F.col("run").alias("observed_run"),
        F.col("rebalance_count").alias("observed_rebalances"),
        F.col("not_run_detail").alias("observed_not_run"),
    )
    real = ~F.col("is_noise")

    def real_members(aspect: str, *, observed_only: bool = False) -> Column:
        cond = real & (F.col("aspect") == aspect)
        if observed_only:
            cond = cond & F.col("observed_value").isNotNull()
        return F.array_sort(F.collect_set(F.when(cond, F.col("subject"))))

    divergent = F.when(real & F.col("aspect").isin("leader", "assignment"), F.col("ordinal")).when(
        real & (F.col("aspect") == "rebalance_count"),
        F.least(F.col("expected_value").cast("int"), F.col("observed_value").cast("int")) + 1,
    )
    error_change = F.concat(
        F.col("subject"),
        F.lit(": "),
        F.coalesce(F.col("expected_value"), F.lit("-")),
        F.lit(" -> "),
        F.coalesce(F.col("observed_value"), F.lit("-")),
    )
    cause = F.col("cause") if "cause" in diffs.columns else F.lit(None).cast("string")
    per_pair = diffs.groupBy(*GROUP_KEY, "expected_run", "observed_run").agg(
        F.count(F.when(real, True)).alias("diffs"),
        F.count(F.when(F.col("is_noise"), True)).alias("noise_diffs"),
        F.min(divergent).cast("int").alias("first_divergent_ordinal"),
        real_members("assignment").alias("members_changed"),
        real_members("fenced", observed_only=True).alias("unexpected_fenced"),
        real_members("expired", observed_only=True).alias("unexpected_expired"),
        F.array_sort(F.collect_set(F.when(real & (F.col("aspect") == "error"), error_change))).alias(
            "error_changes"
        ),
        F.max(F.when(real, F.struct("severity", "aspect", cause.alias("cause")))).alias("worst"),
    )
    keys = [*GROUP_KEY, "expected_run", "observed_run"]
    joined = (
        compare.join(expected_counts, [*GROUP_KEY, "expected_run"], "left")
        .join(observed_counts, [*GROUP_KEY, "observed_run"], "left")
        .join(per_pair, keys, "left")
    )
    empty = F.array().cast("array<string>")
    diffs_n = F.coalesce(F.col("diffs"), F.lit(0))
    not_run_detail = F.concat_ws(
        "; ",
        F.when(
            F.col("expected_not_run").isNotNull(),
            F.concat(F.col("expected_run"), F.lit(" not run: "), F.col("expected_not_run")),
        ),
        F.when(
            F.col("observed_not_run").isNotNull(),
            F.concat(F.col("observed_run"), F.lit(" not run: "), F.col("observed_not_run")),
        ),
    )
    not_run = F.col("expected_not_run").isNotNull() | F.col("observed_not_run").isNotNull()
    status = (
        F.when(not_run, F.lit(NOT_RUN))
        .when(F.col("expected_rebalances").isNull(), F.lit("failed"))
        .when((F.col("observed_rebalances") == 0) & (F.col("expected_rebalances") > 0), F.lit("failed"))
        .when(diffs_n > 0, F.lit("differs"))
        .otherwise(F.lit("pass"))
    )
    missing = F.concat(F.lit("no "), F.col("expected_run"), F.lit(" run in this session and scenario"))
    never = F.concat(
        F.col("observed_run"),
        F.lit(" never completed a generation; "),
        F.col("expected_run"),
        F.lit(" completed "),
        F.col("expected_rebalances").cast("string"),
    )
    return joined.select(
        *keys,
        status.alias("status"),
        diffs_n.cast("long").alias("diffs"),
        F.coalesce(F.col("noise_diffs"), F.lit(0)).cast("long").alias("noise_diffs"),
        "expected_rebalances",
        "observed_rebalances",
        (F.col("observed_rebalances") - F.col("expected_rebalances")).alias("rebalance_count_delta"),
        "first_divergent_ordinal",
        F.coalesce("members_changed", empty).alias("members_changed"),
        F.coalesce("unexpected_fenced", empty).alias("unexpected_fenced"),
        F.coalesce("unexpected_expired", empty).alias("unexpected_expired"),
        F.coalesce("error_changes", empty).alias("error_changes"),
        F.when(status == NOT_RUN, F.lit(NOT_RUN_SEVERITY))
        .when(status == "failed", F.lit(FAILED_SEVERITY))
        .otherwise(F.col("worst.severity"))
        .cast("int")
        .alias("worst_severity"),
        F.when(status == NOT_RUN, F.lit(NOT_RUN))
        .when(F.col("expected_rebalances").isNull(), F.lit("expected run missing"))
        .when(status == "failed", F.lit("never stabilized"))
        .otherwise(F.col("worst.aspect"))
        .alias("worst_aspect"),
        F.when(status == NOT_RUN, not_run_detail).alias("not_run_detail"),
        F.when(status == NOT_RUN, not_run_detail)
        .when(F.col("expected_rebalances").isNull(), missing)
        .when(status == "failed", never)
        .otherwise(F.col("worst.cause"))
        .alias("explanation"),
    )


# ---- aggregation ---------------------------------------------------------------------------------


def session_clients(events: DataFrame) -> DataFrame:
    """The client dimension of each session.

    The members' `client_software` (ApiVersions v3+ name/version, an optional column) joined with
    `+` when any is known; otherwise the JoinGroup versions the members used (`JoinGroup v5+v9`),
    since that is what tells client generations apart on the wire.
    """
    per_session = events.groupBy("session_id").agg(
        F.array_sort(F.collect_set("client_software")).alias("software"),
        F.array_sort(F.collect_set("join_api_version")).alias("join_versions"),
    )
    versions = F.array_join(F.transform("join_versions", lambda v: v.cast("string")), "+v")
    client = F.when(F.size("software") > 0, F.array_join("software", "+")).otherwise(
        F.concat(F.lit("JoinGroup v"), versions)
    )
    return per_session.select("session_id", client.alias("client"))


def broker_version(observed_run: Column) -> Column:
    """`broker-3.9.1` -> `3.9.1`; any other run (e.g. `reference`) stands for itself."""
    version = F.regexp_extract(observed_run, r"^broker-(.+)$", 1)
    return F.when(version == "", observed_run).otherwise(version)


def compatibility_matrix(verdicts: DataFrame, clients: DataFrame) -> DataFrame:
    """scenario x client x observed run (broker version): pass / differs / failed / not run counts
    and the worst difference, with the session that shows it. `expected_run` is what the scenario's
    runs were compared with."""
    rows = verdicts.join(clients, "session_id", "left").fillna({"client": "unknown"})
    rank = F.struct(
        F.coalesce("worst_severity", F.lit(0)),
        F.col("diffs"),
        F.col("session_id"),
    )
    per_cell = rows.groupBy("scenario", "client", "observed_run").agg(
        F.min("expected_run").alias("expected_run"),
        F.count("*").alias("sessions"),
        F.count(F.when(F.col("status") == "pass", True)).alias("passed"),
        F.count(F.when(F.col("status") == "differs", True)).alias("differs"),
        F.count(F.when(F.col("status") == "failed", True)).alias("failed"),
        F.count(F.when(F.col("status") == NOT_RUN, True)).alias("not_run"),
        F.sum("diffs").alias("diffs"),
        F.sum("noise_diffs").alias("noise_diffs"),
        F.max("worst_severity").alias("worst_severity"),
        F.max(
            F.when(
                F.col("status") != "pass",
                F.struct(rank.alias("rank"), "worst_aspect", "session_id", "group_id"),
            )
        ).alias("worst"),
    )
    return per_cell.select(
        "scenario",
        "client",
        "expected_run",
        "observed_run",
        broker_version(F.col("observed_run")).alias("broker_version"),
        "sessions",
        "passed",
        "differs",
        "failed",
        "not_run",
        F.col("diffs").cast("long").alias("diffs"),
        F.col("noise_diffs").cast("long").alias("noise_diffs"),
        F.col("worst_severity").cast("int").alias("worst_severity"),
        F.col("worst.worst_aspect").alias("worst_aspect"),
        F.col("worst.session_id").alias("worst_session"),
        F.col("worst.group_id").alias("worst_group"),
    )
