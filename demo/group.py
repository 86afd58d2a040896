"""The demo group: a mixed consumer group of real clients, with one static member bounced.

`group-replay demo` (demo.cli) records it through the proxy; tests run it against brokers directly.

The group-running part, `run_group(bootstrap, ...)`, takes only a bootstrap address, so the same
group can be pointed at a broker, at the proxy in front of one, or at the reference coordinator.
What each member saw (per phase: generation, member id, leader where known, assignment) comes
back as data; `render_table` turns it into the rich table the command prints.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from demo.clients import ClientError, ClientKind, ConsumerProcess, ConsumerSpec, start_consumer
from harness.maven import ProgressCallback

DEFAULT_PARTITIONS = 6
DEFAULT_SESSION_TIMEOUT_MS = 6000
DEFAULT_SETTLE_TIMEOUT_MS = 90_000


@dataclass(frozen=True)
class MemberPlan:
    """One member of the demo group. `name` is its group.instance.id when `static`."""

    name: str
    kind: ClientKind
    static: bool
    java_client_version: str = "3.9.2"


DEFAULT_MEMBERS: tuple[MemberPlan, ...] = (
    MemberPlan("static-confluent", ClientKind.CONFLUENT, True),
    MemberPlan("static-java-3.9", ClientKind.JAVA, True, "3.9.2"),
    MemberPlan("static-kafka-python", ClientKind.KAFKA_PYTHON, True),
    MemberPlan("dynamic-aiokafka", ClientKind.AIOKAFKA, False),
    MemberPlan("dynamic-java-2.4", ClientKind.JAVA, False, "2.4.1"),
)


@dataclass(frozen=True)
class Observation:
    """What one member reported at the end of one phase of the run."""

    phase: str
    member: str
    kind: str
    static: bool
    generation_id: int | None
    member_id: str | None
    is_leader: bool | None
    assignment: tuple[str, ...]
    rebalances: int  # "assigned" callbacks this process has seen so far


@dataclass(frozen=True)
class GroupRun:
    bootstrap: str
    group_id: str
    topic: str
    bounced: str | None
    observations: tuple[Observation, ...]


def _spec(
    plan: MemberPlan, bootstrap: str, group_id: str, topic: str, session_timeout_ms: int
) -> ConsumerSpec:
    return ConsumerSpec(
        kind=plan.kind,
        bootstrap=bootstrap,
        group_id=group_id,
        topics=(topic,),
        group_instance_id=plan.name if plan.static else None,
        client_id=plan.name,
        session_timeout_ms=session_timeout_ms,
        java_client_version=plan.java_client_version,
    )


def _current(process: ConsumerProcess) -> tuple[str, ...] | None:
    last = process.last_assignment()
    return None if last is None else last.partitions


def _group_view(members: dict[str, ConsumerProcess]) -> str:
    """Each member's last assignment, for an error: which member holds what when one waits."""
    return "last assignments:\n" + "\n".join(f"  {name}: {_current(p)}" for name, p in members.items())


def wait_settled(
    members: dict[str, ConsumerProcess], partitions: set[str], timeout_ms: int, quiet_ms: int = 1500
) -> None:
    """Until every partition is owned by exactly one member and nothing changed for `quiet_ms`."""
    deadline = time.monotonic() + timeout_ms / 1000
    stable_since: float | None = None
    last_view: dict[str, tuple[str, ...] | None] = {}
    while time.monotonic() < deadline:
        for name, process in members.items():
            if process.process.poll() is not None:
                raise ClientError(f"member {name} exited early\n{process.describe()}")
        view = {name: _current(p) for name, p in members.items()}
        owned = [tp for parts in view.values() if parts for tp in parts]
        complete = all(parts is not None for parts in view.values()) and sorted(owned) == sorted(partitions)
        now = time.monotonic()
        if complete and view == last_view:
            stable_since = stable_since or now
            if (now - stable_since) * 1000 >= quiet_ms:
                return
        else:
            stable_since = None
        last_view = view
        time.sleep(0.2)
    raise ClientError(f"group did not settle within {timeout_ms} ms; {_group_view(members)}")


