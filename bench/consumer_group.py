"""Benchmark: KIP-848 consumer groups in the reference coordinator (issue 13), in virtual time.

1. One full target assignment of the server-side assignors (`uniform` from scratch and after one
   member joins a settled group; `range`) at 100, 1,000 and 10,000 members: 100 topics, 10
   partitions per member (Kafka's ServerSideAssignorBenchmark shape: partitionsToMemberRatio 10,
   100 topics, homogeneous subscriptions), best CPU time of --repeats. Kafka's published JMH
   figures for its uniform assignor are shown beside them (JVM, not this machine). Baseline,
   same run: building every member's answer as a plain round-robin list.
2. Heartbeats/s: a consumer-protocol group (default 1,000 members) joins, settles, then goes
   through a rolling restart (each static member leaves with epoch -2 and rejoins under a new
   member id; dynamic: each leaves with -1 and rejoins, a rebalance each time), every member
   heartbeating every 5 s of virtual time. Counted per CPU second of a bare replay of the run's
   own requests into a fresh coordinator (deterministic, so the same answers; the shared VM
   cannot inflate CPU time the way it inflates wall time), and per wall second inside the
   calls. Baseline, same run: building one kio ConsumerGroupHeartbeatRequest per call.
3. Requests/s of a classic -> consumer rolling upgrade: a classic group of replay's
   ClassicMembers converted online pod by pod (static and dynamic), through the whole
   coordinator (`GroupCoordinator.handle`, kio requests), per CPU second of a bare replay.

    .venv/bin/python bench/consumer_group.py [--parts assign,restart,upgrade]
"""

from __future__ import annotations

import argparse
import heapq
import os
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

# bench/replay.py would shadow the `replay` package when this runs as a script from bench/.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from proxy.wire.consumer_protocol import encode_subscription  # noqa: E402
from proxy.wire.errors import ErrorCode  # noqa: E402
from replay.coordinator import CoordinatorConfig, GroupCoordinator, RequestContext, Respond  # noqa: E402
from replay.coordinator.consumer import (  # noqa: E402
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    MemberSpec,
)
from replay.coordinator.consumer.assignors import java_hash_order, range_, uniform  # noqa: E402
from replay.coordinator.consumer.group import MigrationPolicy  # noqa: E402
from replay.coordinator.consumer.wire import heartbeat_response_from_kio, heartbeat_to_kio  # noqa: E402
from replay.member import ClassicMember, JoinSettings, Send, WakeAt, companion_versions  # noqa: E402

KAFKA_JMH_UNIFORM_MS = {100: 0.02, 10_000: 4.3}  # issue 13: Kafka's published JMH figures


def _best_ms(run: Callable[[], Any], repeats: int) -> float:
    """Best CPU time of `repeats` runs (process time: the VM is shared, wall time is not ours)."""
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append((time.process_time() - start) * 1000)
    return min(times)


