"""The validate job: read event files -> transforms -> Parquet tables and report data.

I/O lives here and in `validator.report`; every computation is a transform from
`validator.transforms`. `run_validate` is what both `group-replay validate` and `spark_main.py`
(under `spark-submit`) run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from validator import transforms as T
from validator.explain import explain_diffs
from validator.schemas import (
    CORRUPT_RECORD_COLUMN,
    EVENT_SCHEMA,
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
    expected_run: str = "reference"
    out_dir: Path | None = None
    max_bad_rows: int = 0


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


def read_events(spark: SparkSession, files: InputFiles) -> DataFrame:
    """All rows with the explicit schema, a `_corrupt_record` column and their `source_file`."""
    frames: list[DataFrame] = []
    if files.json_files:
        json_frame = (
            spark.read.schema(JSON_READ_SCHEMA)
            .option("mode", "PERMISSIVE")
            .option("columnNameOfCorruptRecord", CORRUPT_RECORD_COLUMN)
            .json(list(files.json_files))
        )
        frames.append(json_frame.withColumn("source_file", F.col("_metadata.file_path")))
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
        frames.append(
            parquet_frame.withColumn(CORRUPT_RECORD_COLUMN, F.lit(None).cast("string")).withColumn(
                "source_file", F.col("_metadata.file_path")
            )
        )
    frame = frames[0]
    for other in frames[1:]:
        frame = frame.unionByName(other)
    return frame


def shuffle_partitions_for(total_bytes: int, cores: int) -> int:
    """Few partitions for small inputs (tests, fixtures), about one per 64 MB for big ones."""
    return max(2, min(200, max(cores, total_bytes // (64 << 20))))


@dataclass(frozen=True, slots=True)
class Tables:
    events: DataFrame
    bad_rows: DataFrame
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
    """Run the whole job; raises InputError for unusable input. Writes Parquet when `out_dir`."""
    files = discover_inputs(options.inputs)
    partitions = shuffle_partitions_for(files.total_bytes, spark.sparkContext.defaultParallelism)
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    data = ReportData(expected_run=options.expected_run, inputs=[str(p) for p in options.inputs])
    keep = StorageLevel.MEMORY_AND_DISK

    with stage("read and check event rows"):
        # One scan, one cached copy, partitioned by session: every later aggregation and join is
        # keyed by (session_id, ...), so with requireAllClusterKeysForCoPartition off (see
        # validator.session) they reuse this partitioning instead of shuffling again.
        flagged = T.flag_bad_rows(read_events(spark, files))
        flagged = flagged.withColumn(
            "source_file", F.when(F.col("bad_reason").isNotNull(), F.col("source_file"))
        )
        # Keep only what the transforms read (member_id and friends are never compared).
        flagged = flagged.select(*USED_COLUMNS, "bad_reason", CORRUPT_RECORD_COLUMN, "source_file")
        flagged = flagged.repartition(partitions, "session_id").persist(keep)
        try:
            by_reason = flagged.groupBy("bad_reason").count().collect()
        except Exception as exc:  # schema mismatch in a Parquet file, unreadable file ...
            raise InputError(f"cannot read the event files: {str(exc).splitlines()[0]}") from exc
        data.rows_total = sum(int(r["count"]) for r in by_reason)
        data.bad_by_reason = {r["bad_reason"]: int(r["count"]) for r in by_reason if r["bad_reason"]}
        data.rows_bad = sum(data.bad_by_reason.values())
        bad_rows = flagged.where(F.col("bad_reason").isNotNull()).select(
            "source_file", "bad_reason", CORRUPT_RECORD_COLUMN, "session_id", "run", "seq", "event"
        )
        if data.rows_bad:
            data.bad_samples = _rows(bad_rows.limit(BAD_ROW_SAMPLES))
        events = flagged.where(F.col("bad_reason").isNull()).select(*USED_COLUMNS)
        if data.rows_total == data.rows_bad:
            raise InputError(
                f"none of the {data.rows_total} event rows is usable ({_reasons(data.bad_by_reason)})"
            )

    with stage("rebalances, assignments and facts per run"):
        rebalances = _materialize(T.observed_rebalances(events))
        summary = _materialize(T.run_summary(events, rebalances))
        data.runs = sorted(r["run"] for r in summary.select("run").distinct().collect())
        bases = {r.split("~", 1)[0] for r in data.runs}
        if options.expected_run not in bases:
            raise InputError(
                f"no `{options.expected_run}` run in the events (runs present: {', '.join(data.runs)}); "
                "choose another with --expected"
            )
        facts = T.run_facts(events, summary, rebalances, T.member_assignments(events, rebalances))
        pairs = _materialize(T.comparison_pairs(summary, options.expected_run))

    with stage("diff expected vs observed, label noise"):
        diffs = _materialize(explain_diffs(T.diff_runs(facts, summary, options.expected_run), summary))
        verdicts = _materialize(T.session_verdicts(pairs, summary, diffs))
        totals = diffs.groupBy("is_noise").count().collect()
        data.diffs_total = sum(int(r["count"]) for r in totals if not r["is_noise"])
        data.noise_total = sum(int(r["count"]) for r in totals if r["is_noise"])

    with stage("compatibility matrix"):
        matrix = T.compatibility_matrix(verdicts, T.session_clients(events)).persist(keep)
        data.matrix = _rows(matrix.orderBy("scenario", "client", "observed_run"))
        data.status_counts = {
            r["status"]: int(r["count"]) for r in verdicts.groupBy("status").count().collect()
        }

    tables = Tables(events, bad_rows, rebalances, summary, diffs, verdicts, matrix)
    if options.out_dir is not None:
        with stage(f"write Parquet tables to {options.out_dir}"):
            data.tables_written = write_tables(tables, options.out_dir, include_bad=data.rows_bad > 0)

    with stage("collect report data"):
        _collect_report(tables, data)
    flagged.unpersist()
    matrix.unpersist()
    return data


def _materialize(frame: DataFrame) -> DataFrame:
    """Compute and keep `frame` once, and cut its lineage: later stages plan against a small
    leaf instead of re-analysing the whole plan above it (planning dominated small inputs)."""
    return frame.localCheckpoint(eager=True)


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
    written = []
    for name, frame in outputs.items():
        frame.write.mode("overwrite").parquet(str(out_dir / name))
        written.append(name)
    return written


def _collect_report(tables: Tables, data: ReportData) -> None:
    """The worst comparisons, their diffs, run summaries and the rebalance timelines of their
    (session, scenario, group) sections (and of each matrix cell's worst one, so every link lands)."""
    worst_order: list[Column | str] = [
        F.desc("worst_severity"),
        F.desc("diffs"),
        "session_id",
        "scenario",
        "group_id",
        "observed_run",
    ]
    failing = tables.verdicts.where(F.col("status") != "pass")
    worst = _rows(failing.orderBy(*worst_order).limit(WORST_SESSIONS_IN_REPORT))
    if not worst:  # all pass: still show a few sessions' timelines
        worst = _rows(tables.verdicts.orderBy("session_id", "scenario", "group_id", "observed_run").limit(5))
    data.worst = worst
    wanted = {section_key(w) for w in worst}
    wanted |= {
        (c["worst_session"], c["scenario"], c["worst_group"]) for c in data.matrix if c["worst_session"]
    }
    if not wanted:
        return
    spark = tables.diffs.sparkSession
    key = ["session_id", "scenario", "group_id"]
    chosen = F.broadcast(
        spark.createDataFrame(sorted(wanted), "session_id string, scenario string, group_id string")
    )
    for row in _rows(tables.verdicts.join(chosen, key).orderBy(*worst_order)):
        data.session_verdicts.setdefault(section_key(row), []).append(row)
    diff_rows = _rows(
        tables.diffs.join(chosen, key)
        .orderBy(*key, "observed_run", F.desc("severity"), "aspect", "ordinal", "subject")
        .limit(len(wanted) * DIFF_ROWS_PER_SESSION_IN_REPORT)
    )
    for row in diff_rows:
        data.session_diffs.setdefault(section_key(row), []).append(row)
    for row in _rows(tables.rebalances.join(chosen, key).orderBy(*key, "run", "ordinal")):
        data.timelines.setdefault(section_key(row), []).append(row)
    for row in _rows(tables.summary.join(chosen, key).orderBy(*key, "run")):
        data.run_summaries.setdefault(section_key(row), []).append(row)
