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

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F


def _no_partitions() -> Column:
    """An empty `array<string>` (a function: columns need an active session)."""
    return F.array().cast("array<string>")


def let_once(value: Column, body: Callable[[Column], Column]) -> Column:
    """`body(value)` with `value` evaluated once (higher-order functions run interpreted and do not
    share a sub-expression used several times inside a lambda)."""
    return F.element_at(F.transform(F.array(value), body), 1)


def generations_with_churn(generations: Column, starts: Column) -> Column:
    """The run's generations (sorted by first report) as the rebalances they were: numbered 1, 2,
    ... by completion (`ordinal`), with `members`, `pause_ms`, `partitions_moved` and per-member
    `moved`, each generation built in one struct.

    `starts` is the run's `rebalance_started` reports as `array<struct<seq, ts_ms>>`. A member's
    previous partitions come from a map of the previous generation's assignments (one lookup per
    member instead of a scan of that generation's members).
    """

    def step(g: Column, index: Column) -> Column:
        # 1-based: element `index` is the generation before `g` (none before the first)
        previous = F.when(index > 0, F.try_element_at(generations, F.greatest(index, F.lit(1))))
        return let_once(previous, lambda previous: _generation(g, index, previous, starts))

    return F.transform(generations, step)


def _generation(g: Column, index: Column, previous: Column, starts: Column) -> Column:
    after = F.coalesce(previous["first_seq"], F.lit(-1))
    began = F.array_max(
        F.transform(
            F.filter(starts, lambda s: (s["seq"] < g["first_seq"]) & (s["seq"] > after)),
            lambda s: s["ts_ms"],
        )
    )

    def moves(held: Column) -> Column:
        def moved(a: Column) -> Column:
            before = F.coalesce(F.try_element_at(held, a["member_key"]), _no_partitions())
            return F.when(previous.isNotNull(), F.size(F.array_except(a["assignment"], before))).otherwise(0)

        return F.transform(
            g["assignments"], lambda a: F.struct(a["member_key"].alias("member_key"), moved(a).alias("moved"))
        )

    return let_once(
        let_once(F.map_from_entries(previous["assignments"]), moves),
        lambda moved: F.struct(
            (index + 1).cast("int").alias("ordinal"),
            g["first_seq"].alias("first_seq"),
            g["generation_id"].alias("generation_id"),
            g["ts_ms"].alias("ts_ms"),
            g["leader"].alias("leader"),
            F.size(g["assignments"]).cast("long").alias("members"),
            g["protocol_name"].alias("protocol_name"),
            g["assignments"].alias("assignments"),
            (g["ts_ms"] - began).cast("long").alias("pause_ms"),
            F.aggregate(moved, F.lit(0), lambda acc, m: acc + m["moved"]).alias("partitions_moved"),
            moved.alias("moved"),
        ),
    )


CHURN_TYPE = "map<string, struct<moved: int, unassigned_ms: bigint>>"


def member_churn(generations: Column) -> Column:
    """Per member (sorted): partitions moved to it and time without partitions over the run,
    summed generation by generation into a map keyed by member."""

    def add(total: Column, g: Column) -> Column:
        pause = F.coalesce(g["pause_ms"], F.lit(0)).cast("long")
        this = F.map_from_entries(
            F.transform(
                g["moved"],
                lambda m: F.struct(
                    m["member_key"], F.struct(m["moved"].alias("moved"), pause.alias("unassigned_ms"))
                ),
            )
        )
        return F.map_zip_with(
            total,
            this,
            lambda _, a, b: F.struct(
                (F.coalesce(a["moved"], F.lit(0)) + F.coalesce(b["moved"], F.lit(0))).alias("moved"),
                (F.coalesce(a["unassigned_ms"], F.lit(0)) + F.coalesce(b["unassigned_ms"], F.lit(0)))
                .cast("long")
                .alias("unassigned_ms"),
            ),
        )

    totals = F.aggregate(generations, F.create_map().cast(CHURN_TYPE), add)
    return F.transform(
        F.sort_array(F.map_entries(totals)),
        lambda e: F.struct(
            e["key"].alias("member_key"),
            e["value"]["moved"].alias("moved"),
            e["value"]["unassigned_ms"].alias("unassigned_ms"),
        ),
    )