def _observe(
    phase: str, plans: dict[str, MemberPlan], members: dict[str, ConsumerProcess]
) -> list[Observation]:
    out = []
    for name, process in members.items():
        last = process.last_assignment()
        plan = plans[name]
        out.append(
            Observation(
                phase=phase,
                member=name,
                kind=plan.kind.value
                + (f" {plan.java_client_version}" if plan.kind is ClientKind.JAVA else ""),
                static=plan.static,
                generation_id=None if last is None else last.generation_id,
                member_id=None if last is None else last.member_id,
                is_leader=None if last is None else last.is_leader,
                assignment=() if last is None else last.partitions,
                rebalances=len(process.assignments()),
            )
        )
    return out


def run_group(
    bootstrap: str,
    topic: str,
    partitions: int,
    *,
    group_id: str | None = None,
    members: Sequence[MemberPlan] = DEFAULT_MEMBERS,
    bounce: str | None = "static-confluent",
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
    settle_timeout_ms: int = DEFAULT_SETTLE_TIMEOUT_MS,
    progress: ProgressCallback | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> GroupRun:
    """Run the group against `bootstrap` (broker or proxy): join, settle, bounce `bounce`, settle, stop.

    The topic must exist with `partitions` partitions. Every consumer process is stopped before
    this returns, whatever happens.
    """
    group_id = group_id or f"demo-{int(time.time() * 1000)}"
    plans = {plan.name: plan for plan in members}
    if bounce is not None and (bounce not in plans or not plans[bounce].static):
        raise ValueError(f"bounce must name a static member, got {bounce!r}")
    wanted = {f"{topic}-{p}" for p in range(partitions)}
    say = on_phase or (lambda _msg: None)
    running: dict[str, ConsumerProcess] = {}
    observations: list[Observation] = []
    try:
        say(f"starting {len(plans)} members")
        for plan in members:
            running[plan.name] = start_consumer(
                _spec(plan, bootstrap, group_id, topic, session_timeout_ms), progress
            )
        say("waiting for the group to settle")
        wait_settled(running, wanted, settle_timeout_ms)
        observations += _observe("joined", plans, running)
        if bounce is not None:
            say(f"bouncing static member {bounce}")
            running[bounce].stop()  # static: closes without LeaveGroup, so no rebalance is due
            running[bounce] = start_consumer(
                _spec(plans[bounce], bootstrap, group_id, topic, session_timeout_ms), progress
            )
            try:
                running[bounce].wait_for(
                    lambda e: e.event == "assigned" and bool(e.partitions), settle_timeout_ms
                )
            except ClientError as exc:
                raise ClientError(f"{exc}\n{_group_view(running)}") from exc
            wait_settled(running, wanted, settle_timeout_ms)
            observations += _observe("after bounce", plans, running)
    finally:
        for process in running.values():
            process.stop()
    return GroupRun(bootstrap, group_id, topic, bounce, tuple(observations))


def render_table(run: GroupRun) -> object:
    from rich.table import Table

    bounced = f"; bounced {run.bounced}" if run.bounced else ""
    table = Table(title=f"group {run.group_id} on {run.bootstrap} (topic {run.topic}{bounced})")
    for column in (
        "phase",
        "member",
        "client",
        "static",
        "generation",
        "member id",
        "leader",
        "rebal.",
        "assignment",
    ):
        table.add_column(column)
    for obs in run.observations:
        table.add_row(
            obs.phase,
            obs.member,
            obs.kind,
            "yes" if obs.static else "no",
            "?" if obs.generation_id is None else str(obs.generation_id),
            "?" if obs.member_id is None else obs.member_id[-8:],
            "?" if obs.is_leader is None else ("yes" if obs.is_leader else "no"),
            str(obs.rebalances),
            ", ".join(tp.rsplit("-", 1)[1] for tp in obs.assignment) or "-",
        )
    return table
