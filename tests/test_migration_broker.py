"""The classic <-> consumer protocol migration replayed against a real Kafka 4.3.1 broker (Maven
jars, started by the harness with each scenario's group.consumer.migration.policy): the same
members (replay.member.ClassicMember, then replay.consumer_member.ConsumerMember after their
step) over TCP, in scaled real time, meeting the same expectations as against the reference,
with the same joins per member, conversions and refusals. Every built-in migration scenario but
the hour-long mixed steady state; and against Kafka 3.9, which serves no KIP-848 group, a
`not_run` row."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest

from harness.broker import Broker
from harness.lines import KAFKA_4X, KAFKA_39
from proxy.capture.reader import read_capture
from replay.events import EventName
from replay.live import replay_live
from replay.migration import refused_members
from replay.plan import ReplayPlan, build_plan
from replay.run import RunResult, replay_reference
from replay.scenario import load_builtin
from tests.conftest import batch_brokers
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


def _joins(events: tuple) -> dict[str, list[str | None]]:  # type: ignore[type-arg]
    """member_key -> the protocol of each successful join, in order."""
    joins: dict[str, list[str | None]] = {}
    for e in events:
        if e.event == EventName.MEMBER_JOINED:
            joins.setdefault(e.member_key, []).append(e.protocol)
    return {k: [p for i, p in enumerate(v) if i == 0 or v[i - 1] != p] for k, v in joins.items()}


def _trace(events: tuple) -> str:  # type: ignore[type-arg]
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
_TEST = "test_migration_on_kafka_43_meets_the_expectations_the_reference_meets"


def _selected(session: pytest.Session) -> list[str]:
    """The scenario names this session runs (the parametrized items selected and not skipped)."""
    names = []
    for item in session.items:
        if item.originalname != _TEST or not isinstance(item, pytest.Function):
            continue
        skipped = any(m.args and m.args[0] for m in item.iter_markers("skipif"))
        if not skipped:
            names.append(item.callspec.params["name"])
    return names


@pytest.fixture(scope="module")
def live_runs(
    broker_factory: Callable[..., Broker], request: pytest.FixtureRequest
) -> dict[str, tuple[ReplayPlan, RunResult]]:
    """scenario name -> (its plan, its live run), the selected scenarios run concurrently.

    Each run is about a minute of scaled real time spent waiting on the broker's timers, so the
    runs of one policy share that policy's broker (each in its own renamed group) and go
    together; the policy is a static broker config (Kafka 4.3.1 reads
    `group.consumer.migration.policy` once into GroupCoordinatorConfig; it is not in
    GroupCoordinatorConfig.RECONFIGURABLE_CONFIGS, so IncrementalAlterConfigs cannot change it),
    hence one broker per policy, as many policies at once as the factory keeps brokers running
    (tests.conftest.batch_brokers(): two policies at a time by default, beside the workhorse
    brokers the factory keeps)."""
    by_policy: dict[str, list[str]] = {}
    for name in _selected(request.session):
        by_policy.setdefault(load_builtin(name).broker.migration_policy.value, []).append(name)
    limit = batch_brokers()
    policies = list(by_policy)
    results: dict[str, tuple[ReplayPlan, RunResult]] = {}
    for start in range(0, len(policies), limit):
        brokers = {
            policy: broker_factory(KAFKA_4X, extra_config={"group.consumer.migration.policy": policy})
            for policy in policies[start : start + limit]
        }
        runs = [(name, broker) for policy, broker in brokers.items() for name in by_policy[policy]]
        with ThreadPoolExecutor(max_workers=len(runs)) as pool:
            futures = {name: pool.submit(_live, name, broker.bootstrap) for name, broker in runs}
            results.update({name: future.result() for name, future in futures.items()})
    return results


def _live(name: str, bootstrap: str) -> tuple[ReplayPlan, RunResult]:
    plan = _fresh_group(build_plan(read_capture(CAPTURE), CAPTURE.stem), uuid.uuid4().hex[:8])
    return plan, replay_live(
        plan, load_builtin(name), address=bootstrap, run=f"broker-{KAFKA_4X}", speed=SPEED
    )


@pytest.mark.parametrize("name", MIGRATION_SCENARIOS)
def test_migration_on_kafka_43_meets_the_expectations_the_reference_meets(
    live_runs: dict[str, tuple[ReplayPlan, RunResult]], name: str
) -> None:
    assert KAFKA_4X.startswith("4.")
    scenario = load_builtin(name)
    plan, live = live_runs[name]
    reference = replay_reference(plan, scenario)
    assert live.not_run is None and live.failures == (), (live.failures, _trace(live.events))
    assert reference.failures == ()
    # the same migration: every member classic, then consumer; converted once; nobody refused
    assert _joins(live.events) == _joins(reference.events)
    converted = [e.detail for e in live.events if e.event == EventName.GROUP_CONVERTED]
    assert converted == [e.detail for e in reference.events if e.event == EventName.GROUP_CONVERTED]
    assert refused_members(live.events) == refused_members(reference.events)
    # the broker's assignments are named by topic (the ids come from its Metadata)
    received = {
        tp for e in live.events if e.event == EventName.ASSIGNMENT_RECEIVED for tp in e.assignment or ()
    }
    assert received == {f"corpus-java-431-static-bounce-{p}" for p in range(3)}


def test_a_migration_scenario_against_kafka_39_is_a_not_run_row(broker_factory) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    plan = build_plan(read_capture(CAPTURE), CAPTURE.stem)
    result = replay_live(plan, load_builtin("classic-to-consumer-rolling-upgrade"), address=broker.bootstrap)
    assert result.not_run is not None and "ConsumerGroupHeartbeat" in result.not_run
    assert [e.event for e in result.events] == ["not_run"]
