"""The validate job's protocol-migration stage: which groups saw the consumer protocol, their steps,
timelines, facts and protocol paths (transforms in `validator.migration`), and the report's and
the Parquet tables' share of them. I/O (actions, writes) lives here, as in `validator.jobs`.

Groups that never saw the consumer protocol cost one filtered scan (Parquet skips its row groups
by their statistics) and nothing else: their runs, facts and hashes stay exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from replay.events import RECORDED_RUN
from validator import migration as M
from validator.checkpoint import leaf
from validator.schemas import GROUP_KEY
from validator.transforms import AS_RECORDED_SCENARIO, base_run, expected_run_for

MIGRATION_GROUPS_IN_REPORT = 30
"""(session, scenario, group) migration views the report shows, failing comparisons first."""

SectionKey = tuple[str, str, str]
KEY_DDL = "session_id string, scenario string, group_id string"


@dataclass(frozen=True, slots=True)
class MigrationTables:
    keys: tuple[SectionKey, ...]  # the groups that saw the consumer protocol, sorted
    stepped: DataFrame  # migration.with_steps rows (cached: every other table reads them)
    steps: DataFrame  # MIGRATION_STEPS_SCHEMA
    timeline: DataFrame  # MIGRATION_TIMELINE_SCHEMA
    facts: DataFrame  # FACTS_SCHEMA rows of the migration aspects
    protocols: DataFrame  # (session, scenario, group) -> protocol path (the matrix's axis)

    def unpersist(self) -> None:
        for frame in (self.stepped, self.steps, self.timeline):
            frame.unpersist()


def migration_tables(events: DataFrame, partitions: int, expected_run: str) -> MigrationTables | None:
    """The stage over good event rows; None when no group saw the consumer protocol."""
    keys = tuple(sorted(tuple(r) for r in M.consumer_groups(events).collect()))
    if not keys:
        return None
    chosen = F.broadcast(events.sparkSession.createDataFrame(list(keys), KEY_DDL))
    # `recorded` only where it is compared (under as-recorded), as transforms.is_observed
    compared = (F.col("scenario") == AS_RECORDED_SCENARIO) | (base_run(F.col("run")) != RECORDED_RUN)
    rows = (
        events.where(compared)
        .join(chosen, list(GROUP_KEY), "left_semi")
        .repartition(partitions, "session_id")
    )
    stepped = leaf(M.with_steps(M.member_rows(rows)))
    timeline = leaf(M.segments(stepped))
    steps = leaf(M.migration_steps(stepped, timeline))
    expected = expected_run_for(F.col("scenario"), expected_run)
    protocols = M.group_protocols(M.protocol_paths(stepped), expected)
    return MigrationTables(keys, stepped, steps, timeline, M.migration_facts(steps), protocols)


def with_migration_hash(runs: DataFrame, tables: MigrationTables | None) -> DataFrame:
    """`runs` whose `facts_hash` covers their migration facts too (unchanged without any)."""
    if tables is None:
        return runs
    return M.with_migration_hash(runs, M.facts_hashes(tables.facts))


def with_migration_facts(facts: DataFrame, tables: MigrationTables | None, groups: DataFrame) -> DataFrame:
    """`facts` plus the migration facts of the groups diffed fact by fact (`groups`: their keys)."""
    if tables is None:
        return facts
    return facts.unionByName(tables.facts.join(F.broadcast(groups), list(GROUP_KEY), "left_semi"))


def group_protocols(tables: MigrationTables | None) -> DataFrame | None:
    """The matrix's protocol axis (None: every group is classic)."""
    return None if tables is None else tables.protocols


def unpersist(tables: MigrationTables | None) -> None:
    if tables is not None:
        tables.unpersist()


def shown_keys(tables: MigrationTables, failing: set[SectionKey]) -> list[SectionKey]:
    """The groups whose migration view the report shows: failing comparisons first."""
    ordered = sorted(tables.keys, key=lambda k: (k not in failing, k))
    return ordered[:MIGRATION_GROUPS_IN_REPORT]


def collect_view(
    tables: MigrationTables, keys: list[SectionKey]
) -> tuple[dict[SectionKey, list[dict[str, Any]]], dict[SectionKey, list[dict[str, Any]]]]:
    """Steps and timeline segments of `keys`, per group, sorted by run then step / lane."""
    if not keys:
        return {}, {}
    chosen = F.broadcast(tables.steps.sparkSession.createDataFrame(keys, KEY_DDL))
    steps: dict[SectionKey, list[dict[str, Any]]] = {key: [] for key in keys}  # in `keys` order
    timeline: dict[SectionKey, list[dict[str, Any]]] = {key: [] for key in keys}
    for row in tables.steps.join(chosen, list(GROUP_KEY)).collect():
        steps.setdefault(_key(row), []).append(row.asDict(recursive=True))
    for row in tables.timeline.join(chosen, list(GROUP_KEY)).collect():
        timeline.setdefault(_key(row), []).append(row.asDict(recursive=True))
    for rows in steps.values():
        rows.sort(key=lambda r: (r["run"], r["step"]))
    for rows in timeline.values():
        rows.sort(key=lambda r: (r["run"], r["lane"], r["start_ms"]))
    return {k: v for k, v in steps.items() if v}, timeline


def _key(row: Any) -> SectionKey:
    return (row["session_id"], row["scenario"], row["group_id"])


def write_tables(tables: MigrationTables, out_dir: Path) -> list[str]:
    """`migration_steps` and `migration_timeline` as Parquet directories under `out_dir`."""
    outputs = {"migration_steps": tables.steps, "migration_timeline": tables.timeline}
    for name, frame in outputs.items():
        frame.write.mode("overwrite").parquet(str(out_dir / name))
    return list(outputs)
