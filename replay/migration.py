"""The classic -> consumer protocol migration in scenarios: its vocabulary, its YAML, its checks.

A scenario rehearses `group.protocol=consumer` flipped pod by pod (or back) on a recorded group:
which members speak which protocol from the start and after their bounce (`protocol:` in a
member rule and in `rolling.after`), which server assignor consumer-protocol members ask for
(`server_assignor:`, the Java consumer's group.remote.assignor), and the broker whose rules
apply (`broker: {build, migration_policy}`: the Kafka build's consumer-group behaviour and
group.consumer.migration.policy). What a platform team wants to know before the day is what
`expect:` can state and `check` verifies from the run's events (events format 2):

    group_type: classic | consumer         the group's type at the end of the run
    refused: int | {member_key glob: ERROR_NAME | code}
                                           members stopped for good by an error (the Java
                                           consumer's fatal reactions), exactly these
    rejoins_per_step: int | {min, max}     successful classic JoinGroups of each classic member
                                           in each step, the member bounced in it left out (the
                                           rebalance-storm risk of eager assignors)
    partitions_moved_per_step: int | {min, max}   partitions received by some member, per step

A step is one bounce of the rolling restart, from its start to the next one's (the last runs
to the end); without a rolling restart the run after the group settled is one step.

Kafka's tests/kafkatest/tests/client/consumer_protocol_migration_test.py is what the built-in
migration scenarios mirror (replay/scenarios/*protocol*.yaml).
"""

from __future__ import annotations

import fnmatch
import itertools
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from functools import partial
from typing import Any

import yaml
from kio.schema.errors import ErrorCode

from proxy.yaml_reader import YamlReader
from replay.coordinator.consumer import ConsumerGroupBehaviour, ConsumerGroupConfig
from replay.coordinator.consumer.group import MigrationPolicy
from replay.events import EventName, RebalanceEvent
from replay.group_member import Reaction, reaction_to

MAX_BOUND = 1_000_000
ASSIGNOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class GroupProtocol(StrEnum):
    """group.protocol: what a member speaks (and what a group is)."""

    CLASSIC = "classic"  # JoinGroup / SyncGroup / Heartbeat / LeaveGroup
    CONSUMER = "consumer"  # ConsumerGroupHeartbeat (KIP-848)


class BrokerBuild(StrEnum):
    """The Kafka builds whose consumer-group rules the reference knows (ConsumerGroupBehaviour)."""

    KAFKA_4_0 = "4.0"
    KAFKA_4_3 = "4.3"

    @property
    def behaviour(self) -> ConsumerGroupBehaviour:
        return ConsumerGroupBehaviour(self.value)


@dataclass(frozen=True, slots=True)
class BrokerRules:
    """`broker:` of a scenario. Kafka's default migration policy is bidirectional
    (GroupCoordinatorConfig.CONSUMER_GROUP_MIGRATION_POLICY_DEFAULT); `build` None: 4.3."""

    build: BrokerBuild | None = None
    migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL

    def consumer_config(self) -> ConsumerGroupConfig:
        behaviour = (self.build or BrokerBuild.KAFKA_4_3).behaviour
        return ConsumerGroupConfig(behaviour=behaviour, migration_policy=self.migration_policy)


@dataclass(frozen=True, slots=True)
class Bound:
    """An exact value or a range."""

    minimum: int | None = None
    maximum: int | None = None

    def check(self, value: int) -> str | None:
        if self.minimum is not None and value < self.minimum:
            return f"expected at least {self.minimum}, saw {value}"
        if self.maximum is not None and value > self.maximum:
            return f"expected at most {self.maximum}, saw {value}"
        return None


@dataclass(frozen=True, slots=True)
class Refused:
    """Which members must be refused for good: a count, or member_key globs with their error."""

    count: int | None = None
    members: tuple[tuple[str, int], ...] = ()

    def check(self, seen: dict[str, int]) -> str | None:
        shown = {k: ErrorCode(c).name for k, c in sorted(seen.items())}
        if self.count is not None:
            return None if len(seen) == self.count else f"expected {self.count}, saw {len(seen)}: {shown}"
        unmatched = [k for k in seen if not any(fnmatch.fnmatchcase(k, g) for g, _ in self.members)]
        wrong = [
            f"{glob}: {ErrorCode(code).name}"
            for glob, code in self.members
            if not any(fnmatch.fnmatchcase(k, glob) and c == code for k, c in seen.items())
        ]
        if unmatched or wrong:
            return f"expected {dict((g, ErrorCode(c).name) for g, c in self.members)}, saw {shown}"
        return None


@dataclass(frozen=True, slots=True)
class MigrationExpectations:
    """The migration keys of `expect:` (the module docstring reads each); None: not checked."""

    group_type: GroupProtocol | None = None
    refused: Refused | None = None
    rejoins_per_step: Bound | None = None
    partitions_moved_per_step: Bound | None = None


# ---------------------------------------------------------------------------------------------
# YAML (a scenario's reader: every error names file, line and field)


