"""Scenario YAML -> a typed, frozen plan the replay engine follows.

A scenario says how a recorded group is replayed differently from how it ran: which API versions
each member uses (a cap, or an exact version, changing as a rolling bounce proceeds), which members
are static or dynamic (add or strip `group.instance.id` by client-id pattern or member ordinal), the
order and pacing of bounces, faults on group APIs, and what must hold afterwards.

Every error names the file, line and field (`scenario.yaml:12: rolling.order: ...`): the file is
read by `proxy.yaml_reader` (the reader rewrite policies use too), and any input gives a Scenario or
a ScenarioError, never another exception. The membership words (`match`, `membership`,
`instance_id`) are `proxy.membership`'s, shared with rewrite policies. Schema (all keys optional
unless noted; every number is bounded, ranges in brackets):

    name: str                      (required: letters, digits, . _ + -; not `as-recorded`)
    description: str               (required)
    duration_ms: int               how long to run after the recorded traffic ends (default 30000)
                                   [1..3600000]
    sessions: as-recorded | keep-running   keep-running: each member starts when it first did and
                                   runs until the scenario stops it (recorded stops and restarts
                                   are not replayed: a steady group, a migration on its own)
    broker_api_versions: {Api: v}  ApiVersions caps the coordinator advertises (a broker downgrade)
    members:                       per-member settings from the start, first match wins
      - match: {client_id: glob, ordinal: int, instance_id: glob, member_key: glob, leader: bool, all: true}
                                   ordinal [0..1000000]
        membership: static | dynamic | as-recorded
        instance_id: template      for static members: {client_id} {ordinal} {member_key} only, no
                                   format specs; at most 249 characters of text (Kafka's limit)
        api_versions: {Api: v | {max: v}}     exact version, or a cap (a version kio knows)
        protocol: classic | consumer          what the member speaks (KIP-848: consumer speaks
                                   ConsumerGroupHeartbeat), keeping its identity and timing
        server_assignor: name      what a consumer-protocol member asks for (group.remote.assignor)
        assignors: [name]          a classic member's partition.assignment.strategy (range,
                                   roundrobin, sticky, cooperative-sticky), preference order
        assignor_user_data: text   userData a custom classic assignor adds to each assignment
    broker: {build: "4.0" | "4.3", migration_policy: disabled | upgrade | downgrade | bidirectional}
                                   whose consumer-group rules apply (default 4.3, bidirectional)
    rolling:                       a rolling bounce of the members
      members: [selector...]       which members (default all), in ordinal order
      order: ordinal | reverse | leader-first | leader-last
      start_ms, interval_ms, downtime_ms: int      when the first bounce starts [0..3600000], the
                                   gap between bounces [0..1800000], how long a bounced member stays
                                   down [0..1800000] (Kafka's group.max.session.timeout.ms default)
      leave_on_shutdown: dynamic | always | never  who sends LeaveGroup when stopping (default
                                   dynamic: what the Java consumer does)
      after: {membership, instance_id, api_versions, protocol, server_assignor}
                                   what a bounced member comes back as
    faults:
      - match: selector  api: Api  kind: delay | drop | error
        at_ms: int [0..3600000]  count: int (default 1) [1..10000]  delay_ms: int [0..1800000]
        error_code: int [-1..32767]
    coordinator_restarts:          the group coordinator moves (a broker roll) and loads the group
      - at_ms: int [0..3600000]    from its log, like kafkatest's test_static_consumer_persisted_
                                   after_rejoin; ms after the last member's first join. Reference
                                   runs only: a live broker's coordinator stays where it is
    expect:
      rebalances: int | {min: int, max: int}   rebalance_started events in the replayed run
      fenced: int | [member_key glob]  expired: int | [glob]      counts [0..1000000]
      leader_skips_assignment: bool            some rejoining leader got SkipAssignment (or none did)
      errors: [int]                            error codes that must appear (others may too) [-1..32767]
      group_type, refused, rejoins_per_step, partitions_moved_per_step: the migration's
                                               (replay.migration)

The bounds keep a reference replay (simulated time, members heartbeating every few seconds) to
seconds of work: an interval of 2^31 ms would simulate weeks of heartbeats.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from proxy.membership import (
    PLACEHOLDERS,
    SELECTOR_KEYS,
    MemberSelector,
    Membership,
    read_instance_id,
    read_selector,
)
from proxy.yaml_reader import YamlInputError, YamlReader, compose, read_text
from replay import migration
from replay.migration import Bound, BrokerRules, GroupProtocol, MigrationExpectations

DEFAULT_DURATION_MS = 30_000
T = TypeVar("T")

# Bounds of every number a scenario gives (documented above).
MAX_SPAN_MS = 3_600_000  # duration_ms, rolling.start_ms, faults.at_ms: one hour of simulated time
MAX_GAP_MS = 1_800_000  # rolling.interval_ms, downtime_ms, faults.delay_ms: group.max.session.timeout.ms
MAX_FAULT_COUNT = 10_000
MAX_EXPECTED_COUNT = 1_000_000
ERROR_CODE_RANGE = (-1, 32767)  # Kafka error codes are int16; -1 is UNKNOWN_SERVER_ERROR


NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
"""A scenario's name: it names runs in the events table, the report and file names."""