def _assignment_row(members_count: int, repeats: int) -> tuple[Any, ...]:
    topics = {uuid.UUID(int=i + 1): members_count * 10 // 100 for i in range(100)}
    ids = frozenset(topics)
    member_ids = java_hash_order([str(uuid.UUID(int=(0x848 << 64) + i)) for i in range(members_count)])
    fresh = [MemberSpec(m, None, ids, {}) for m in member_ids]
    settled = uniform(fresh, topics, True)
    joined = [MemberSpec(m, None, ids, settled[m]) for m in member_ids] + [MemberSpec("new", None, ids, {})]
    partitions = [(t, p) for t, n in topics.items() for p in range(n)]

    def round_robin() -> None:
        answer: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in member_ids}
        for index, tp in enumerate(partitions):
            answer[member_ids[index % members_count]].append(tp)

    repeat = repeats if members_count <= 1000 else max(1, repeats // 3)
    return (
        members_count,
        len(partitions),
        _best_ms(lambda: uniform(fresh, topics, True), repeat),
        _best_ms(lambda: uniform(joined, topics, True), repeat),
        _best_ms(lambda: range_(fresh, topics), repeat),
        _best_ms(round_robin, repeat),
        KAFKA_JMH_UNIFORM_MS.get(members_count),
    )


class GroupRun:
    """A consumer-protocol group driven in virtual time; every member reports what it owns."""

    def __init__(self, members: int, dynamic: bool) -> None:
        self.coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig())
        self.coordinator.add_topic("orders", members * 2)
        self.dynamic = dynamic
        self.now_ms = 1_000
        self.calls = 0
        self.inside_s = 0.0
        self.sent: list[tuple[int, HeartbeatRequest]] = []  # replayed by `replay_cpu_s`
        self.state: dict[int, dict[str, Any]] = {
            i: {"id": f"m-{i}-0", "epoch": 0, "owned": {}, "instance": None if dynamic else f"pod-{i}"}
            for i in range(members)
        }

    def beat(self, index: int, epoch: int | None = None) -> None:
        member = self.state[index]
        sent = member["epoch"] if epoch is None else epoch
        joining = sent == 0
        request = HeartbeatRequest(
            group_id="bench",
            member_id=member["id"],
            member_epoch=sent,
            instance_id=member["instance"],
            rebalance_timeout_ms=300_000 if joining else -1,
            subscribed_topic_names=("orders",) if joining else None,
            owned={} if joining else member["owned"],
        )
        member["last_ms"] = self.now_ms
        self.sent.append((self.now_ms, request))
        start = time.perf_counter()
        answer = self.coordinator.heartbeat(self.now_ms, request)
        self.inside_s += time.perf_counter() - start
        self.calls += 1
        if answer.error_code == 0 and sent >= 0:
            member["epoch"] = answer.member_epoch
            if answer.assignment is not None:
                member["owned"] = answer.assignment

    def due(self) -> None:
        """Everyone whose heartbeat interval (5 s) has passed heartbeats now."""
        for index, member in self.state.items():
            if member.get("last_ms", 0) <= self.now_ms - 5_000:
                self.beat(index)

    def round(self) -> None:
        """Every member heartbeats once, spread over one 5 s heartbeat interval."""
        step = 5_000 // max(1, len(self.state))
        for index in self.state:
            self.now_ms += step
            self.beat(index)

    def run(self) -> None:
        for index in self.state:
            self.now_ms += 1
            self.beat(index)
        for _ in range(4):
            self.round()
        for index in self.state:  # the rolling restart, one member at a time
            member = self.state[index]
            self.beat(index, epoch=-1 if self.dynamic else -2)
            self.now_ms += 2_000
            generation = int(member["id"].rsplit("-", 1)[1]) + 1
            member.update(id=f"m-{index}-{generation}", epoch=0, owned={})
            self.beat(index)
            self.due()
        for _ in range(4):
            self.round()

    def replay_cpu_s(self) -> float:
        """CPU seconds a fresh coordinator spends on the very requests this run sent, in a bare
        loop (the coordinator is deterministic, so it answers them as it did): the figure a
        shared VM cannot inflate by taking the CPU away between calls."""
        coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig())
        coordinator.add_topic("orders", self.coordinator.topic_partitions["orders"])
        heartbeat = coordinator.heartbeat
        start = time.process_time()
        for now_ms, request in self.sent:
            heartbeat(now_ms, request)
        cpu_s = time.process_time() - start
        replayed, ran = coordinator.groups["bench"], self.coordinator.groups["bench"]
        if (replayed.group_epoch, replayed.target) != (ran.group_epoch, ran.target):
            raise AssertionError("the replay diverged from the run")
        return cpu_s