def read_protocol(reader: YamlReader, node: yaml.Node, path: str) -> GroupProtocol:
    return reader.choice(node, path, GroupProtocol)


def read_server_assignor(reader: YamlReader, node: yaml.Node, path: str) -> str:
    """An assignor name; one the broker does not list in group.consumer.assignors (uniform,
    range) is refused with UNSUPPORTED_ASSIGNOR, which a scenario may want to show."""
    name = reader.string(node, path)
    if not ASSIGNOR_NAME.fullmatch(name):
        raise reader.fail(node, path, "letters, digits and . _ - only (at most 100)")
    return name


CLASSIC_ASSIGNORS = ("range", "roundrobin", "sticky", "cooperative-sticky")  # replay.assignors


def read_assignors(reader: YamlReader, node: yaml.Node, path: str) -> tuple[str, ...]:
    """partition.assignment.strategy of a classic member, in preference order (the assignors
    replay's classic leader runs); only cooperative-sticky everywhere makes it COOPERATIVE."""
    names = tuple(reader.string(n, f"{path}[{i}]") for i, n in enumerate(reader.sequence(node, path)))
    if not names:
        raise reader.fail(node, path, "give at least one assignor")
    for i, name in enumerate(names):
        if name not in CLASSIC_ASSIGNORS:
            raise reader.fail(node, f"{path}[{i}]", f"{name!r} is not one of {', '.join(CLASSIC_ASSIGNORS)}")
    return names


def read_user_data(reader: YamlReader, node: yaml.Node, path: str) -> bytes:
    """The userData a custom classic assignor puts in every assignment (UTF-8 text): Kafka
    refuses to upgrade such a group online (GROUP_ID_NOT_FOUND, ConsumerGroup.fromClassicGroup)."""
    text = reader.string(node, path, max_chars=1000)
    if not text:
        raise reader.fail(node, path, "give some text (empty userData is no custom data)")
    return text.encode("utf-8")


def read_broker(reader: YamlReader, node: yaml.Node) -> BrokerRules:
    fields = reader.mapping(node, "broker", {"build", "migration_policy"})
    build = None
    if "build" in fields:
        text = str(reader.scalar(fields["build"], "broker.build"))
        major_minor = ".".join(text.split(".")[:2])
        if major_minor not in {b.value for b in BrokerBuild} or not re.fullmatch(r"\d+\.\d+(\.\d+)?", text):
            known = ", ".join(b.value for b in BrokerBuild)
            raise reader.fail(fields["build"], "broker.build", f"{text!r}: the reference knows Kafka {known}")
        build = BrokerBuild(major_minor)
    policy = BrokerRules().migration_policy
    if "migration_policy" in fields:
        node = fields["migration_policy"]
        text = reader.string(node, "broker.migration_policy")
        names = [p.value for p in MigrationPolicy]
        if text not in names:
            raise reader.fail(node, "broker.migration_policy", f"{text!r} is not one of {', '.join(names)}")
        policy = MigrationPolicy(text)
    return BrokerRules(build, policy)


def read_bound(reader: YamlReader, node: yaml.Node, path: str, limit: int = MAX_BOUND) -> Bound:
    """`{min: L, max: H}` (either may be left out) or an exact N, each in 0..limit (the migration
    expectations here, a scenario's expected counts in replay.scenario)."""
    if isinstance(node, yaml.MappingNode):
        fields = reader.mapping(node, path, {"min", "max"})
        if not fields:
            raise reader.fail(node, path, "give min, max or both")
        low = reader.integer(fields["min"], f"{path}.min", 0, limit) if "min" in fields else None
        high = reader.integer(fields["max"], f"{path}.max", 0, limit) if "max" in fields else None
        if low is not None and high is not None and low > high:
            raise reader.fail(node, path, f"min {low} > max {high}")
        return Bound(low, high)
    exact = reader.integer(node, path, 0, limit)
    return Bound(exact, exact)


def _error_code(reader: YamlReader, node: yaml.Node, path: str) -> int:
    value = reader.scalar(node, path)
    if isinstance(value, int) and not isinstance(value, bool):
        return reader.integer(node, path, -1, 32767)
    name = str(value).lower()
    if name not in ErrorCode.__members__:
        raise reader.fail(
            node, path, f"{value!r} is not a Kafka error name (e.g. GROUP_ID_NOT_FOUND) or code"
        )
    return int(ErrorCode[name])


def _refused(reader: YamlReader, node: yaml.Node, path: str) -> Refused:
    if isinstance(node, yaml.MappingNode):
        members = []
        for key_node, value_node in node.value:
            glob = reader.string(key_node, path)
            members.append((glob, _error_code(reader, value_node, f"{path}.{glob}")))
        return Refused(members=tuple(members))
    return Refused(count=reader.integer(node, path, 0, MAX_BOUND))


