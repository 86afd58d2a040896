"""Replay throughput: a 100-member group, one simulated hour, a full rolling bounce.

Stages, each timed on the wall clock:
1. write the synthetic capture through the proxy's capture writer (pcapng, both legs),
2. read it back and rebuild the members' scripts (`build_plan`),
3. baseline: the recorded run through the observer (the cheapest pass over the same exchanges),
4. replay against the reference coordinator in virtual time (as recorded, and a scenario),
5. the KIP-848 migration (issue 14): every member bounced once over the hour, coming back on
   the consumer protocol (ConsumerGroupHeartbeat, replay.consumer_member), against the same
   bounce that keeps them classic, in the same run.

The goal is a simulated/wall ratio of at least 1,000x for stages 4 and 5.

    /work/venv/bin/python bench/replay.py [--members 100] [--hours 1] [--capture PATH] [--json FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proxy.capture.reader import read_capture
from replay.plan import build_plan, recorded_events
from replay.run import replay_reference
from replay.scenario import Scenario, load_builtin, parse_scenario
from tests.support.synth import synthesize_capture

GOAL_RATIO = 1_000.0

# Every member bounced once within the hour (static: it comes back with its instance id within
# its session timeout), either staying classic or switching to group.protocol=consumer.
ROLLING_UPGRADE = """
name: bench-{name}
description: every member bounced once over the run{what}
sessions: keep-running
broker: {{build: "4.3", migration_policy: bidirectional}}
rolling:
  start_ms: 10000
  interval_ms: {interval_ms}
  downtime_ms: 2000
  after: {after}
expect:
  refused: 0
  group_type: {group_type}
"""


def rolling_scenario(members: int, duration_ms: int, consumer: bool) -> Scenario:
    """The full rolling bounce of `members` within `duration_ms`, classic or to the consumer protocol."""
    interval_ms = max(1, min((duration_ms - 20_000) // members, 1_800_000))
    text = ROLLING_UPGRADE.format(
        name="classic-to-consumer-rolling-upgrade" if consumer else "classic-rolling-bounce",
        what=", back on the consumer protocol" if consumer else "",
        interval_ms=interval_ms,
        after="{protocol: consumer}" if consumer else "{}",
        group_type="consumer" if consumer else "classic",
    )
    return parse_scenario(text, "bench/replay.py")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--members", type=int, default=100)
    parser.add_argument("--hours", type=float, default=1.0)
    parser.add_argument("--capture", type=Path, help="reuse (or create) the capture at this path")
    parser.add_argument("--repeats", type=int, default=3, help="replays per case (the median is reported)")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    console = Console()
    duration_ms = int(args.hours * 3_600_000)
    capture = args.capture or Path(tempfile.mkdtemp(prefix="bench-replay-")) / "group.pcapng"
    rows: list[dict[str, object]] = []

    if not capture.exists():
        started = time.perf_counter()
        synthesize_capture(
            capture, members=args.members, static=True, duration_ms=duration_ms, rolling_bounce=True
        )
        wall = time.perf_counter() - started
        rows.append(
            {"stage": "write capture (proxy writer)", "wall_s": wall, "note": f"{capture.stat().st_size:,} B"}
        )

    started = time.perf_counter()
    parsed = read_capture(capture)
    plan = build_plan(parsed, capture.stem)
    wall = time.perf_counter() - started
    frames = len(parsed.frames)
    rows.append({"stage": "read capture + build plan", "wall_s": wall, "items": frames, "unit": "frames"})
    # What `group-replay replay` does too: the plan's objects live for the whole run, so move them
    # out of the collector's way (a full collection would otherwise walk ~1M long-lived objects).
    del parsed
    gc.collect()
    gc.freeze()

    started = time.perf_counter()
    recorded = recorded_events(plan)
    baseline_wall = time.perf_counter() - started
    exchanges = len(plan.recorded)
    rows.append(
        {
            "stage": "baseline: recorded run through the observer",
            "wall_s": baseline_wall,
            "items": exchanges,
            "unit": "exchanges",
            "note": f"{len(recorded)} events",
        }
    )

    for label, scenario in (
        ("replay as recorded (reference)", None),
        ("replay static-leader-bounce (reference)", load_builtin("static-leader-bounce")),
        (
            "classic rolling bounce, all members (reference)",
            rolling_scenario(args.members, duration_ms, False),
        ),
        (
            "classic -> consumer rolling upgrade, all members (reference)",
            rolling_scenario(args.members, duration_ms, True),
        ),
    ):
        walls = []
        result = None
        for _ in range(args.repeats):
            started = time.perf_counter()
            result = replay_reference(plan) if scenario is None else replay_reference(plan, scenario)
            walls.append(time.perf_counter() - started)
        assert result is not None
        wall = sorted(walls)[len(walls) // 2]
        ratio = result.simulated_ms / 1000 / wall
        rows.append(
            {
                "stage": label,
                "wall_s": wall,
                "items": result.rpcs,
                "unit": "RPCs",
                "simulated_s": result.simulated_ms / 1000,
                "ratio": ratio,
                "vs_baseline": wall / baseline_wall,
                "goal": ratio >= GOAL_RATIO,
                "note": f"{len(result.events)} events, expectations "
                + ("ok" if not result.failures else "; ".join(result.failures)),
            }
        )

    table = Table(
        title=f"replay benchmark: {args.members} members, {args.hours:g} h simulated, rolling bounce"
    )
    for column in ("stage", "wall s", "items/s", "simulated/wall", "x baseline", "goal >= 1000x", "note"):
        table.add_column(column, justify="left" if column in ("stage", "note") else "right")
    for row in rows:
        wall_s = float(row["wall_s"])  # type: ignore[arg-type]
        items = row.get("items")
        table.add_row(
            str(row["stage"]),
            f"{wall_s:.2f}",
            f"{int(items) / wall_s:,.0f} {row['unit']}/s" if items else "-",  # type: ignore[call-overload]
            f"{float(row['ratio']):,.0f}x" if "ratio" in row else "-",  # type: ignore[arg-type]
            f"{float(row['vs_baseline']):.1f}" if "vs_baseline" in row else "-",  # type: ignore[arg-type]
            ("[green]yes[/]" if row["goal"] else "[red]no[/]") if "goal" in row else "-",
            str(row.get("note", "")),
        )
    console.print(table)
    console.print(f"capture: {capture} ({frames:,} frames)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str), encoding="utf-8")
    return 0 if all(row.get("goal", True) for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