class UpgradeRun:
    """A classic group of `members` range consumers (replay's own `ClassicMember`s: join, sync,
    heartbeat every 3 s, rejoin on REBALANCE_IN_PROGRESS) upgraded pod by pod to the consumer
    protocol, through the whole coordinator (`GroupCoordinator.handle`, kio requests) with
    group.consumer.migration.policy=upgrade: every 2 s one classic member stops (a dynamic one
    sends LeaveGroup) and comes back as a KIP-848 member (ConsumerGroupHeartbeat epoch 0, a
    static one with its instance id), heartbeating every 5 s. The first such heartbeat converts
    the live classic group (convertToConsumerGroup); the classic members left in it heartbeat,
    rejoin and sync through the classic*ToConsumerGroup paths. Every call is recorded, so
    `replay_cpu_s` can time the coordinator alone on the same sequence."""

    def __init__(self, members: int, static: bool) -> None:
        self.coordinator = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
        service = self.coordinator.consumer
        service.coordinator.config = ConsumerGroupConfig(migration_policy=MigrationPolicy.UPGRADE)
        self.topics = {"orders": members * 2}
        service.use_topics(dict(self.topics))
        self.static = static
        join = JoinSettings(
            "bench", 45_000, 30_000, "consumer", (("range", encode_subscription(["orders"], 1)),)
        )
        self.crew = [
            ClassicMember(
                f"m{i}",
                "bench",
                join,
                instance_id=f"pod-{i}" if static else None,
                api_versions=companion_versions(5),
                heartbeat_interval_ms=3_000,
                topics=self.topics,
            )
            for i in range(members)
        ]
        self.modern: dict[int, dict[str, Any]] = {}
        self.actions: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
        self.pending: dict[int, tuple[int, Any]] = {}
        self.calls: list[
            tuple[int, RequestContext | None, Any]
        ] = []  # (now, ctx, request); ctx None: advance
        self.now = 0
        self.seq = 0
        self.errors: dict[int, int] = {}

    def at(self, t: int, action: Callable[[int, Any], None], arg: Any) -> None:
        self.seq += 1
        heapq.heappush(self.actions, (t, self.seq, action, arg))

    def apply(self, index: int, commands: Any) -> None:
        for command in commands:
            if type(command) is WakeAt:
                self.at(command.at_ms, self.wake, (index, command))
            elif type(command) is Send:
                self.send(index, command.api_version, command.request, command)

    def wake(self, t: int, arg: tuple[int, Any]) -> None:
        self.apply(arg[0], self.crew[arg[0]].on_wake(t, arg[1]))

    def send(self, index: int, api_version: int, request: Any, sent: Any) -> None:
        self.seq += 1
        ctx = RequestContext(index, "bench", "/10.0.0.1", api_version, self.seq)
        self.pending[self.seq] = (index, sent)
        self.calls.append((self.now, ctx, request))
        self.outputs(self.coordinator.handle(self.now, ctx, request))

    def outputs(self, outs: list[Any]) -> None:
        for out in outs:
            if type(out) is Respond:
                index, sent = self.pending.pop(out.context.correlation_id)
                if sent is None:
                    self.answered(index, heartbeat_response_from_kio(out.response))
                else:
                    self.apply(index, self.crew[index].on_response(self.now, sent, out.response))

    def beat(self, t: int, index: int) -> None:
        member = self.modern[index]
        if t < member["due"]:
            return
        joining = member["epoch"] == 0
        request = HeartbeatRequest(
            group_id="bench",
            member_id=member["id"],
            member_epoch=member["epoch"],
            instance_id=f"pod-{index}" if self.static else None,
            rebalance_timeout_ms=300_000 if joining else -1,
            subscribed_topic_names=("orders",) if joining else None,
            owned={} if joining else member["owned"],
        )
        self.send(index, 1, heartbeat_to_kio(request), None)

    def answered(self, index: int, answer: Any) -> None:
        member = self.modern[index]
        if answer.error_code:
            self.errors[answer.error_code] = self.errors.get(answer.error_code, 0) + 1
            member.update(epoch=0, owned={}, due=self.now + 1_000)  # rejoin after a backoff
        else:
            member["epoch"] = answer.member_epoch
            if answer.assignment is not None:
                member["owned"] = answer.assignment
            member["due"] = self.now + answer.heartbeat_interval_ms
        self.at(member["due"], self.beat, index)

    def upgrade(self, t: int, index: int) -> None:
        self.apply(index, self.crew[index].stop(t, leave=not self.static))
        self.modern[index] = {"id": f"c-{index}", "epoch": 0, "owned": {}, "due": t}
        self.beat(t, index)

    def run(self) -> None:
        for index in range(len(self.crew)):
            self.at(0, lambda t, i: self.apply(i, self.crew[i].start(t)), index)
        start = 60_000
        for index in range(len(self.crew)):
            self.at(start + index * 2_000, self.upgrade, index)
        end = start + len(self.crew) * 2_000 + 30_000
        coordinator = self.coordinator
        while self.actions or coordinator.next_deadline() is not None:
            deadline = coordinator.next_deadline()
            next_action = self.actions[0][0] if self.actions else None
            if deadline is not None and (next_action is None or deadline < next_action):
                self.now = max(self.now, deadline)
                if self.now > end:
                    break
                self.calls.append((self.now, None, None))
                self.outputs(coordinator.advance(self.now))
                continue
            t, _, action, arg = heapq.heappop(self.actions)
            self.now = max(self.now, t)
            if self.now > end:
                break
            action(self.now, arg)

    def replay_cpu_s(self) -> float:
        """CPU seconds of a fresh coordinator on the same calls (deterministic: same answers)."""
        coordinator = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=3_000))
        coordinator.consumer.coordinator.config = self.coordinator.consumer.coordinator.config
        coordinator.consumer.use_topics(dict(self.topics))
        handle, advance = coordinator.handle, coordinator.advance
        start = time.process_time()
        for now_ms, ctx, request in self.calls:
            if ctx is None:
                advance(now_ms)
            else:
                handle(now_ms, ctx, request)
        cpu_s = time.process_time() - start
        ran = self.coordinator.consumer.coordinator.groups["bench"]
        replayed = coordinator.consumer.coordinator.groups["bench"]
        if (replayed.group_epoch, replayed.target) != (ran.group_epoch, ran.target):
            raise AssertionError("the replay diverged from the run")
        return cpu_s


