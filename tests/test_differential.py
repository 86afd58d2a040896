"""Differential tests: each scripted scenario against the reference coordinator and against real
Kafka (3.9 with the Scala coordinator, 3.9 with group.coordinator.new.enable=true, newest 4.x)
must give the same client-observed event sequence, member ids and timestamps aside.

Where Kafka versions disagree with each other the reference run with the matching
`KafkaBehaviour` is what is compared; found so far (each also a unit test in test_coordinator.py):
- OffsetCommit v9+ with a generation to a missing group: GROUP_ID_NOT_FOUND on the new
  coordinator (3.9 new and 4.x), ILLEGAL_GENERATION on the Scala one (scenario
  commit-to-missing-group, checked against all three brokers);
- DescribeGroups outside Stable: the new coordinator keeps each member's assignment, Scala blanks
  it (batch-leave-static's Describe while PreparingRebalance, checked against all three brokers);
- a member removed during group.initial.rebalance.delay.ms completes the join at once on the new
  coordinator, only at the delay's end on Scala (not observable without timing: unit test only).
`EXPECTED_DIFFERENCES` is for differences between a target and its matching reference behaviour
that are understood but not modelled; it is empty.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from harness.lines import KAFKA_4X, KAFKA_39
from replay.coordinator import KafkaBehaviour
from replay.driver import UnsupportedByTarget, comparable, run_scenario
from replay.run import RunResult
from tests.support.differential import SCENARIOS


@dataclass(frozen=True)
class Target:
    name: str
    kafka_version: str
    new_coordinator: bool | None
    behaviour: KafkaBehaviour


TARGETS = [
    Target("kafka-3.9-scala", KAFKA_39, False, KafkaBehaviour.SCALA_3_9),
    Target("kafka-3.9-new", KAFKA_39, True, KafkaBehaviour.NEW_COORDINATOR),
    Target("kafka-4x", KAFKA_4X, None, KafkaBehaviour.NEW_COORDINATOR),
]

Rows = list[tuple[Any, ...]]
# (target name, scenario) -> (why, transform of the reference rows into what that Kafka gives)
EXPECTED_DIFFERENCES: dict[tuple[str, str], tuple[str, Callable[[Rows], Rows]]] = {}


def _serve(behaviour: KafkaBehaviour) -> tuple[subprocess.Popen[str], str]:
    process = subprocess.Popen(
        [
            sys.executable, "-m", "group_replay", "coordinator", "serve", "--port", "0",
            "--behaviour", behaviour.value,
            "--group-min-session-timeout-ms", "1000",  # as the harness brokers
            "--group-initial-rebalance-delay-ms", "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.kill()
        raise RuntimeError("the reference coordinator did not start")
    return process, f"127.0.0.1:{json.loads(line)['port']}"


@pytest.fixture(scope="module")
def reference() -> Iterator[Callable[[KafkaBehaviour, str], RunResult]]:
    """`reference(behaviour, scenario)`: the scenario's run on the served reference coordinator
    (one server per behaviour, one run per scenario, cached for every broker target)."""
    servers: dict[KafkaBehaviour, tuple[subprocess.Popen[str], str]] = {}
    results: dict[tuple[KafkaBehaviour, str], RunResult] = {}

    def get(behaviour: KafkaBehaviour, scenario: str) -> RunResult:
        if (behaviour, scenario) not in results:
            if behaviour not in servers:
                servers[behaviour] = _serve(behaviour)
            bootstrap = servers[behaviour][1]
            results[(behaviour, scenario)] = asyncio.run(
                run_scenario(SCENARIOS[scenario], bootstrap, f"reference-{behaviour.value}")
            )
        return results[(behaviour, scenario)]

    yield get
    for process, _ in servers.values():
        process.terminate()
        process.wait(timeout=10)


def _show(rows: Rows) -> str:
    return "\n".join(f"  {i:2d} {row}" for i, row in enumerate(rows))


@pytest.mark.slow
@pytest.mark.parametrize("scenario", ["static-rolling-bounce", "member-id-required", "batch-leave-static"])
def test_reference_runs_are_reproducible(
    reference: Callable[[KafkaBehaviour, str], RunResult], scenario: str
) -> None:
    """Noise check (Diffy): the same scenario twice on the reference gives the same rows."""
    first = comparable(reference(KafkaBehaviour.SCALA_3_9, scenario).events)
    second = comparable(reference(KafkaBehaviour.NEW_COORDINATOR, scenario).events)
    assert first == second
    assert any(row[0] == "generation_completed" for row in first)


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "scenario"),
    [(t, s) for t in TARGETS for s in SCENARIOS],  # target-major: each broker starts once
    ids=[f"{t.name}-{s}" for t in TARGETS for s in SCENARIOS],
)
def test_reference_agrees_with_kafka(
    broker_factory: Any, reference: Callable[[KafkaBehaviour, str], RunResult], target: Target, scenario: str
) -> None:
    broker = broker_factory(target.kafka_version, new_coordinator=target.new_coordinator)
    try:
        real = asyncio.run(run_scenario(SCENARIOS[scenario], broker.bootstrap, target.name))
    except UnsupportedByTarget as exc:
        pytest.skip(f"{target.name}: {exc}")
    expected = comparable(reference(target.behaviour, scenario).events, SCENARIOS[scenario].compare_leader)
    difference = EXPECTED_DIFFERENCES.get((target.name, scenario))
    if difference is not None:
        expected = difference[1](expected)
    got = comparable(real.events, SCENARIOS[scenario].compare_leader)
    assert got == expected, f"{target.name} vs reference\nkafka:\n{_show(got)}\nreference:\n{_show(expected)}"
    assert real.describes == reference(target.behaviour, scenario).describes
