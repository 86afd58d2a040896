"""Benchmark: the reference coordinator under a 1,000-member group's full rolling bounce, in
virtual time.

Every member joins (initial rebalance delay), syncs and heartbeats every `--heartbeat-ms`; then
each member in turn restarts `--bounce-gap-ms` after the previous one:
- static: it rejoins with its group.instance.id and no member id (KIP-345: no rebalance);
- dynamic: it sends LeaveGroup and joins again (a full rebalance of the whole group each time).

Requests/s counts coordinator `handle` calls over the wall time spent inside
`handle`/`advance` (the driver's own bookkeeping is reported separately). The baseline, measured
in the same run, is building one kio HeartbeatRequest per request: the cheapest thing any
request-level work must do here.

    /work/venv/bin/python bench/coordinator.py --members 1000
"""

from __future__ import annotations

import argparse
import heapq
import json
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# bench/replay.py would shadow the `replay` package when this runs as a script from bench/.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from replay.coordinator import (  # noqa: E402
    CoordinatorConfig,
    GroupCoordinator,
    GroupEvent,
    GroupEventKind,
    RequestContext,
    Respond,
)
from replay.member import (  # noqa: E402
    HEARTBEAT,
    JOIN,
    LEAVE,
    SYNC,
    ClassicMember,
    Commands,
    JoinSettings,
    Send,
    WakeAt,
    companion_versions,
)

GROUP = "bench"
JOIN_V = 5  # SyncGroup, Heartbeat and LeaveGroup follow (replay.member.COMPANION_VERSIONS: v3 each)
API_NAMES = {JOIN: "join", SYNC: "sync", HEARTBEAT: "heartbeat", LEAVE: "leave"}


@dataclass
class Result:
    """One scenario's figures: the CPU time spent inside the coordinator, the wall and virtual
    time of the whole run, and what the group went through (one row of the printed table)."""

    coordinator_s: float = 0.0
    wall_s: float = 0.0
    virtual_ms: int = 0
    rebalances: int = 0
    generations: int = 0
    counts: Counter[str] = field(default_factory=Counter)  # requests sent, per API

    @property
    def requests(self) -> int:
        return self.counts.total()


