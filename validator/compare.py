"""The per-group stage: which runs are compared with which, the diff, verdicts and the matrix.

Pure `DataFrame -> DataFrame` transforms over the per-run table of `validator.transforms.per_run`
(one row per run). Pairing and counting happen in one aggregation per (session, scenario, group)
(`comparisons`); only groups where an observed run's facts differ from the expected run's
(`facts_hash`) are diffed fact by fact (`diff_runs`), in one more aggregation.

Comparisons (AGREED #5): under a scenario the expected run is the reference replaying that same
scenario (`expected_run_for`); `recorded` is compared only under `as-recorded`. A run named `X~N`
(N >= 2) is a repeat: a fact on which a run and its repeat disagree is unstable, and differences
on it are noise (Diffy's idea).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from validator.explain import cause_and_next_step
from validator.migration import CLASSIC
from validator.schemas import GROUP_KEY
from validator.transforms import (
    ASPECT_SEVERITY,
    FAILED_SEVERITY,
    NOT_RUN,
    NOT_RUN_SEVERITY,
    base_run,
    empty_strings,
    expected_run_for,
    is_observed,
    run_attempt,
)

FACT_KEY: tuple[str, ...] = ("aspect", "subject", "ordinal")
PAIR_KEY: tuple[str, ...] = (*GROUP_KEY, "expected_run", "observed_run")


def comparisons(runs: DataFrame, expected_run: str) -> DataFrame:
    """One row per compared pair (expected run, observed run) of a (session, scenario, group),
    with both runs' rebalance counts and not-run reasons and whether their facts are the same.

    A missing expected run still yields the pairs (their verdict says so); repeats are never an
    observed run. One aggregation per group, no joins.
    """
    entry = F.struct("run", "not_run_detail", "rebalance_count", "partitions_moved", "facts_hash")
    groups = runs.groupBy(*GROUP_KEY).agg(F.collect_list(entry).alias("runs"))
    groups = groups.withColumn("expected_run", expected_run_for(F.col("scenario"), expected_run))
    expected = F.try_element_at(F.filter("runs", lambda r: r["run"] == F.col("expected_run")), F.lit(1))
    observed = F.filter("runs", lambda r: is_observed(r["run"], F.col("scenario"), F.col("expected_run")))
    pair = groups.select(*GROUP_KEY, "expected_run", expected.alias("e"), F.explode(observed).alias("o"))
    return pair.select(
        *GROUP_KEY,
        "expected_run",
        F.col("o.run").alias("observed_run"),
        F.col("e.rebalance_count").alias("expected_rebalances"),
        F.col("o.rebalance_count").alias("observed_rebalances"),
        F.col("e.not_run_detail").alias("expected_not_run"),
        F.col("o.not_run_detail").alias("observed_not_run"),
        F.col("e.partitions_moved").alias("expected_partitions_moved"),
        F.col("o.partitions_moved").alias("observed_partitions_moved"),
        F.col("e.run").isNotNull().alias("expected_present"),
        F.col("e.facts_hash").eqNullSafe(F.col("o.facts_hash")).alias("same_facts"),
    )


def groups_to_diff(pairs: DataFrame) -> DataFrame:
    """(session, scenario, group) keys where some carried-out observed run's facts differ from
    the expected run's (or the expected run is missing): only these are diffed fact by fact."""
    ran = F.col("expected_not_run").isNull() & F.col("observed_not_run").isNull()
    return pairs.where(ran & ~F.col("same_facts")).select(*GROUP_KEY).distinct()