def expectation_readers(reader: YamlReader) -> dict[str, Callable[[yaml.Node, str], Any]]:
    """How each migration key of `expect:` is read: MigrationExpectations' fields."""
    return {
        "group_type": partial(read_protocol, reader),
        "refused": partial(_refused, reader),
        "rejoins_per_step": partial(read_bound, reader),
        "partitions_moved_per_step": partial(read_bound, reader),
    }


# ---------------------------------------------------------------------------------------------
# What a run did, step by step (from its events)


@dataclass(slots=True)
class StepStats:
    """One step of a migration: from `start_ms` (the bounce of `bounced`) to the next step."""

    index: int
    start_ms: int
    bounced: str | None = None
    group_type: str | None = None  # at the end of the step
    rejoins: dict[str, int] = field(default_factory=dict)  # classic member_key -> JoinGroups
    partitions_moved: int = 0


def is_refusal(event: RebalanceEvent) -> bool:
    """An error the member's client treats as fatal (it stops for good)."""
    if not event.error_code or event.event not in (EventName.REQUEST_FAILED, EventName.MEMBER_FENCED):
        return False
    reactions = reaction_to(event.error_code)
    consumer = event.protocol == GroupProtocol.CONSUMER
    return (reactions.consumer if consumer else reactions.classic) is Reaction.FATAL


def refused_members(events: Iterable[RebalanceEvent]) -> dict[str, int]:
    """member_key -> the first error that stopped it for good."""
    refused: dict[str, int] = {}
    for event in events:
        if is_refusal(event):
            refused.setdefault(event.member_key, event.error_code)
    return refused


def step_stats(
    events: Sequence[RebalanceEvent], window_start_ms: int, interval_ms: int | None, bounced: Sequence[str]
) -> list[StepStats]:
    """Per step: classic rejoins per member (the bounced one left out), partitions received, type.
    Bounces 0 ms apart (an offline migration: all down, then all up) are one step."""
    if not interval_ms:
        bounced = ()
    count = max(len(bounced), 1)
    steps = [
        StepStats(i, window_start_ms + i * (interval_ms or 0), bounced[i] if i < len(bounced) else None)
        for i in range(count)
    ]
    group_type: str | None = None
    for event in events:
        group_type = event.group_type or group_type
        if event.ts_ms < window_start_ms:
            steps[0].group_type = group_type
            continue
        index = (
            count - 1 if not interval_ms else min((event.ts_ms - window_start_ms) // interval_ms, count - 1)
        )
        step = steps[index]
        step.group_type = group_type
        if event.event == EventName.MEMBER_JOINED and event.protocol != GroupProtocol.CONSUMER:
            if event.member_key != step.bounced:
                step.rejoins[event.member_key] = step.rejoins.get(event.member_key, 0) + 1
        elif event.event == EventName.ASSIGNMENT_RECEIVED:
            step.partitions_moved += len(event.assignment or ())
    for previous, step in itertools.pairwise(steps):
        step.group_type = step.group_type or previous.group_type
    return steps


def check(
    expect: MigrationExpectations,
    events: Sequence[RebalanceEvent],
    window_start_ms: int,
    interval_ms: int | None,
    bounced: Sequence[str],
) -> list[str]:
    """Unmet migration expectations."""
    failures: list[str] = []
    if expect.group_type is not None:
        failures += _check_group_type(expect.group_type, events)
    if expect.refused is not None:
        why = expect.refused.check(refused_members(events))
        if why:
            failures.append(f"refused: {why}")
    steps = step_stats(events, window_start_ms, interval_ms, bounced)
    if expect.rejoins_per_step is not None:
        bound = expect.rejoins_per_step
        failures += [
            f"rejoins_per_step: step {step.index}, {member_key}: {why}"
            for step in steps
            for member_key, rejoins in sorted(step.rejoins.items())
            if (why := bound.check(rejoins))
        ]
    if expect.partitions_moved_per_step is not None:
        moved = expect.partitions_moved_per_step
        failures += [
            f"partitions_moved_per_step: step {step.index}: {why}"
            for step in steps
            if (why := moved.check(step.partitions_moved))
        ]
    return failures


def _check_group_type(expected: GroupProtocol, events: Sequence[RebalanceEvent]) -> list[str]:
    """Every group's type at its last event that shows one."""
    final: dict[str, str | None] = defaultdict(lambda: None)
    for event in events:
        final[event.group_id] = event.group_type or final[event.group_id]
    wrong = {g: t for g, t in final.items() if t != expected}
    if wrong or not final:
        return [f"group_type: expected {expected.value}, saw {dict(wrong) or 'no group'}"]
    return []


__all__ = [
    "Bound",
    "BrokerBuild",
    "BrokerRules",
    "GroupProtocol",
    "MigrationExpectations",
    "Refused",
    "StepStats",
    "check",
    "expectation_readers",
    "is_refusal",
    "read_assignors",
    "read_bound",
    "read_broker",
    "read_protocol",
    "read_server_assignor",
    "read_user_data",
    "refused_members",
    "step_stats",
]