class ScenarioError(YamlInputError):
    """A scenario file that is not valid: the message names the file, line and field."""


class BounceOrder(StrEnum):
    ORDINAL = "ordinal"
    REVERSE = "reverse"
    LEADER_FIRST = "leader-first"
    LEADER_LAST = "leader-last"


class LeaveOnShutdown(StrEnum):
    DYNAMIC = "dynamic"
    ALWAYS = "always"
    NEVER = "never"


class Sessions(StrEnum):
    AS_RECORDED = "as-recorded"
    KEEP_RUNNING = "keep-running"


class FaultKind(StrEnum):
    DELAY = "delay"
    DROP = "drop"
    ERROR = "error"


@dataclass(frozen=True, slots=True)
class VersionRule:
    """Use exactly `api_version` (exact=True) or at most it (a cap)."""

    api_key: int
    api_version: int
    exact: bool

    def apply(self, wanted: int) -> int:
        return self.api_version if self.exact else min(wanted, self.api_version)


@dataclass(frozen=True, slots=True)
class MemberSettings:
    membership: Membership | None = None  # None: unchanged
    instance_id: str | None = None  # template
    api_versions: tuple[VersionRule, ...] = ()
    protocol: GroupProtocol | None = None  # None: unchanged
    server_assignor: str | None = None
    assignors: tuple[str, ...] | None = None  # classic partition.assignment.strategy
    assignor_user_data: bytes | None = None  # a custom classic assignor's assignment userData


@dataclass(frozen=True, slots=True)
class MemberRule:
    match: MemberSelector
    settings: MemberSettings


@dataclass(frozen=True, slots=True)
class RollingBounce:
    members: tuple[MemberSelector, ...] = ()  # empty: everyone
    order: BounceOrder = BounceOrder.ORDINAL
    start_ms: int = 10_000
    interval_ms: int = 15_000
    downtime_ms: int = 2_000
    leave_on_shutdown: LeaveOnShutdown = LeaveOnShutdown.DYNAMIC
    after: MemberSettings = MemberSettings()


@dataclass(frozen=True, slots=True)
class Fault:
    match: MemberSelector
    api_key: int
    kind: FaultKind
    at_ms: int = 0
    count: int = 1
    delay_ms: int = 0
    error_code: int = 0


@dataclass(frozen=True, slots=True)
class CoordinatorRestart:
    """The coordinator restarts from its records `at_ms` after the last member's first join."""

    at_ms: int


@dataclass(frozen=True, slots=True)
class CountExpectation:
    """An exact count, a range, or a list of member-key globs that must be exactly the ones seen."""

    minimum: int | None = None
    maximum: int | None = None
    member_keys: tuple[str, ...] | None = None

    def check(self, seen: list[str]) -> str | None:
        """None when `seen` (member keys, one per event) satisfies it, else why not."""
        if self.member_keys is not None:
            distinct = sorted(set(seen))
            unmatched = [k for k in distinct if not any(fnmatch.fnmatchcase(k, p) for p in self.member_keys)]
            missing = [p for p in self.member_keys if not any(fnmatch.fnmatchcase(k, p) for k in distinct)]
            if unmatched or missing:
                return f"expected {list(self.member_keys)}, saw {distinct}"
            return None
        return Bound(self.minimum, self.maximum).check(len(seen))

    def describe(self) -> str:
        if self.member_keys is not None:
            return str(list(self.member_keys))
        if self.minimum == self.maximum:
            return str(self.minimum)
        low = "" if self.minimum is None else str(self.minimum)
        high = "" if self.maximum is None else str(self.maximum)
        return f"{low}..{high}"