def diff_runs(facts: DataFrame, summary: DataFrame, expected_run: str) -> DataFrame:
    """Facts that differ between the expected run and each observed run, labelled noise or not,
    each with a `cause` and a `next_step` (`validator.explain`).

    One grouped pass, no pairwise joins: per (session, scenario, group, fact) the values of all
    runs go into a map; each observed run (`is_observed`) is compared with the scenario's expected
    run, and the fact is *unstable* (its differences are noise) when any run disagrees with one of
    its own repeats. `change` is `changed`, `missing` (expected has it, observed not) or
    `unexpected` (the reverse). Runs that were not carried out have no facts and are left out:
    their verdict says "not run" instead of listing everything as missing.
    """
    ran = F.col("not_run_detail").isNull()
    context = F.struct("left_without_instance_id", "join_api_versions", "skip_assignment_seen")
    runs = summary.groupBy(*GROUP_KEY).agg(
        F.collect_set(F.when(ran, F.col("run"))).alias("runs"),
        F.collect_set(F.when(~ran, F.col("run"))).alias("not_run"),
        F.map_from_entries(F.collect_list(F.struct("run", context))).alias("context"),
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
    ).otherwise(empty_strings())
    exploded = by_fact.select(
        *GROUP_KEY,
        *FACT_KEY,
        "values",
        "context",
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
    differing = exploded.where(~expected_value.eqNullSafe(observed_value)).select(
        *GROUP_KEY,
        "expected_run",
        "observed_run",
        *FACT_KEY,
        expected_value.alias("expected_value"),
        observed_value.alias("observed_value"),
        change.alias("change"),
        severity[F.col("aspect")].cast("int").alias("severity"),
        "is_noise",
        F.try_element_at(F.col("context"), expected).alias("e"),
        F.try_element_at(F.col("context"), F.col("observed_run")).alias("o"),
    )
    cause, next_step = cause_and_next_step(
        noise=F.col("is_noise"),
        aspect=F.col("aspect"),
        change=F.col("change"),
        subject=F.col("subject"),
        ordinal=F.col("ordinal"),
        expected_value=F.col("expected_value"),
        observed_value=F.col("observed_value"),
        observed_left_dynamic=F.col("o.left_without_instance_id"),
        observed_join_versions=F.col("o.join_api_versions"),
        expected_skip=F.col("e.skip_assignment_seen"),
        observed_skip=F.col("o.skip_assignment_seen"),
    )
    return differing.select(
        *[c for c in differing.columns if c not in ("e", "o")],
        cause.alias("cause"),
        next_step.alias("next_step"),
    )


def session_verdicts(pairs: DataFrame, diffs: DataFrame) -> DataFrame:
    """Per compared pair: pass / differs / failed / not run, with what differed and why.

    `not run`: either side could not be carried out (event `not_run`; `detail` says why): never a
    pass. `failed`: the expected run is missing, or the observed group never completed a generation
    while the expected one did. `differs`: at least one difference that is not noise.
    `explanation` is the cause of the worst difference (`validator.explain`), or why the comparison
    could not be made.
    """
    real = ~F.col("is_noise")

    def real_members(aspect: str, *, observed_only: bool = False) -> Column:
        cond = real & (F.col("aspect") == aspect)
        if observed_only:
            cond = cond & F.col("observed_value").isNotNull()
        return F.sort_array(F.collect_set(F.when(cond, F.col("subject"))))

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
    per_pair = diffs.groupBy(*PAIR_KEY).agg(
        F.count(F.when(real, True)).alias("diffs"),
        F.count(F.when(F.col("is_noise"), True)).alias("noise_diffs"),
        F.min(divergent).cast("int").alias("first_divergent_ordinal"),
        real_members("assignment").alias("members_changed"),
        real_members("fenced", observed_only=True).alias("unexpected_fenced"),
        real_members("expired", observed_only=True).alias("unexpected_expired"),
        F.sort_array(F.collect_set(F.when(real & (F.col("aspect") == "error"), error_change))).alias(
            "error_changes"
        ),
        F.max(F.when(real, F.struct("severity", "aspect", "cause"))).alias("worst"),
    )
    joined = pairs.join(per_pair, list(PAIR_KEY), "left")
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
    missing_expected = ~F.col("expected_present")
    status = (
        F.when(not_run, F.lit(NOT_RUN))
        .when(missing_expected, F.lit("failed"))
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
        *PAIR_KEY,
        status.alias("status"),
        diffs_n.cast("long").alias("diffs"),
        F.coalesce(F.col("noise_diffs"), F.lit(0)).cast("long").alias("noise_diffs"),
        "expected_rebalances",
        "observed_rebalances",
        (F.col("observed_rebalances") - F.col("expected_rebalances")).alias("rebalance_count_delta"),
        "first_divergent_ordinal",
        F.coalesce("members_changed", empty_strings()).alias("members_changed"),
        F.coalesce("unexpected_fenced", empty_strings()).alias("unexpected_fenced"),
        F.coalesce("unexpected_expired", empty_strings()).alias("unexpected_expired"),
        F.coalesce("error_changes", empty_strings()).alias("error_changes"),
        F.when(status == NOT_RUN, F.lit(NOT_RUN_SEVERITY))
        .when(status == "failed", F.lit(FAILED_SEVERITY))
        .otherwise(F.col("worst.severity"))
        .cast("int")
        .alias("worst_severity"),
        F.when(status == NOT_RUN, F.lit(NOT_RUN))
        .when(missing_expected, F.lit("expected run missing"))
        .when(status == "failed", F.lit("never stabilized"))
        .otherwise(F.col("worst.aspect"))
        .alias("worst_aspect"),
        F.when(status == NOT_RUN, not_run_detail).alias("not_run_detail"),
        F.when(status == NOT_RUN, not_run_detail)
        .when(missing_expected, missing)
        .when(status == "failed", never)
        .otherwise(F.col("worst.cause"))
        .alias("explanation"),
        "expected_partitions_moved",
        "observed_partitions_moved",
    )


# ---- aggregation ---------------------------------------------------------------------------------


def session_clients(runs: DataFrame) -> DataFrame:
    """The client dimension of each session.

    The members' `client_software` (ApiVersions v3+ name/version, an optional column) joined with
    `+` when any is known; otherwise the JoinGroup versions the members used (`JoinGroup v5+v9`),
    since that is what tells client generations apart on the wire.
    """
    per_session = runs.groupBy("session_id").agg(
        F.sort_array(F.array_distinct(F.flatten(F.collect_list("client_software")))).alias("software"),
        F.sort_array(F.array_distinct(F.flatten(F.collect_list("join_api_versions")))).alias("join_versions"),
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


def compatibility_matrix(
    verdicts: DataFrame, clients: DataFrame, protocols: DataFrame | None = None
) -> DataFrame:
    """scenario x client x protocol x observed run (broker version): pass / differs / failed / not
    run counts and the worst difference, with the session that shows it. `expected_run` is what the
    scenario's runs were compared with. `protocols`: (session, scenario, group) -> the protocol
    path its members took (validator.migration.group_protocols); groups it lacks are `classic`."""
    rows = verdicts.join(clients, "session_id", "left").fillna({"client": "unknown"})
    if protocols is None:
        rows = rows.withColumn("protocol", F.lit(CLASSIC))
    else:
        rows = rows.join(protocols, list(GROUP_KEY), "left").fillna({"protocol": CLASSIC})
    rank = F.struct(
        F.coalesce("worst_severity", F.lit(0)),
        F.col("diffs"),
        F.col("session_id"),
    )
    per_cell = rows.groupBy("scenario", "client", "protocol", "observed_run").agg(
        F.min("expected_run").alias("expected_run"),
        F.count("*").alias("sessions"),
        F.count(F.when(F.col("status") == "pass", True)).alias("passed"),
        F.count(F.when(F.col("status") == "differs", True)).alias("differs"),
        F.count(F.when(F.col("status") == "failed", True)).alias("failed"),
        F.count(F.when(F.col("status") == NOT_RUN, True)).alias("not_run"),
        F.sum("diffs").alias("diffs"),
        F.sum("noise_diffs").alias("noise_diffs"),
        F.sum("expected_partitions_moved").alias("expected_partitions_moved"),
        F.sum("observed_partitions_moved").alias("partitions_moved"),
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
        F.col("expected_partitions_moved").cast("long").alias("expected_partitions_moved"),
        F.col("partitions_moved").cast("long").alias("partitions_moved"),
        "protocol",
    )
