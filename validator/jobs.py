"""The validate job: read event files -> transforms -> Parquet tables and report data.

I/O lives here and in `validator.report`; every computation is a transform from
`validator.transforms`. `run_validate` is what both `group-replay validate` and `spark_main.py`
(under `spark-submit`) run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from replay.events import REFERENCE_RUN
from validator import compare as C
from validator import migration_job as MJ
from validator import transforms as T
from validator.checkpoint import leaf
from validator.schemas import (
    CORRUPT_RECORD_COLUMN,
    EVENT_SCHEMA,
    GROUP_KEY,
    JSON_READ_SCHEMA,
    READ_SCHEMA,
)

USED_COLUMNS: tuple[str, ...] = tuple(c for c in EVENT_SCHEMA.fieldNames() if c != "member_id")
"""Every column but `member_id` (never compared: brokers assign their own)."""
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
PARQUET_SUFFIXES = (".parquet",)
WORST_SESSIONS_IN_REPORT = 30
DIFF_ROWS_PER_SESSION_IN_REPORT = 60
BAD_ROW_SAMPLES = 20


SectionKey = tuple[str, str, str]
"""(session_id, scenario, group_id): one report section each."""


class InputError(Exception):
    """Bad command-line input or unreadable event files: exit code 2."""


@dataclass(frozen=True, slots=True)
class InputFiles:
    json_files: tuple[str, ...]
    parquet_files: tuple[str, ...]
    total_bytes: int


@dataclass(frozen=True, slots=True)
class ValidateOptions:
    inputs: tuple[Path, ...]
    expected_run: str = REFERENCE_RUN
    out_dir: Path | None = None
    max_bad_rows: int = 0
    collect_all: bool = False  # every comparison with its differences (--junit-xml, --summary-json)


@dataclass(slots=True)
class ReportData:
    """Everything the terminal summary and the HTML report show; plain Python, small."""

    expected_run: str
    inputs: list[str]
    rows_total: int = 0
    rows_bad: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    bad_samples: list[dict[str, Any]] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    status_counts: dict[str, int] = field(default_factory=dict)
    diffs_total: int = 0
    noise_total: int = 0
    matrix: list[dict[str, Any]] = field(default_factory=list)
    worst: list[dict[str, Any]] = field(default_factory=list)
    session_verdicts: dict[SectionKey, list[dict[str, Any]]] = field(default_factory=dict)
    session_diffs: dict[SectionKey, list[dict[str, Any]]] = field(default_factory=dict)
    timelines: dict[SectionKey, list[dict[str, Any]]] = field(default_factory=dict)
    run_summaries: dict[SectionKey, list[dict[str, Any]]] = field(default_factory=dict)
    tables_written: list[str] = field(default_factory=list)
    all_comparisons: list[dict[str, Any]] | None = None  # when ValidateOptions.collect_all
    # the protocol migration view (validator.migration): groups that saw the consumer protocol,
    # and for the shown ones their steps and timeline segments per run
    migration_groups: int = 0
    migration_steps: dict[SectionKey, list[dict[str, Any]]] = field(default_factory=dict)
    migration_timelines: dict[SectionKey, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def comparisons(self) -> int:
        return sum(self.status_counts.values())

    @property
    def failing(self) -> int:
        """Comparisons that are not a pass: differs, failed or not run."""
        return sum(count for status, count in self.status_counts.items() if status != "pass")


def section_key(row: dict[str, Any]) -> SectionKey:
    return (row["session_id"], row["scenario"], row["group_id"])


def session_anchor(session_id: str, scenario: str, group_id: str, observed_run: str | None = None) -> str:
    """HTML id of a (session, scenario, group) section (and of one comparison within it)."""
    raw = f"{session_id}--{scenario}--{group_id}" + (f"--{observed_run}" if observed_run else "")
    return "s-" + "".join(c if c.isalnum() or c in "-_." else "_" for c in raw)


def discover_inputs(paths: Sequence[Path]) -> InputFiles:
    """Event files under the given files/directories (recursively); hidden and `_` files skipped."""
    json_files: list[str] = []
    parquet_files: list[str] = []
    total = 0
    for path in paths:
        if not path.exists():
            raise InputError(f"{path}: no such file or directory")
        candidates = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for candidate in candidates:
            relative = candidate.relative_to(path) if candidate != path else Path(candidate.name)
            if any(part.startswith((".", "_")) for part in relative.parts):
                continue
            suffix = candidate.suffix.lower()
            if suffix in JSON_SUFFIXES:
                json_files.append(str(candidate.resolve()))
            elif suffix in PARQUET_SUFFIXES:
                parquet_files.append(str(candidate.resolve()))
            elif candidate == path:
                raise InputError(
                    f"{path}: not an event file (expected {', '.join(JSON_SUFFIXES + PARQUET_SUFFIXES)})"
                )
            else:
                continue
            total += candidate.stat().st_size
    if not json_files and not parquet_files:
        where = ", ".join(str(p) for p in paths)
        raise InputError(f"no event files (*.jsonl, *.json, *.parquet) under {where}")
    return InputFiles(tuple(json_files), tuple(parquet_files), total)


def read_events(spark: SparkSession, files: InputFiles, *, source_file: bool = True) -> DataFrame:
    """All rows with the explicit schema, a `_corrupt_record` column and their `source_file`
    (only with `source_file`: the file metadata column makes the Parquet reader track every row's
    file and index, which the aggregation path has no use for)."""
    frames: list[DataFrame] = []
    if files.json_files:
        json_frame = (
            spark.read.schema(JSON_READ_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_RECORD_COLUMN)
            .json(list(files.json_files))
        )
        frames.append(
            json_frame.withColumn("source_file", F.col("_metadata.file_path")) if source_file else json_frame
        )
    if files.parquet_files:
        # Parquet files carry their own schema; writers differ in integer widths (pyarrow writes
        # Python ints as int64), so read each file's declared schema and cast to the contract.
        # A column that cannot be cast becomes null and its rows are counted as bad, never guessed.
        stored = spark.read.option("mergeSchema", "true").parquet(*files.parquet_files)
        present = set(stored.columns)
        parquet_frame = stored.select(
            *[
                (F.col(f.name) if f.name in present else F.lit(None)).cast(f.dataType).alias(f.name)
                for f in READ_SCHEMA.fields
            ]
        )
        parquet_frame = parquet_frame.withColumn(CORRUPT_RECORD_COLUMN, F.lit(None).cast("string"))
        frames.append(
            parquet_frame.withColumn("source_file", F.col("_metadata.file_path"))
            if source_file
            else parquet_frame
        )
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def shuffle_partitions_for(total_bytes: int, cores: int) -> int:
    """Few partitions for small inputs (tests, fixtures), about one per 16 MB of (compressed) input
    for big ones: the cached per-run table holds nested arrays per run, and a partition of it must
    fit a task's share of the heap while its column batches are built (64 MB per partition ran out
    of a 2 GB heap at 10M rows)."""
    return max(2, min(400, max(cores, total_bytes // (16 << 20))))


@dataclass(frozen=True, slots=True)
class Tables:
    bad_rows: DataFrame
    runs: DataFrame
    rebalances: DataFrame
    summary: DataFrame
    diffs: DataFrame
    verdicts: DataFrame
    matrix: DataFrame


StageFn = Callable[[str], AbstractContextManager[None]]


@contextmanager
def _no_stage(_: str) -> Iterator[None]:
    yield


def _rows(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in frame.collect()]


def run_validate(spark: SparkSession, options: ValidateOptions, stage: StageFn = _no_stage) -> ReportData:
    """Run the whole job; raises InputError for unusable input. Writes Parquet when `out_dir`.

    Spark work: one scan and one shuffle (by session) into ONE aggregation per run
    (`transforms.per_run`, kept), whose first action also counts the rows per bad reason; one
    aggregation per group pairs the runs (`compare.comparisons`), one more diffs the facts of the
    groups whose runs differ; the Parquet writes; one final small action gathers the report data.
    Every aggregation and join is keyed by (session_id, ...), so with
    requireAllClusterKeysForCoPartition off (validator.session) none shuffles again.
    """
    files = discover_inputs(options.inputs)
    partitions = shuffle_partitions_for(files.total_bytes, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    data = ReportData(expected_run=options.expected_run, inputs=[str(p) for p in options.inputs])

    with stage("read, check and aggregate event rows per run"):
        flagged = T.flag_bad_rows(read_events(spark, files, source_file=False))
        # Bad rows travel with the good ones and are counted by the same aggregation (keyed by
        # their reason too); only their count is kept from it.
        # The aggregation's inputs are computed before the shuffle (see transforms.run_inputs);
        # sorted after it by what per_run groups by, so its two aggregations stream (sort-based,
        # one pass each instead of a partial and a final hash aggregation over the same rows).
        extra = ("bad_reason",)
        shuffled = T.run_inputs(flagged, extra).repartition(partitions, "session_id")
        per_run = T.per_run(shuffled.sortWithinPartitions(*T.per_run_order(extra)), extra_keys=extra)
        try:
            runs_all = leaf(per_run)
            counts = runs_all.groupBy("bad_reason", "run").agg(F.sum("event_rows").alias("rows")).collect()
        except Exception as exc:  # schema mismatch in a Parquet file, unreadable file ...
            raise InputError(f"cannot read the event files: {str(exc).splitlines()[0]}") from exc
        data.rows_total = sum(int(r["rows"]) for r in counts)
        for r in counts:
            if r["bad_reason"]:
                data.bad_by_reason[r["bad_reason"]] = data.bad_by_reason.get(r["bad_reason"], 0) + int(
                    r["rows"]
                )
        data.rows_bad = sum(data.bad_by_reason.values())
        data.runs = sorted({r["run"] for r in counts if not r["bad_reason"]})
        bad_rows = (
            T.flag_bad_rows(read_events(spark, files))
            .where(F.col("bad_reason").isNotNull())
            .select("source_file", "bad_reason", CORRUPT_RECORD_COLUMN, "session_id", "run", "seq", "event")
        )
        if data.rows_bad:
            data.bad_samples = _rows(bad_rows.limit(BAD_ROW_SAMPLES))
        if data.rows_total == data.rows_bad:
            raise InputError(
                f"none of the {data.rows_total} event rows is usable ({_reasons(data.bad_by_reason)})"
            )
        bases = {r.split("~", 1)[0] for r in data.runs}
        if options.expected_run not in bases:
            raise InputError(
                f"no `{options.expected_run}` run in the events (runs present: {', '.join(data.runs)}); "
                "choose another with --expected"
            )

    with stage("protocol migration: steps, timelines and facts per run"):
        good = flagged.where(F.col("bad_reason").isNull())
        migration = MJ.migration_tables(good, partitions, options.expected_run)
    runs = runs_all.where(F.col("bad_reason").isNull()).drop("bad_reason", "event_rows")
    runs = leaf(MJ.with_migration_hash(runs, migration))  # the hash covers the migration facts too
    pairs = leaf(C.comparisons(runs, options.expected_run))
    diffed = C.groups_to_diff(pairs)
    to_diff = runs.join(F.broadcast(diffed), list(GROUP_KEY), "left_semi")
    facts = MJ.with_migration_facts(T.run_facts(to_diff), migration, diffed)
    diffs = leaf(C.diff_runs(facts, T.run_summary(to_diff), options.expected_run))
    verdicts = leaf(C.session_verdicts(pairs, diffs))
    protocols = MJ.group_protocols(migration)
    matrix = leaf(C.compatibility_matrix(verdicts, C.session_clients(runs), protocols))
    tables = Tables(bad_rows, runs, T.observed_rebalances(runs), T.run_summary(runs), diffs, verdicts, matrix)
    what = "diff, verdicts, matrix, report data" + (
        f"; write Parquet tables to {options.out_dir}" if options.out_dir is not None else ""
    )
    # The writes and the report's two small actions are independent jobs over the same cached
    # tables: submitted together, their driver-side latency overlaps (see write_tables).
    with stage(what), ThreadPoolExecutor(max_workers=1, thread_name_prefix="report") as pool:
        report = pool.submit(_collect_report, tables, data)
        if options.out_dir is not None:
            data.tables_written = write_tables(tables, options.out_dir, include_bad=data.rows_bad > 0)
        report.result()
        _migration_report(migration, data, options.out_dir)
        if options.collect_all:
            from validator.ci_outputs import collect_comparisons

            data.all_comparisons = collect_comparisons(verdicts, diffs)
    for frame in (runs_all, runs, pairs, diffs, verdicts, matrix):
        frame.unpersist()
    MJ.unpersist(migration)
    return data


def _migration_report(migration: MJ.MigrationTables | None, data: ReportData, out_dir: Path | None) -> None:
    """The migration view's share of the report (failing groups first) and its Parquet tables."""
    if migration is None:
        return
    failing = {section_key(w) for w in data.worst if w["status"] != "pass"}
    data.migration_groups = len(migration.keys)
    data.migration_steps, data.migration_timelines = MJ.collect_view(
        migration, MJ.shown_keys(migration, failing)
    )
    if out_dir is not None:
        data.tables_written += MJ.write_tables(migration, out_dir)