@dataclass(frozen=True, slots=True)
class Expectations:
    """A scenario's `expect:`: what `check` verifies from the run's events, None or () where
    nothing is stated. `rebalances`, `fenced` and `expired` count events (CountExpectation: a
    number, a range or the member keys), `errors` lists codes some request may answer, and
    `migration` holds the consumer-protocol keys (replay.migration)."""

    rebalances: CountExpectation | None = None
    fenced: CountExpectation | None = None
    expired: CountExpectation | None = None
    leader_skips_assignment: bool | None = None
    errors: tuple[int, ...] = ()
    migration: MigrationExpectations = field(default_factory=MigrationExpectations)


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    source: str  # file it came from (or builtin:NAME)
    duration_ms: int = DEFAULT_DURATION_MS
    broker_api_versions: tuple[VersionRule, ...] = ()
    members: tuple[MemberRule, ...] = ()
    rolling: RollingBounce | None = None
    faults: tuple[Fault, ...] = ()
    expect: Expectations = Expectations()
    broker: BrokerRules = field(default_factory=BrokerRules)
    sessions: Sessions = Sessions.AS_RECORDED
    text: str = field(default="", compare=False, repr=False)
    coordinator_restarts: tuple[CoordinatorRestart, ...] = ()

    @property
    def uses_consumer_protocol(self) -> bool:
        """Some member speaks KIP-848 at some point (the run needs a 4.x coordinator)."""
        rules = [rule.settings for rule in self.members]
        if self.rolling is not None:
            rules.append(self.rolling.after)
        return any(s.protocol is GroupProtocol.CONSUMER for s in rules)


AS_RECORDED = Scenario(name="as-recorded", description="the capture replayed as it ran", source="builtin")


# ---------------------------------------------------------------------------------------------
# Loading and validation (proxy.yaml_reader: nodes keep their line numbers)

_MEMBER_SETTING_KEYS = {
    "membership",
    "instance_id",
    "api_versions",
    "protocol",
    "server_assignor",
    "assignors",
    "assignor_user_data",
}