def run(members: int, static: bool, heartbeat_ms: int, bounce_gap_ms: int, session_ms: int) -> Result:  # noqa: C901 - one bench scenario loop; timing code kept inline
    """The members are replay's own `ClassicMember`s (join, sync, heartbeat, the Java consumer's
    error reactions); only the time spent inside `handle`/`advance` counts as coordinator time."""
    coordinator = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    result = Result()
    join = JoinSettings(GROUP, session_ms, 30_000, "consumer", (("range", b""),))
    crew = [
        ClassicMember(
            f"m{i}",
            "bench",
            join,
            instance_id=f"instance-{i:05d}" if static else None,
            api_versions=companion_versions(JOIN_V),
            heartbeat_interval_ms=heartbeat_ms,
        )
        for i in range(members)
    ]
    actions: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
    seq = 0
    correlation = 0
    pending: dict[int, tuple[int, Send]] = {}  # correlation -> (member index, what it sent)
    now = 0
    perf = time.perf_counter

    def at(t: int, action: Callable[[int, Any], None], arg: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(actions, (t, seq, action, arg))

    def apply(index: int, commands: Commands) -> None:
        for command in commands:
            if type(command) is WakeAt:
                at(command.at_ms, wake, (index, command))
            elif type(command) is Send:
                send(index, command)  # type: ignore[arg-type]

    def wake(t: int, arg: tuple[int, WakeAt]) -> None:
        apply(arg[0], crew[arg[0]].on_wake(t, arg[1]))

    def outputs(outs: list[Any]) -> None:
        for out in outs:
            if type(out) is Respond:
                index, sent = pending.pop(out.context.correlation_id)
                apply(index, crew[index].on_response(now, sent, out.response))
            elif type(out) is GroupEvent and out.event is GroupEventKind.REBALANCE_STARTED:
                result.rebalances += 1

    def send(index: int, command: Send) -> None:
        nonlocal correlation
        correlation += 1
        pending[correlation] = (index, command)
        ctx = RequestContext(index, "bench", "/10.0.0.1", command.api_version, correlation)
        result.counts[API_NAMES[command.api_key]] += 1
        started = perf()
        outs = coordinator.handle(now, ctx, command.request)
        result.coordinator_s += perf() - started
        outputs(outs)

    def start(t: int, index: int) -> None:
        apply(index, crew[index].start(t))

    def bounce(t: int, index: int) -> None:
        """A restart: a dynamic member leaves first; a static one just comes back (KIP-345)."""
        apply(index, crew[index].stop(t, leave=not static))
        apply(index, crew[index].start(t))

    for index in range(members):
        at(0, start, index)
    bounce_start = 60_000
    for index in range(members):
        at(bounce_start + index * bounce_gap_ms, bounce, index)
    end = bounce_start + members * bounce_gap_ms + 30_000

    wall_started = perf()
    while True:
        deadline = coordinator.next_deadline()
        next_action = actions[0][0] if actions else None
        if next_action is None and deadline is None:
            break
        if deadline is not None and (next_action is None or deadline < next_action):
            now = max(now, deadline)
            if now > end:
                break
            started = perf()
            outs = coordinator.advance(now)
            result.coordinator_s += perf() - started
            outputs(outs)
            continue
        t, _, action, arg = heapq.heappop(actions)
        now = max(now, t)
        if now > end:
            break
        action(now, arg)
    result.wall_s = perf() - wall_started
    result.virtual_ms = now
    result.generations = coordinator.groups[GROUP].generation_id
    return result


def baseline(requests: int) -> float:
    """Seconds to build `requests` kio HeartbeatRequests (the floor of per-request work)."""
    from kio.schema.heartbeat.v3.request import HeartbeatRequest
    from kio.static.primitive import i32

    started = time.perf_counter()
    for i in range(requests):
        HeartbeatRequest(
            group_id=GROUP, generation_id=i32(1), member_id=f"m-{i & 1023}", group_instance_id=None
        )
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--heartbeat-ms", type=int, default=3000)
    parser.add_argument("--session-ms", type=int, default=10_000)
    parser.add_argument("--bounce-gap-ms", type=int, default=100)
    parser.add_argument("--modes", default="static,dynamic")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the table shows the median")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args(argv)
    runs: dict[str, list[Result]] = {}
    base_rates: list[float] = []
    for _ in range(args.repeats):
        for mode in args.modes.split(","):
            runs.setdefault(mode, []).append(
                run(args.members, mode == "static", args.heartbeat_ms, args.bounce_gap_ms, args.session_ms)
            )
        base_n = max(r[-1].requests for r in runs.values())
        base_rates.append(base_n / baseline(base_n))
    base_rate = statistics.median(base_rates)
    table = Table(
        title=f"reference coordinator: {args.members}-member group, full rolling bounce, virtual time "
        f"(median of {args.repeats})"
    )
    for column in (
        "case",
        "requests",
        "rebalances",
        "generations",
        "virtual s",
        "wall s",
        "coordinator req/s",
        "best req/s",
        "end-to-end req/s",
        "virtual/wall",
        "x baseline",
    ):
        table.add_column(column, justify="left" if column == "case" else "right")
    base_cells = ["baseline: build a kio HeartbeatRequest", "", "", "", "", ""]
    table.add_row(*base_cells, f"{base_rate:,.0f}", f"{max(base_rates):,.0f}", "", "", "1.00")
    rows = []
    for mode, results in runs.items():
        rates = [r.requests / r.coordinator_s for r in results]
        rate = statistics.median(rates)
        r = results[rates.index(rate)] if rate in rates else results[0]
        wall = statistics.median(x.wall_s for x in results)
        end_to_end = r.requests / wall
        ratio = (r.virtual_ms / 1000) / wall
        table.add_row(
            f"{mode} rolling bounce",
            f"{r.requests:,}",
            f"{r.rebalances:,}",
            f"{r.generations:,}",
            f"{r.virtual_ms / 1000:,.0f}",
            f"{wall:.2f}",
            f"{rate:,.0f}",
            f"{max(rates):,.0f}",
            f"{end_to_end:,.0f}",
            f"{ratio:,.0f}x",
            f"{rate / base_rate:.2f}",
        )
        rows.append(
            {
                "mode": mode,
                "requests": r.requests,
                "rebalances": r.rebalances,
                "generations": r.generations,
                "virtual_ms": r.virtual_ms,
                "wall_s": wall,
                "coordinator_req_per_s": rate,
                "coordinator_req_per_s_all": rates,
                "end_to_end_req_per_s": end_to_end,
                "counts": r.counts,
            }
        )
    Console(width=200).print(table)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump({"baseline_req_per_s": base_rate, "runs": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
