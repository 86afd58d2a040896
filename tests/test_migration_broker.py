"""The classic <-> consumer protocol migration replayed against a real Kafka 4.3.1 broker (Maven
jars, started by the harness with each scenario's group.consumer.migration.policy): the same
members (replay.member.ClassicMember, then replay.consumer_member.ConsumerMember after their
step) over TCP, in scaled real time, meeting the same expectations as against the reference,
with the same joins per member, conversions and refusals. Every built-in migration scenario but
the hour-long mixed steady state; and against Kafka 3.9, which serves no KIP-848 group, a
`not_run` row.

The scenarios and the live run are here; the Kafka 4.3.1 test itself
(`test_migration_on_kafka_43_meets_the_expectations_the_reference_meets`) runs in
tests/test_consumer_group_migration_differential.py, on the policy brokers the differential's
scripts use (one broker per policy for both: docs/ci.md, "keeping its budget")."""

from __future__ import annotations

import dataclasses
import os
import uuid

import pytest

from harness.lines import KAFKA_4X, KAFKA_39
from proxy.capture.reader import read_capture
from replay.events import EventName
from replay.live import replay_live
from replay.plan import ReplayPlan, build_plan
from replay.run import RunResult
from replay.scenario import load_builtin
from tests.test_migration_scenarios import CAPTURE

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SPEED = 4.0


def _fresh_group(plan: ReplayPlan, suffix: str) -> ReplayPlan:
    """The plan with its group renamed: runs against one broker must not meet (a static member
    that left with epoch -2 stays in its consumer group for the session timeout)."""
    renamed = {g: f"{g}-{suffix}" for g in plan.partitions}
    scripts = tuple(
        dataclasses.replace(
            s,
            group_id=renamed[s.group_id],
            join_template=dataclasses.replace(s.join_template, group_id=renamed[s.group_id]),
        )
        for s in plan.scripts
    )
    partitions = {renamed[g]: layout for g, layout in plan.partitions.items()}
    return dataclasses.replace(plan, scripts=scripts, partitions=partitions)


def joins(events: tuple) -> dict[str, list[str | None]]:  # type: ignore[type-arg]
    """member_key -> the protocol of each successful join, in order."""
    joins: dict[str, list[str | None]] = {}
    for e in events:
        if e.event == EventName.MEMBER_JOINED:
            joins.setdefault(e.member_key, []).append(e.protocol)
    return {k: [p for i, p in enumerate(v) if i == 0 or v[i - 1] != p] for k, v in joins.items()}


def trace(events: tuple) -> str:  # type: ignore[type-arg]
    """The run's membership and assignment events, one a line: what to read when a live run
    misses an expectation (which member joined when, holding what)."""
    kinds = {
        EventName.MEMBER_JOINED,
        EventName.MEMBER_LEFT,
        EventName.ASSIGNMENT_RECEIVED,
        EventName.ASSIGNMENT_REVOKED,
        EventName.GROUP_CONVERTED,
        EventName.REQUEST_FAILED,
    }
    return "\n".join(
        f"{e.ts_ms:>7} {e.event} {e.member_key} {e.protocol} {e.group_type} err={e.error_code} "
        f"{e.assignment or ''}"
        for e in events
        if e.event in kinds
    )


# Every run against the broker is ~1 minute of live replay (the runs go concurrently: `live_runs`).
# The default suite takes one scenario per
# migration policy and direction (upgrade, downgrade, each refusal, the kept consumer group); the
# variants of the same path (dynamic/static x range/cooperative, offline, shared instance id) run
# with GROUP_REPLAY_FULL_MIGRATION=1. The reference replays all of them in
# tests/test_migration_scenarios.py.
FULL_MIGRATION = os.environ.get("GROUP_REPLAY_FULL_MIGRATION") == "1"
_VARIANT = pytest.mark.skipif(
    not FULL_MIGRATION,
    reason="a variant of a path the default suite runs; GROUP_REPLAY_FULL_MIGRATION=1 runs it",
)


MIGRATION_SCENARIOS = [
    "classic-to-consumer-rolling-upgrade-static",
    pytest.param("classic-to-consumer-rolling-upgrade", marks=_VARIANT),
    "consumer-to-classic-rolling-downgrade",
    pytest.param("classic-to-consumer-offline-migration", marks=_VARIANT),
    "classic-to-consumer-upgrade-refused-custom-assignor",
    "migration-policy-disabled-refuses-upgrade",
    "migration-policy-upgrade-keeps-consumer-group",
    "migration-policy-downgrade-refuses-upgrade",
    pytest.param("instance-id-shared-across-protocols", marks=_VARIANT),
    pytest.param("classic-to-consumer-rolling-upgrade-cooperative", marks=_VARIANT),
    pytest.param("classic-to-consumer-rolling-upgrade-static-cooperative", marks=_VARIANT),
]


def live_replay(name: str, bootstrap: str) -> tuple[ReplayPlan, RunResult]:
    """The capture replayed live under scenario `name` against `bootstrap`, in a fresh group."""
    plan = _fresh_group(build_plan(read_capture(CAPTURE), CAPTURE.stem), uuid.uuid4().hex[:8])
    return plan, replay_live(
        plan, load_builtin(name), address=bootstrap, run=f"broker-{KAFKA_4X}", speed=SPEED
    )


def test_a_migration_scenario_against_kafka_39_is_a_not_run_row(broker_factory) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    plan = build_plan(read_capture(CAPTURE), CAPTURE.stem)
    result = replay_live(plan, load_builtin("classic-to-consumer-rolling-upgrade"), address=broker.bootstrap)
    assert result.not_run is not None and "ConsumerGroupHeartbeat" in result.not_run
    assert [e.event for e in result.events] == ["not_run"]