class _Reader(YamlReader):
    def selector(self, node: yaml.Node, path: str) -> MemberSelector:
        return read_selector(self, node, path, SELECTOR_KEYS)

    def version_rules(self, node: yaml.Node, path: str) -> tuple[VersionRule, ...]:
        return tuple(VersionRule(*rule) for rule in self.api_versions(node, path, allow_max=True))

    def settings(self, fields: dict[str, yaml.Node], path: str) -> MemberSettings:
        membership = (
            self.choice(fields["membership"], f"{path}.membership", Membership)
            if "membership" in fields
            else None
        )
        instance_id = (
            read_instance_id(self, fields["instance_id"], f"{path}.instance_id", PLACEHOLDERS)
            if "instance_id" in fields
            else None
        )
        if instance_id is not None and membership == Membership.DYNAMIC:
            raise self.fail(
                fields["instance_id"], f"{path}.instance_id", "a dynamic member has no instance id"
            )
        return MemberSettings(
            membership=membership,
            instance_id=instance_id,
            api_versions=self.version_rules(fields["api_versions"], f"{path}.api_versions")
            if "api_versions" in fields
            else (),
            protocol=self.optional(fields, "protocol", path, migration.read_protocol),
            server_assignor=self.optional(fields, "server_assignor", path, migration.read_server_assignor),
            assignors=self.optional(fields, "assignors", path, migration.read_assignors),
            assignor_user_data=self.optional(fields, "assignor_user_data", path, migration.read_user_data),
        )

    def optional(
        self,
        fields: dict[str, yaml.Node],
        key: str,
        path: str,
        read: Callable[[YamlReader, yaml.Node, str], T],
    ) -> T | None:
        """`read` the value of `key` (named `path.key` in errors), None when absent."""
        return read(self, fields[key], f"{path}.{key}") if key in fields else None

    def count(self, node: yaml.Node, path: str) -> CountExpectation:
        if isinstance(node, yaml.SequenceNode):
            return CountExpectation(
                member_keys=tuple(self.string(n, f"{path}[{i}]") for i, n in enumerate(node.value))
            )
        bound = migration.read_bound(self, node, path, MAX_EXPECTED_COUNT)
        return CountExpectation(minimum=bound.minimum, maximum=bound.maximum)

    def optional_int(
        self, fields: dict[str, yaml.Node], key: str, path: str, default: int, low: int, high: int
    ) -> int:
        return (
            self.integer(fields[key], f"{path}.{key}" if path else key, low, high)
            if key in fields
            else default
        )

    def rolling(self, node: yaml.Node) -> RollingBounce:
        fields = self.mapping(
            node,
            "rolling",
            {"members", "order", "start_ms", "interval_ms", "downtime_ms", "leave_on_shutdown", "after"},
        )
        after = MemberSettings()
        if "after" in fields:
            after = self.settings(
                self.mapping(fields["after"], "rolling.after", _MEMBER_SETTING_KEYS), "rolling.after"
            )
        defaults = RollingBounce()
        return RollingBounce(
            members=tuple(
                self.selector(n, f"rolling.members[{i}]")
                for i, n in enumerate(self.sequence(fields["members"], "rolling.members"))
            )
            if "members" in fields
            else (),
            order=self.choice(fields["order"], "rolling.order", BounceOrder)
            if "order" in fields
            else defaults.order,
            start_ms=self.optional_int(fields, "start_ms", "rolling", defaults.start_ms, 0, MAX_SPAN_MS),
            interval_ms=self.optional_int(
                fields, "interval_ms", "rolling", defaults.interval_ms, 0, MAX_GAP_MS
            ),
            downtime_ms=self.optional_int(
                fields, "downtime_ms", "rolling", defaults.downtime_ms, 0, MAX_GAP_MS
            ),
            leave_on_shutdown=self.choice(
                fields["leave_on_shutdown"], "rolling.leave_on_shutdown", LeaveOnShutdown
            )
            if "leave_on_shutdown" in fields
            else defaults.leave_on_shutdown,
            after=after,
        )

    def fault(self, node: yaml.Node, path: str) -> Fault:
        fields = self.mapping(
            node,
            path,
            {"match", "api", "kind", "at_ms", "count", "delay_ms", "error_code"},
            {"match", "api", "kind"},
        )
        kind = self.choice(fields["kind"], f"{path}.kind", FaultKind)
        if kind == FaultKind.ERROR and "error_code" not in fields:
            raise self.fail(node, f"{path}.error_code", "required for kind: error")
        if kind == FaultKind.DELAY and "delay_ms" not in fields:
            raise self.fail(node, f"{path}.delay_ms", "required for kind: delay")
        return Fault(
            match=self.selector(fields["match"], f"{path}.match"),
            api_key=self.api(fields["api"], f"{path}.api"),
            kind=kind,
            at_ms=self.optional_int(fields, "at_ms", path, 0, 0, MAX_SPAN_MS),
            count=self.optional_int(fields, "count", path, 1, 1, MAX_FAULT_COUNT),
            delay_ms=self.optional_int(fields, "delay_ms", path, 0, 0, MAX_GAP_MS),
            error_code=self.optional_int(fields, "error_code", path, 0, *ERROR_CODE_RANGE),
        )

    def coordinator_restart(self, node: yaml.Node, path: str) -> CoordinatorRestart:
        fields = self.mapping(node, path, {"at_ms"}, {"at_ms"})
        return CoordinatorRestart(self.integer(fields["at_ms"], f"{path}.at_ms", 0, MAX_SPAN_MS))

    def expectations(self, node: yaml.Node) -> Expectations:
        readers: dict[str, Callable[[yaml.Node, str], Any]] = {
            "rebalances": self.count,
            "fenced": self.count,
            "expired": self.count,
            "leader_skips_assignment": self.boolean,
            "errors": self.error_codes,
        }
        migration_readers = migration.expectation_readers(self)
        fields = self.mapping(node, "expect", {*readers, *migration_readers})
        return Expectations(
            **self.given(fields, "expect", readers),
            migration=MigrationExpectations(**self.given(fields, "expect", migration_readers)),
        )

    def given(
        self, fields: dict[str, yaml.Node], path: str, readers: dict[str, Callable[[yaml.Node, str], T]]
    ) -> dict[str, T]:
        """The keys of `readers` that `fields` has, each read by its reader (absent keys keep the
        field's default)."""
        return {key: read(fields[key], f"{path}.{key}") for key, read in readers.items() if key in fields}

    def error_codes(self, node: yaml.Node, path: str) -> tuple[int, ...]:
        return tuple(
            self.integer(n, f"{path}[{i}]", *ERROR_CODE_RANGE)
            for i, n in enumerate(self.sequence(node, path))
        )


