"""Scenario YAML -> a typed, frozen plan the replay engine follows.

A scenario says how a recorded group is replayed differently from how it ran: which API versions
each member uses (a cap, or an exact version, changing as a rolling bounce proceeds), which members
are static or dynamic (add or strip `group.instance.id` by client-id pattern or member ordinal), the
order and pacing of bounces, faults on group APIs, and what must hold afterwards.

Every error names the file, line and field (`scenario.yaml:12: rolling.order: ...`): the YAML is
read as `yaml.compose` nodes, which keep their marks. Schema (all keys optional unless noted):

    name: str                      (required)  description: str  (required)
    duration_ms: int               how long to run after the recorded traffic ends (default 30000)
    broker_api_versions: {Api: v}  ApiVersions caps the coordinator advertises (a broker downgrade)
    members:                       per-member settings from the start, first match wins
      - match: {client_id: glob, ordinal: int, instance_id: glob, member_key: glob, leader: bool, all: true}
        membership: static | dynamic | as-recorded
        instance_id: template      for static members: {client_id} {ordinal} {member_key}
        api_versions: {Api: v | {max: v}}     exact version, or a cap
    rolling:                       a rolling bounce of the members
      members: [selector...]       which members (default all), in ordinal order
      order: ordinal | reverse | leader-first | leader-last
      start_ms, interval_ms, downtime_ms: int      when the first bounce starts, the gap between
                                   bounces, how long a bounced member stays down
      leave_on_shutdown: dynamic | always | never  who sends LeaveGroup when stopping (default
                                   dynamic: what the Java consumer does)
      after: {membership, instance_id, api_versions}   what a bounced member comes back as
    faults:
      - match: selector  api: Api  kind: delay | drop | error
        at_ms: int  count: int (default 1)  delay_ms: int  error_code: int
    expect:
      rebalances: int | {min: int, max: int}   rebalance_started events in the replayed run
      fenced: int | [member_key glob]  expired: int | [glob]
      leader_skips_assignment: bool            some rejoining leader got SkipAssignment (or none did)
      errors: [int]                            error codes that must appear (others may too)
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from enum import StrEnum
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from proxy.wire import supports
from proxy.wire.apis import ApiKey, api_name

DEFAULT_DURATION_MS = 30_000


class ScenarioError(ValueError):
    """A scenario file that is not valid: the message names the file, line and field."""


class Membership(StrEnum):
    STATIC = "static"
    DYNAMIC = "dynamic"
    AS_RECORDED = "as-recorded"


class BounceOrder(StrEnum):
    ORDINAL = "ordinal"
    REVERSE = "reverse"
    LEADER_FIRST = "leader-first"
    LEADER_LAST = "leader-last"


class LeaveOnShutdown(StrEnum):
    DYNAMIC = "dynamic"
    ALWAYS = "always"
    NEVER = "never"


class FaultKind(StrEnum):
    DELAY = "delay"
    DROP = "drop"
    ERROR = "error"


# API names a scenario may use: Kafka's names (`JoinGroup`) of the group APIs plus ApiVersions' peers.
API_BY_NAME: dict[str, int] = {api_name(key): int(key) for key in ApiKey}


@dataclass(frozen=True, slots=True)
class MemberSelector:
    """Which members: all given conditions must hold (no condition: every member)."""

    client_id: str | None = None  # glob
    ordinal: int | None = None  # order of first appearance in the capture, from 0
    instance_id: str | None = None  # glob on the recorded group.instance.id
    member_key: str | None = None  # glob
    leader: bool | None = None  # the group's leader when the rule is applied

    def matches(
        self,
        *,
        client_id: str,
        ordinal: int,
        instance_id: str | None,
        member_key: str,
        is_leader: bool = False,
    ) -> bool:
        if self.leader is not None and is_leader != self.leader:
            return False
        if self.client_id is not None and not fnmatch.fnmatchcase(client_id, self.client_id):
            return False
        if self.ordinal is not None and ordinal != self.ordinal:
            return False
        if self.instance_id is not None and (
            instance_id is None or not fnmatch.fnmatchcase(instance_id, self.instance_id)
        ):
            return False
        return self.member_key is None or fnmatch.fnmatchcase(member_key, self.member_key)


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
        count = len(seen)
        if self.minimum is not None and count < self.minimum:
            return f"expected at least {self.minimum}, saw {count}"
        if self.maximum is not None and count > self.maximum:
            return f"expected at most {self.maximum}, saw {count}"
        return None

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
    rebalances: CountExpectation | None = None
    fenced: CountExpectation | None = None
    expired: CountExpectation | None = None
    leader_skips_assignment: bool | None = None
    errors: tuple[int, ...] = ()


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
    text: str = field(default="", compare=False, repr=False)


AS_RECORDED = Scenario(name="as-recorded", description="the capture replayed as it ran", source="builtin")


# ---------------------------------------------------------------------------------------------
# Loading and validation on yaml.compose nodes (they keep line numbers)


class _Reader:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, node: yaml.Node, path: str, message: str) -> ScenarioError:
        return ScenarioError(f"{self.source}:{node.start_mark.line + 1}: {path}: {message}")

    def mapping(
        self, node: yaml.Node, path: str, allowed: set[str], required: frozenset[str] | set[str] = frozenset()
    ) -> dict[str, yaml.Node]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, f"expected a mapping, got {_kind(node)}")
        out: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, str) or key not in allowed:
                raise self.fail(
                    key_node,
                    f"{path}.{key}" if path else str(key),
                    f"unknown key (allowed: {', '.join(sorted(allowed))})",
                )
            if key in out:
                raise self.fail(key_node, f"{path}.{key}" if path else key, "duplicate key")
            out[key] = value_node
        for key in sorted(required - set(out)):
            raise self.fail(node, f"{path}.{key}" if path else key, "required key is missing")
        return out

    def sequence(self, node: yaml.Node, path: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, path, f"expected a list, got {_kind(node)}")
        return list(node.value)

    def scalar(self, node: yaml.Node, path: str) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, path, f"expected a value, got {_kind(node)}")
        return yaml.safe_load(yaml.serialize(node))

    def string(self, node: yaml.Node, path: str) -> str:
        value = self.scalar(node, path)
        if not isinstance(value, str):
            raise self.fail(node, path, f"expected a string, got {value!r}")
        return value

    def integer(self, node: yaml.Node, path: str, minimum: int | None = 0) -> int:
        value = self.scalar(node, path)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(node, path, f"expected an integer, got {value!r}")
        if minimum is not None and value < minimum:
            raise self.fail(node, path, f"must be >= {minimum}, got {value}")
        return value

    def boolean(self, node: yaml.Node, path: str) -> bool:
        value = self.scalar(node, path)
        if not isinstance(value, bool):
            raise self.fail(node, path, f"expected true or false, got {value!r}")
        return value

    def choice(self, node: yaml.Node, path: str, enum: type[StrEnum]) -> Any:
        value = self.string(node, path)
        try:
            return enum(value)
        except ValueError:
            raise self.fail(
                node, path, f"{value!r} is not one of {', '.join(e.value for e in enum)}"
            ) from None

    def api(self, node: yaml.Node, path: str) -> int:
        name = self.string(node, path)
        if name not in API_BY_NAME:
            raise self.fail(node, path, f"unknown API {name!r} (known: {', '.join(sorted(API_BY_NAME))})")
        return API_BY_NAME[name]

    # -- composite ---------------------------------------------------------------------------

    def selector(self, node: yaml.Node, path: str) -> MemberSelector:
        fields = self.mapping(
            node, path, {"client_id", "ordinal", "instance_id", "member_key", "leader", "all"}
        )
        if "all" in fields and not self.boolean(fields["all"], f"{path}.all"):
            raise self.fail(fields["all"], f"{path}.all", "only `all: true` makes sense")
        return MemberSelector(
            client_id=self.string(fields["client_id"], f"{path}.client_id")
            if "client_id" in fields
            else None,
            ordinal=self.integer(fields["ordinal"], f"{path}.ordinal") if "ordinal" in fields else None,
            instance_id=self.string(fields["instance_id"], f"{path}.instance_id")
            if "instance_id" in fields
            else None,
            member_key=self.string(fields["member_key"], f"{path}.member_key")
            if "member_key" in fields
            else None,
            leader=self.boolean(fields["leader"], f"{path}.leader") if "leader" in fields else None,
        )

    def version_rules(self, node: yaml.Node, path: str) -> tuple[VersionRule, ...]:
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, path, f"expected a mapping of API name to version, got {_kind(node)}")
        rules = []
        for key_node, value_node in node.value:
            api_key = self.api(key_node, path)
            field_path = f"{path}.{key_node.value}"
            if isinstance(value_node, yaml.MappingNode):
                inner = self.mapping(value_node, field_path, {"max"}, {"max"})
                api_version = self.integer(inner["max"], f"{field_path}.max")
                exact, version_node = False, inner["max"]
            else:
                api_version = self.integer(value_node, field_path)
                exact, version_node = True, value_node
            if not supports(api_key, api_version):
                known = [v for v in range(0, 32) if supports(api_key, v)]
                raise self.fail(
                    version_node,
                    field_path,
                    f"{api_name(api_key)} has no version {api_version} (known: {known[0]}..{known[-1]})",
                )
            rules.append(VersionRule(api_key, api_version, exact))
        return tuple(rules)

    def settings(self, fields: dict[str, yaml.Node], path: str) -> MemberSettings:
        membership = (
            self.choice(fields["membership"], f"{path}.membership", Membership)
            if "membership" in fields
            else None
        )
        instance_id = (
            self.string(fields["instance_id"], f"{path}.instance_id") if "instance_id" in fields else None
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
        )

    def count(self, node: yaml.Node, path: str) -> CountExpectation:
        if isinstance(node, yaml.SequenceNode):
            return CountExpectation(
                member_keys=tuple(self.string(n, f"{path}[{i}]") for i, n in enumerate(node.value))
            )
        if isinstance(node, yaml.MappingNode):
            fields = self.mapping(node, path, {"min", "max"})
            if not fields:
                raise self.fail(node, path, "give min, max or both")
            lo = self.integer(fields["min"], f"{path}.min") if "min" in fields else None
            hi = self.integer(fields["max"], f"{path}.max") if "max" in fields else None
            if lo is not None and hi is not None and lo > hi:
                raise self.fail(node, path, f"min {lo} > max {hi}")
            return CountExpectation(minimum=lo, maximum=hi)
        exact = self.integer(node, path)
        return CountExpectation(minimum=exact, maximum=exact)


def _kind(node: yaml.Node) -> str:
    match node:
        case yaml.MappingNode():
            return "a mapping"
        case yaml.SequenceNode():
            return "a list"
        case _:
            return repr(node.value)


_MEMBER_SETTING_KEYS = {"membership", "instance_id", "api_versions"}


def parse_scenario(text: str, source: str) -> Scenario:
    """Parse and validate scenario YAML; raises ScenarioError naming source, line and field."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"{mark.line + 1}" if mark is not None else "?"
        raise ScenarioError(f"{source}:{line}: not valid YAML: {getattr(exc, 'problem', exc)}") from exc
    if root is None:
        raise ScenarioError(f"{source}:1: empty scenario file")
    r = _Reader(source)
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
        },
        {"name", "description"},
    )
    members = []
    for i, node in enumerate(r.sequence(top["members"], "members") if "members" in top else []):
        path = f"members[{i}]"
        fields = r.mapping(node, path, {"match", *_MEMBER_SETTING_KEYS}, {"match"})
        members.append(MemberRule(r.selector(fields["match"], f"{path}.match"), r.settings(fields, path)))

    rolling = None
    if "rolling" in top:
        fields = r.mapping(
            top["rolling"],
            "rolling",
            {"members", "order", "start_ms", "interval_ms", "downtime_ms", "leave_on_shutdown", "after"},
        )
        after = MemberSettings()
        if "after" in fields:
            after = r.settings(
                r.mapping(fields["after"], "rolling.after", _MEMBER_SETTING_KEYS), "rolling.after"
            )
        defaults = RollingBounce()
        rolling = RollingBounce(
            members=tuple(
                r.selector(n, f"rolling.members[{i}]")
                for i, n in enumerate(r.sequence(fields["members"], "rolling.members"))
            )
            if "members" in fields
            else (),
            order=r.choice(fields["order"], "rolling.order", BounceOrder)
            if "order" in fields
            else defaults.order,
            start_ms=r.integer(fields["start_ms"], "rolling.start_ms")
            if "start_ms" in fields
            else defaults.start_ms,
            interval_ms=r.integer(fields["interval_ms"], "rolling.interval_ms")
            if "interval_ms" in fields
            else defaults.interval_ms,
            downtime_ms=r.integer(fields["downtime_ms"], "rolling.downtime_ms")
            if "downtime_ms" in fields
            else defaults.downtime_ms,
            leave_on_shutdown=r.choice(
                fields["leave_on_shutdown"], "rolling.leave_on_shutdown", LeaveOnShutdown
            )
            if "leave_on_shutdown" in fields
            else defaults.leave_on_shutdown,
            after=after,
        )

    faults = []
    for i, node in enumerate(r.sequence(top["faults"], "faults") if "faults" in top else []):
        path = f"faults[{i}]"
        fields = r.mapping(
            node,
            path,
            {"match", "api", "kind", "at_ms", "count", "delay_ms", "error_code"},
            {"match", "api", "kind"},
        )
        kind = r.choice(fields["kind"], f"{path}.kind", FaultKind)
        if kind == FaultKind.ERROR and "error_code" not in fields:
            raise r.fail(node, f"{path}.error_code", "required for kind: error")
        if kind == FaultKind.DELAY and "delay_ms" not in fields:
            raise r.fail(node, f"{path}.delay_ms", "required for kind: delay")
        faults.append(
            Fault(
                match=r.selector(fields["match"], f"{path}.match"),
                api_key=r.api(fields["api"], f"{path}.api"),
                kind=kind,
                at_ms=r.integer(fields["at_ms"], f"{path}.at_ms") if "at_ms" in fields else 0,
                count=r.integer(fields["count"], f"{path}.count", minimum=1) if "count" in fields else 1,
                delay_ms=r.integer(fields["delay_ms"], f"{path}.delay_ms") if "delay_ms" in fields else 0,
                error_code=r.integer(fields["error_code"], f"{path}.error_code", minimum=None)
                if "error_code" in fields
                else 0,
            )
        )

    expect = Expectations()
    if "expect" in top:
        fields = r.mapping(
            top["expect"], "expect", {"rebalances", "fenced", "expired", "leader_skips_assignment", "errors"}
        )
        expect = Expectations(
            rebalances=r.count(fields["rebalances"], "expect.rebalances") if "rebalances" in fields else None,
            fenced=r.count(fields["fenced"], "expect.fenced") if "fenced" in fields else None,
            expired=r.count(fields["expired"], "expect.expired") if "expired" in fields else None,
            leader_skips_assignment=r.boolean(
                fields["leader_skips_assignment"], "expect.leader_skips_assignment"
            )
            if "leader_skips_assignment" in fields
            else None,
            errors=tuple(
                r.integer(n, f"expect.errors[{i}]", minimum=None)
                for i, n in enumerate(r.sequence(fields["errors"], "expect.errors"))
            )
            if "errors" in fields
            else (),
        )

    return Scenario(
        name=r.string(top["name"], "name"),
        description=r.string(top["description"], "description"),
        source=source,
        duration_ms=r.integer(top["duration_ms"], "duration_ms", minimum=1)
        if "duration_ms" in top
        else DEFAULT_DURATION_MS,
        broker_api_versions=r.version_rules(top["broker_api_versions"], "broker_api_versions")
        if "broker_api_versions" in top
        else (),
        members=tuple(members),
        rolling=rolling,
        faults=tuple(faults),
        expect=expect,
        text=text,
    )


def load_scenario_file(path: Path) -> Scenario:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    return parse_scenario(text, str(path))


# ---------------------------------------------------------------------------------------------
# The built-in library (replay/scenarios/*.yaml)


def builtin_names() -> list[str]:
    root = resources.files("replay") / "scenarios"
    return sorted(p.name[: -len(".yaml")] for p in root.iterdir() if p.name.endswith(".yaml"))


def builtin_text(name: str) -> str:
    path = resources.files("replay") / "scenarios" / f"{name}.yaml"
    if not path.is_file():
        raise ScenarioError(f"no built-in scenario {name!r} (known: {', '.join(builtin_names())})")
    return path.read_text(encoding="utf-8")


def load_builtin(name: str) -> Scenario:
    return parse_scenario(builtin_text(name), f"builtin:{name}.yaml")


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
    "CountExpectation",
    "Expectations",
    "Fault",
    "FaultKind",
    "LeaveOnShutdown",
    "MemberRule",
    "MemberSelector",
    "MemberSettings",
    "Membership",
    "RollingBounce",
    "Scenario",
    "ScenarioError",
    "VersionRule",
    "builtin_names",
    "load_builtin",
    "load_scenario_file",
    "parse_scenario",
    "resolve_scenario",
]
