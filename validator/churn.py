"""State shuffle: partitions moved between members and the time members spend without partitions.

Static membership (KIP-345) exists to cut exactly this cost: every partition that changes owner
makes its new owner restore state (caches, RocksDB stores, offsets), and under the classic eager
protocol every member holds nothing from the moment a rebalance starts until its generation
completes. Column expressions over a run's `generations` (see `transforms.per_run`), no UDFs:

- `moved` of a member at generation #k (k >= 2): partitions it holds after #k that it did not
  hold after #k-1 (each moved partition counts once, at its new owner; the first assignment is
  not a move). `partitions_moved` of a generation is their sum.
- `pause_ms` of generation #k: from the last `rebalance_started` before #k's first report to #k's
  completion, the eager "stop the world" window; a member's `unassigned_ms` is the sum of the
  pauses of the generations it took part in.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F


def _held(assignments: Column, member: Column) -> Column:
    """The partitions `member` holds in a generation's `assignments` (empty when absent)."""
    entry = F.try_element_at(F.filter(assignments, lambda a: a["member_key"] == member), F.lit(1))
    return F.coalesce(entry["assignment"], F.array().cast("array<string>"))


def with_churn(generations: Column, starts: Column) -> Column:
    """`generations` with `pause_ms`, `partitions_moved` and per-member `moved` added.

    `starts` is the run's `rebalance_started` reports as `array<struct<seq, ts_ms>>`.
    """

    def step(g: Column, index: Column) -> Column:
        # 1-based: element `index` is the generation before `g` (none before the first)
        previous = F.when(index > 0, F.try_element_at(generations, F.greatest(index, F.lit(1))))
        after = F.coalesce(previous["first_seq"], F.lit(-1))
        began = F.array_max(
            F.transform(
                F.filter(starts, lambda s: (s["seq"] < g["first_seq"]) & (s["seq"] > after)),
                lambda s: s["ts_ms"],
            )
        )
        moved = F.transform(
            g["assignments"],
            lambda a: F.struct(
                a["member_key"].alias("member_key"),
                F.when(
                    previous.isNotNull(),
                    F.size(F.array_except(a["assignment"], _held(previous["assignments"], a["member_key"]))),
                )
                .otherwise(F.lit(0))
                .alias("moved"),
            ),
        )
        return (
            g.withField("pause_ms", (g["ts_ms"] - began).cast("long"))
            .withField("partitions_moved", F.aggregate(moved, F.lit(0), lambda acc, m: acc + m["moved"]))
            .withField("moved", moved)
        )

    return F.transform(generations, step)


def member_churn(generations: Column) -> Column:
    """Per member (sorted): partitions moved to it and time without partitions over the run."""
    members = F.array_sort(
        F.array_distinct(
            F.flatten(F.transform(generations, lambda g: F.transform(g["moved"], lambda m: m["member_key"])))
        )
    )

    def of(member: Column) -> Column:
        def moved_in(g: Column) -> Column:
            mine = F.filter(g["moved"], lambda m: m["member_key"] == member)
            return F.coalesce(F.try_element_at(mine, F.lit(1))["moved"], F.lit(0))

        def paused_in(g: Column) -> Column:
            present = F.exists(g["moved"], lambda m: m["member_key"] == member)
            return F.when(present, F.coalesce(g["pause_ms"], F.lit(0))).otherwise(F.lit(0)).cast("long")

        return F.struct(
            member.alias("member_key"),
            F.aggregate(generations, F.lit(0), lambda acc, g: acc + moved_in(g)).alias("moved"),
            F.aggregate(generations, F.lit(0).cast("long"), lambda acc, g: acc + paused_in(g)).alias(
                "unassigned_ms"
            ),
        )

    return F.transform(members, of)
