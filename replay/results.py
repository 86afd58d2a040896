"""What a run gives: its `RunResult`, and its expectations (`expect:` in a scenario) checked
against the events it produced."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from kio.schema.errors import ErrorCode

from replay import migration
from replay.events import EventName, RebalanceEvent
from replay.plan import ReplayPlan
from replay.scenario import Scenario


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run of one scenario: its events, how many requests it sent, unmet expectations, and
    (differential driver) what DescribeGroups said. `not_run` says why a run could not be carried
    out (its one event is then a `not_run` row)."""

    run: str
    events: tuple[RebalanceEvent, ...]
    rpcs: int = 0
    simulated_ms: int = 0
    failures: tuple[str, ...] = ()
    describes: tuple[tuple[Any, ...], ...] = ()
    not_run: str | None = None
    steps: tuple[migration.StepStats, ...] = ()  # a protocol migration's view, step by step


def not_run_result(plan: ReplayPlan, scenario: Scenario, run: str, reason: str) -> RunResult:
    """A run that could not be carried out: one `not_run` row per group (AGREED #1), never an absence."""
    groups = sorted({script.group_id for script in plan.scripts})
    events = tuple(
        RebalanceEvent.not_run(plan.session_id, scenario.name, run, group_id, reason) for group_id in groups
    )
    return RunResult(run, events, not_run=reason)


def check_expectations(
    scenario: Scenario, events: Iterable[RebalanceEvent], window_start_ms: int, bounced: Sequence[str] = ()
) -> list[str]:
    """Unmet expectations. Member globs in `fenced`/`expired` match the group.instance.id a member
    was fenced or expired under (fencing is about instance ids, KIP-345), else its member_key."""
    rows = list(events)
    in_window = [e for e in rows if e.ts_ms >= window_start_ms]
    expect = scenario.expect
    failures: list[str] = []
    if expect.rebalances is not None:
        seen = [e.member_key for e in in_window if e.event == EventName.REBALANCE_STARTED]
        why = expect.rebalances.check(seen)
        if why:
            failures.append(f"rebalances: {why}")
    for label, expectation, name in (
        ("fenced", expect.fenced, EventName.MEMBER_FENCED),
        ("expired", expect.expired, EventName.MEMBER_EXPIRED),
    ):
        if expectation is not None:
            why = expectation.check([e.group_instance_id or e.member_key for e in rows if e.event == name])
            if why:
                failures.append(f"{label}: {why}")
    if expect.leader_skips_assignment is not None:
        skipped = any(
            e.event == EventName.MEMBER_JOINED and e.is_leader and e.skip_assignment for e in in_window
        )
        if skipped != expect.leader_skips_assignment:
            failures.append(
                f"leader_skips_assignment: expected {str(expect.leader_skips_assignment).lower()}, "
                f"saw {str(skipped).lower()}"
            )
    codes = {e.error_code for e in rows}
    for code in expect.errors:
        if code not in codes:
            failures.append(f"errors: expected error code {code} ({ErrorCode(code).name}), not seen")
    interval = scenario.rolling.interval_ms if scenario.rolling is not None else None
    return failures + migration.check(expect.migration, rows, window_start_ms, interval, bounced)


__all__ = ["RunResult", "check_expectations", "not_run_result"]