def parse_scenario(text: str, source: str) -> Scenario:
    """Parse and validate scenario YAML; raises ScenarioError naming source, line and field."""
    root = compose(text, source, ScenarioError)
    if root is None:
        raise ScenarioError(source, 1, "", "empty scenario file")
    r = _Reader(source, ScenarioError)
    top = r.mapping(
        root,
        "",
        {
            "name",
            "description",
            "duration_ms",
            "broker_api_versions",
            "members",
            "rolling",
            "faults",
            "expect",
            "coordinator_restarts",
            "broker",
            "sessions",
        },
        {"name", "description"},
    )
    members = []
    for i, node in enumerate(r.sequence(top["members"], "members") if "members" in top else []):
        path = f"members[{i}]"
        fields = r.mapping(node, path, {"match", *_MEMBER_SETTING_KEYS}, {"match"})
        members.append(MemberRule(r.selector(fields["match"], f"{path}.match"), r.settings(fields, path)))
    faults = [
        r.fault(node, f"faults[{i}]")
        for i, node in enumerate(r.sequence(top["faults"], "faults") if "faults" in top else [])
    ]
    name = r.string(top["name"], "name")
    if not NAME_PATTERN.fullmatch(name):
        raise r.fail(
            top["name"],
            "name",
            "letters, digits and . _ + - only (at most 100), starting with one of the first two",
        )
    if name == AS_RECORDED.name:
        raise r.fail(top["name"], "name", f"{name!r} is reserved for the capture replayed as it ran")
    return Scenario(
        name=name,
        description=r.string(top["description"], "description"),
        source=source,
        duration_ms=r.optional_int(top, "duration_ms", "", DEFAULT_DURATION_MS, 1, MAX_SPAN_MS),
        broker_api_versions=r.version_rules(top["broker_api_versions"], "broker_api_versions")
        if "broker_api_versions" in top
        else (),
        members=tuple(members),
        rolling=r.rolling(top["rolling"]) if "rolling" in top else None,
        faults=tuple(faults),
        expect=r.expectations(top["expect"]) if "expect" in top else Expectations(),
        broker=migration.read_broker(r, top["broker"]) if "broker" in top else BrokerRules(),
        sessions=r.choice(top["sessions"], "sessions", Sessions)
        if "sessions" in top
        else Sessions.AS_RECORDED,
        text=text,
        coordinator_restarts=tuple(
            r.coordinator_restart(n, f"coordinator_restarts[{i}]")
            for i, n in enumerate(r.sequence(top["coordinator_restarts"], "coordinator_restarts"))
        )
        if "coordinator_restarts" in top
        else (),
    )


def load_scenario_file(path: Path) -> Scenario:
    return parse_scenario(read_text(path, ScenarioError), str(path))


# ---------------------------------------------------------------------------------------------
# The built-in library (replay/scenarios/*.yaml)


def builtin_names() -> list[str]:
    root = resources.files("replay") / "scenarios"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    path = resources.files("replay") / "scenarios" / f"{name}.yaml"
    if not path.is_file():
        raise ScenarioError(name, None, "", f"no built-in scenario (known: {', '.join(builtin_names())})")
    return path.read_text(encoding="utf-8")


def load_builtin(name: str) -> Scenario:
    return parse_scenario(builtin_text(name), f"builtin:{name}.yaml")


def scenario_text(name_or_file: str) -> str:
    """The YAML of a built-in scenario or a scenario file, after checking it parses
    (`group-replay scenarios show`)."""
    scenario = resolve_scenario(name_or_file)
    if scenario is AS_RECORDED:
        return f"# {AS_RECORDED.name}: {AS_RECORDED.description} (no scenario file)\n"
    return scenario.text


def resolve_scenario(name_or_file: str | None) -> Scenario:
    """A built-in name, a YAML file path, or None / `as-recorded` for no scenario."""
    if name_or_file in (None, "as-recorded"):
        return AS_RECORDED
    assert name_or_file is not None
    path = Path(name_or_file)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_scenario_file(path)
    return load_builtin(name_or_file)


__all__ = [
    "AS_RECORDED",
    "BounceOrder",
    "CoordinatorRestart",
    "CountExpectation",
    "Expectations",
    "Fault",
    "FaultKind",
    "GroupProtocol",
    "LeaveOnShutdown",
    "MemberRule",
    "MemberSelector",
    "MemberSettings",
    "Membership",
    "RollingBounce",
    "Scenario",
    "ScenarioError",
    "Sessions",
    "VersionRule",
    "builtin_names",
    "load_builtin",
    "load_scenario_file",
    "parse_scenario",
    "resolve_scenario",
    "scenario_text",
]