def _reasons(by_reason: dict[str, int]) -> str:
    return "; ".join(f"{reason}: {count}" for reason, count in sorted(by_reason.items()))


def write_tables(tables: Tables, out_dir: Path, *, include_bad: bool) -> list[str]:
    """The output tables, each a Parquet directory under `out_dir`."""
    outputs = {
        "observed_rebalances": tables.rebalances,
        "run_summary": tables.summary,
        "rebalance_diff": tables.diffs,
        "session_verdicts": tables.verdicts,
        "compatibility_matrix": tables.matrix,
    }
    if include_bad:
        outputs["bad_rows"] = tables.bad_rows
    # Independent jobs, submitted together: on small inputs each is mostly driver-side latency
    # (planning, code generation, committing files), which overlaps; tasks share the executors.
    with ThreadPoolExecutor(max_workers=len(outputs), thread_name_prefix="write") as pool:
        futures = {
            name: pool.submit(frame.write.mode("overwrite").parquet, str(out_dir / name))
            for name, frame in outputs.items()
        }
        for future in futures.values():
            future.result()
    return list(futures)


WORST_ORDER: tuple[str, ...] = ("session_id", "scenario", "group_id", "observed_run")


def _worst_first(row: dict[str, Any]) -> tuple[Any, ...]:
    return (-(row["worst_severity"] or 0), -(row["diffs"] or 0), *(row[k] for k in WORST_ORDER))


