"""Benchmark: one full `uniform` target assignment, this checkout against a git revision of the
same module, interleaved in one process (issue 13's goal: within 10x of Kafka's JMH figure).

The machine is shared (load average 8-30 while the others' brokers and tests run), so two runs of
the same code minutes apart differ by 1.5-2x. Here the baseline is `assignors.py` as it was at
`--base` (read with `git show`, loaded as a second module beside the current one), and each
repeat times the base and the current builder back to back on the same inputs, so both see the
same load. Reported: best and median CPU ms per assignment (Kafka's JMH figure is an average in
a warmed-up JVM: the median is the fairer comparison, the best the floor). Inputs as
bench/consumer_group.py: 100 topics, 10 partitions per member, homogeneous subscriptions; `fresh`
assigns an empty group, `+1` re-assigns a settled group after one member joined.

    .venv/bin/python bench/uniform_ab.py [--base main] [--sizes 100,1000,10000] [--repeats 200]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from rich.console import Console
from rich.table import Table

# bench/replay.py would shadow the `replay` package when this runs as a script from bench/.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from replay.coordinator.consumer import assignors as current  # noqa: E402

KAFKA_JMH_UNIFORM_MS = {100: 0.02, 10_000: 4.3}  # issue 13: Kafka's published JMH figures
MODULE = "replay/coordinator/consumer/assignors.py"


def _base_module(revision: str) -> ModuleType:
    source = subprocess.run(
        ["git", "show", f"{revision}:{MODULE}"], capture_output=True, text=True, check=True
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="uniform-ab-")) / "base_assignors.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location("base_assignors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["base_assignors"] = module
    spec.loader.exec_module(module)
    return module


def _inputs(module: ModuleType, members_count: int) -> tuple[dict[uuid.UUID, int], list[Any], list[Any]]:
    topics = {uuid.UUID(int=i + 1): members_count * 10 // 100 for i in range(100)}
    ids = frozenset(topics)
    spec = module.MemberSpec
    member_ids = module.java_hash_order([str(uuid.UUID(int=(0x848 << 64) + i)) for i in range(members_count)])
    fresh = [spec(m, None, ids, {}) for m in member_ids]
    settled = module.uniform(fresh, topics, True)
    joined = [spec(m, None, ids, settled[m]) for m in member_ids] + [spec("new", None, ids, {})]
    return topics, fresh, joined


def _cpu_ms(assign: Callable[..., Any], members: list[Any], topics: dict[uuid.UUID, int]) -> float:
    start = time.process_time()
    assign(members, topics, True)
    return (time.process_time() - start) * 1000


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", default="main", help="git revision of the baseline (default %(default)s)")
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeats", type=int, default=200, help="at 100 members; fewer for bigger groups")
    args = parser.parse_args()
    base = _base_module(args.base)
    console = Console()
    console.print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    table = Table(title=f"one full uniform assignment, CPU ms: {args.base} vs this checkout, interleaved")
    columns = ("members", "case", "base best", "base median", "now best", "now median")
    for column in (*columns, "now/base (median)", "Kafka JMH (JVM)", "now median / Kafka"):
        table.add_column(column, justify="right")
    for size in (int(s) for s in args.sizes.split(",")):
        repeats = max(5, args.repeats * 100 // size)
        for case, index in (("fresh", 1), ("+1", 2)):
            base_in, now_in = _inputs(base, size), _inputs(current, size)
            base_ms, now_ms = [], []
            for _ in range(repeats):
                base_ms.append(_cpu_ms(base.uniform, base_in[index], base_in[0]))
                now_ms.append(_cpu_ms(current.uniform, now_in[index], now_in[0]))
            expected = base.uniform(base_in[index], base_in[0], True)
            assert expected == current.uniform(now_in[index], now_in[0], True), f"{size} {case} disagree"
            kafka = KAFKA_JMH_UNIFORM_MS.get(size)
            median_now, median_base = statistics.median(now_ms), statistics.median(base_ms)
            table.add_row(
                str(size), case, f"{min(base_ms):.3f}", f"{median_base:.3f}", f"{min(now_ms):.3f}",
                f"{median_now:.3f}", f"{median_now / median_base:.2f}", "-" if kafka is None else f"{kafka}",
                "-" if kafka is None else f"{median_now / kafka:.1f}x",
            )  # fmt: skip
    console.print(table)
    console.print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