def _run_and_replay(run: GroupRun | UpgradeRun) -> tuple[float, float]:
    """Wall seconds of the driven run, then CPU seconds of the coordinator alone on its calls."""
    start = time.perf_counter()
    run.run()
    return time.perf_counter() - start, run.replay_cpu_s()


def upgrade_rows(members: int) -> list[tuple[Any, ...]]:
    rows = []
    for static in (True, False):
        run = UpgradeRun(members, static)
        total_s, cpu_s = _run_and_replay(run)
        requests = sum(1 for _, ctx, _ in run.calls if ctx is not None)
        group = run.coordinator.consumer.coordinator.groups["bench"]
        classic = sum(1 for m in group.members.values() if m.classic is not None)
        errors = ", ".join(f"{ErrorCode(code).name} {n}" for code, n in sorted(run.errors.items()))
        rows.append(
            (
                "classic -> consumer, " + ("static" if static else "dynamic"),
                members,
                requests,
                requests / cpu_s,
                total_s,
                group.group_epoch,
                f"{group.state.value}, {classic} classic left",
                errors or "-",
            )
        )
    return rows


def requests_rows(members: int) -> list[tuple[Any, ...]]:
    rows = []
    for dynamic in (False, True):
        run = GroupRun(members, dynamic)
        total_s, cpu_s = _run_and_replay(run)
        sample = HeartbeatRequest("bench", "m-1-0", 3, owned={})
        baseline_start = time.process_time()
        for _ in range(run.calls):
            heartbeat_to_kio(sample)
        baseline_s = time.process_time() - baseline_start
        group = run.coordinator.groups["bench"]
        rows.append(
            (
                "dynamic (-1, rejoin)" if dynamic else "static (-2, new id)",
                members,
                run.calls,
                run.calls / cpu_s,
                run.calls / run.inside_s,
                run.calls / baseline_s,
                total_s,
                group.group_epoch,
                group.state.value,
            )
        )
    return rows


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}" if value > 100 else f"{value:.2f}"
    return str(value)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--members", type=int, default=1000)
    parser.add_argument("--sizes", default="100,1000,10000")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--parts", default="assign,restart,upgrade", help="tables to print: assign,restart,upgrade"
    )
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    console = Console(width=160)
    console.print(f"load average at start: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    table = Table(
        title="one full target assignment (best CPU ms of --repeats), 100 topics, 10 partitions per member"
    )
    columns = ("members", "partitions", "uniform fresh ms", "uniform +1 member ms", "range ms")
    for column in (*columns, "baseline round-robin ms", "Kafka JMH uniform ms (JVM)"):
        table.add_column(column, justify="right")
    for size in args.sizes.split(",") if "assign" in parts else ():
        row = _assignment_row(int(size), args.repeats)
        table.add_row(*(f"{v:.2f}" if isinstance(v, float) else ("-" if v is None else str(v)) for v in row))
    console.print(table)
    table = Table(title=f"{args.members}-member consumer group: join, settle, rolling restart (virtual time)")
    for column in ("restart", "members", "heartbeats", "heartbeats/CPU s", "heartbeats/wall s",
                   "baseline kio requests/CPU s", "wall s", "final group epoch", "final state"):  # fmt: skip
        table.add_column(column, justify="right")
    for row in requests_rows(args.members) if "restart" in parts else ():
        table.add_row(
            *(
                f"{v:,.0f}"
                if isinstance(v, float) and v > 100
                else (f"{v:.2f}" if isinstance(v, float) else str(v))
                for v in row
            )
        )
    console.print(table)
    table = Table(title=f"{args.members}-member classic group upgraded pod by pod to the consumer protocol")
    for column in ("upgrade", "members", "requests", "requests/CPU s", "wall s", "final group epoch",
                   "final state", "errors the consumer members got"):  # fmt: skip
        table.add_column(column, justify="right")
    for row in upgrade_rows(args.members) if "upgrade" in parts else ():
        table.add_row(*(_cell(v) for v in row))
    console.print(table)
    console.print(f"load average at end: {' '.join(f'{v:.1f}' for v in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
