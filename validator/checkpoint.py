"""Materialize an intermediate table as a leaf of later plans (an action: the jobs call it)."""

from __future__ import annotations

from pyspark import StorageLevel
from pyspark.sql import DataFrame


def leaf(frame: DataFrame) -> DataFrame:
    """`frame` computed now and kept (memory, else disk) as a leaf of the plans that read it.

    Why not `persist()`: every action over a persisted frame still analyses and optimizes the
    frame's whole lineage before it swaps in the cached data, and the validate job's lineage
    (higher-order functions over nested arrays, per run and per migration step) is large: on the
    CI corpus job (68k rows, ~20 actions) that driver-side planning, not the tasks, was most of
    the job's time (bench/README.md). A local checkpoint keeps the frame's partitioning (by
    session), so the joins and aggregations after it still need no shuffle.
    """
    return frame.localCheckpoint(eager=True, storageLevel=StorageLevel.MEMORY_AND_DISK)
