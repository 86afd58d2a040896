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
    RequestContext,
    Respond,
)
from replay.coordinator import requests as Q  # noqa: E402

GROUP = "bench"
JOIN_V, SYNC_V, HB_V, LEAVE_V = 5, 3, 3, 3


@dataclass
class BenchMember:
    index: int
    instance: str | None
    member_id: str = ""
    generation: int = -1
    incarnation: int = 0
    running: bool = True


@dataclass
class Result:
    mode: str
    members: int
    requests: int = 0
    coordinator_s: float = 0.0
    wall_s: float = 0.0
    virtual_ms: int = 0
    rebalances: int = 0
    generations: int = 0
    counts: dict[str, int] = field(default_factory=dict)


def run(members: int, static: bool, heartbeat_ms: int, bounce_gap_ms: int, session_ms: int) -> Result:
    coordinator = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=3000))
    result = Result("static" if static else "dynamic", members)
    crew = [BenchMember(i, f"instance-{i:05d}" if static else None) for i in range(members)]
    actions: list[tuple[int, int, Callable[[int], None]]] = []
    seq = 0
    correlation = 0
    pending: dict[int, tuple[BenchMember, str, int]] = {}  # correlation -> (member, api, incarnation)
    now = 0
    perf = time.perf_counter

    def at(t: int, action: Callable[[int], None]) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(actions, (t, seq, action))

    def outputs(outs: list[Any]) -> None:
        for out in outs:
            if type(out) is Respond:
                on_response(out.context.correlation_id, out.response)
            elif type(out) is GroupEvent and out.event.value == "rebalance_started":
                result.rebalances += 1

    def send(member: BenchMember, api: str, api_version: int, request: Any) -> None:
        nonlocal correlation
        correlation += 1
        pending[correlation] = (member, api, member.incarnation)
        ctx = RequestContext(member.index, "bench", "/10.0.0.1", api_version, correlation)
        result.requests += 1
        result.counts[api] = result.counts.get(api, 0) + 1
        started = perf()
        outs = coordinator.handle(now, ctx, request)
        result.coordinator_s += perf() - started
        outputs(outs)

    def join(member: BenchMember) -> None:
        send(
            member,
            "join",
            JOIN_V,
            Q.join_group(
                JOIN_V,
                GROUP,
                member.member_id,
                group_instance_id=member.instance,
                session_timeout_ms=session_ms,
                rebalance_timeout_ms=30_000,
            ),
        )

    def heartbeat_loop(member: BenchMember, incarnation: int) -> Callable[[int], None]:
        def beat(t: int) -> None:
            if member.incarnation != incarnation or not member.running or not member.member_id:
                return
            send(
                member,
                "heartbeat",
                HB_V,
                Q.heartbeat(
                    HB_V, GROUP, member.generation, member.member_id, group_instance_id=member.instance
                ),
            )
            at(t + heartbeat_ms, beat)

        return beat

    def on_response(cid: int, response: Any) -> None:
        member, api, incarnation = pending.pop(cid)
        if incarnation != member.incarnation:
            return
        code = int(response.error_code) if hasattr(response, "error_code") else 0
        if api == "join":
            if code == 79:  # MEMBER_ID_REQUIRED
                member.member_id = response.member_id
                at(now, lambda t, m=member: join(m))
            elif code == 0:
                member.member_id = response.member_id
                member.generation = int(response.generation_id)
                assignments = {m.member_id: b"" for m in response.members}
                at(
                    now,
                    lambda t, m=member, a=assignments: send(
                        m,
                        "sync",
                        SYNC_V,
                        Q.sync_group(
                            SYNC_V,
                            GROUP,
                            m.generation,
                            m.member_id,
                            group_instance_id=m.instance,
                            assignments=a,
                        ),
                    ),
                )
        elif api == "sync":
            if code == 0:
                at(now + heartbeat_ms, heartbeat_loop(member, member.incarnation))
            elif code == 27:  # REBALANCE_IN_PROGRESS: rejoin
                at(now, lambda t, m=member: join(m))
        elif api == "heartbeat" and code == 27:
            member.incarnation += 1
            at(now, lambda t, m=member: join(m))

    def bounce(member: BenchMember) -> Callable[[int], None]:
        def restart(t: int) -> None:
            member.incarnation += 1
            if not static:
                send(member, "leave", LEAVE_V, Q.leave_group(LEAVE_V, GROUP, [(member.member_id, None)]))
                member.member_id = ""
            else:
                member.member_id = ""  # a restarted static member forgets its member id
            join(member)

        return restart

    for member in crew:
        at(0, lambda t, m=member: join(m))
    bounce_start = 60_000
    for i, member in enumerate(crew):
        at(bounce_start + i * bounce_gap_ms, bounce(member))
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
        t, _, action = heapq.heappop(actions)
        now = max(now, t)
        if now > end:
            break
        action(now)
    result.wall_s = perf() - wall_started
    result.virtual_ms = now
    result.generations = coordinator.groups[GROUP].generation_id
    return result


def baseline(requests: int) -> float:
    """Seconds to build `requests` kio HeartbeatRequests (the floor of per-request work)."""
    started = time.perf_counter()
    for i in range(requests):
        Q.heartbeat(HB_V, GROUP, 1, f"m-{i & 1023}", group_instance_id=None)
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