def _diff_order(d: dict[str, Any]) -> tuple[Any, ...]:
    return (
        section_key(d),
        d["observed_run"],
        -(d["severity"] or 0),
        d["aspect"],
        d["ordinal"] or 0,
        d["subject"] or "",
    )


def _tagged(kind: str, frame: DataFrame) -> DataFrame:
    """`frame`'s rows as (kind, JSON) rows, so differently shaped parts can be collected together."""
    options = {"ignoreNullFields": "false"}
    return frame.select(F.lit(kind).alias("kind"), F.to_json(F.struct(*frame.columns), options).alias("row"))


def _collect_tagged(parts: list[DataFrame]) -> dict[str, list[dict[str, Any]]]:
    union = parts[0]
    for part in parts[1:]:
        union = union.unionByName(part)
    rows: dict[str, list[dict[str, Any]]] = {}
    for collected in union.collect():
        rows.setdefault(collected["kind"], []).append(json.loads(collected["row"]))
    return rows


def _collect_report(tables: Tables, data: ReportData) -> None:
    """Everything the report shows, in two small actions over the cached result tables: (1) the
    status counts, diff totals, the matrix and the worst comparisons; (2) for their (session,
    scenario, group) sections (and each matrix cell's worst one, so every link lands) the
    verdicts, diffs, run summaries and timelines, selected by a broadcast of those few keys.

    (One action for both was slower: every part that needs the chosen keys recomputed them.)
    """
    spark = tables.verdicts.sparkSession
    verdicts, matrix = tables.verdicts, tables.matrix
    worst_order: list[Column] = [F.desc_nulls_last("worst_severity"), F.desc("diffs")] + [
        F.col(c) for c in WORST_ORDER
    ]
    head = _collect_tagged(
        [
            _tagged("status", verdicts.groupBy("status").count()),
            _tagged("totals", tables.diffs.groupBy("is_noise").count()),
            _tagged("matrix", matrix),
            _tagged(
                "failing",
                verdicts.where(F.col("status") != "pass")
                .orderBy(*worst_order)
                .limit(WORST_SESSIONS_IN_REPORT),
            ),
            _tagged("some", verdicts.orderBy(*[F.col(c) for c in WORST_ORDER]).limit(5)),
        ]
    )
    data.status_counts = {r["status"]: int(r["count"]) for r in head.get("status", [])}
    totals = head.get("totals", [])
    data.diffs_total = sum(int(r["count"]) for r in totals if not r["is_noise"])
    data.noise_total = sum(int(r["count"]) for r in totals if r["is_noise"])
    data.matrix = sorted(
        head.get("matrix", []), key=lambda c: (c["scenario"], c["client"], c["observed_run"])
    )
    worst = sorted(head.get("failing", []), key=_worst_first)
    data.worst = worst or sorted(head.get("some", []), key=lambda r: tuple(r[k] for k in WORST_ORDER))
    wanted = {section_key(w) for w in data.worst}
    wanted |= {
        (c["worst_session"], c["scenario"], c["worst_group"]) for c in data.matrix if c["worst_session"]
    }
    if not wanted:
        return
    key = ["session_id", "scenario", "group_id"]
    chosen = F.broadcast(
        spark.createDataFrame(sorted(wanted), "session_id string, scenario string, group_id string")
    )
    section = Window.partitionBy(*key).orderBy(
        "observed_run", F.desc("severity"), "aspect", "ordinal", "subject"
    )
    diffs = (
        tables.diffs.join(chosen, key)
        .withColumn("n", F.row_number().over(section))
        .where(F.col("n") <= DIFF_ROWS_PER_SESSION_IN_REPORT)
    )
    details = _collect_tagged(
        [
            _tagged("verdict", verdicts.join(chosen, key).select(*verdicts.columns)),
            _tagged("diff", diffs.select(*tables.diffs.columns)),
            _tagged("timeline", tables.rebalances.join(chosen, key).select(*tables.rebalances.columns)),
            _tagged("summary", tables.summary.join(chosen, key).select(*tables.summary.columns)),
        ]
    )
    for row in sorted(details.get("verdict", []), key=_worst_first):
        data.session_verdicts.setdefault(section_key(row), []).append(row)
    for row in sorted(details.get("diff", []), key=_diff_order):
        data.session_diffs.setdefault(section_key(row), []).append(row)
    for row in sorted(details.get("timeline", []), key=lambda r: (section_key(r), r["run"], r["ordinal"])):
        data.timelines.setdefault(section_key(row), []).append(row)
    for row in sorted(details.get("summary", []), key=lambda r: (section_key(r), r["run"])):
        data.run_summaries.setdefault(section_key(row), []).append(row)
