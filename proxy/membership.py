"""The membership vocabulary shared by rewrite policies (proxy) and replay scenarios (replay).

Both kinds of file say the same things about group members, with the same words:

    match: {client_id: glob, ordinal: int, instance_id: glob, ...}   which members (all conditions
                                   hold; no condition, or `all: true`: every member)
    membership: static | dynamic | as-recorded                        add group.instance.id, strip
                                   it, or leave it as the client sent / as recorded
    instance_id: template          a static member's group.instance.id, from the placeholders
                                   {client_id} {ordinal} (and {member_key} in scenarios)

`ordinal` is the member's order of first appearance (first JoinGroup seen per client id), from 0.
Scenarios also select by `member_key` (glob) and `leader` (bool), which only replay knows.
Rewrite policies written before this vocabulary say `action: add | strip`; that spelling is still
read, as `membership: static | dynamic`.
"""

from __future__ import annotations

import fnmatch
import string
from dataclasses import dataclass
from enum import StrEnum

import yaml

from proxy.yaml_reader import YamlReader

MAX_ORDINAL = 1_000_000
"""Largest member ordinal a selector may name."""

MAX_INSTANCE_ID_CHARS = 249
"""Kafka's bound on a group.instance.id (JoinGroupRequest.validateGroupInstanceId -> Topic's
249-character limit); a template's literal text is held to it too."""


class Membership(StrEnum):
    STATIC = "static"  # has a group.instance.id (KIP-345)
    DYNAMIC = "dynamic"  # has none
    AS_RECORDED = "as-recorded"  # unchanged


# The older rewrite-policy spelling (`action:`), read as the shared words.
LEGACY_ACTIONS: dict[str, Membership] = {"add": Membership.STATIC, "strip": Membership.DYNAMIC}

SELECTOR_KEYS = ("client_id", "ordinal", "instance_id", "member_key", "leader", "all")
PLACEHOLDERS = ("client_id", "ordinal", "member_key")


@dataclass(frozen=True, slots=True)
class MemberSelector:
    """Which members: all given conditions must hold (no condition: every member)."""

    client_id: str | None = None  # glob
    ordinal: int | None = None  # order of first appearance, from 0
    instance_id: str | None = None  # glob on the group.instance.id as sent / recorded
    member_key: str | None = None  # glob (replay only)
    leader: bool | None = None  # the group's leader when the rule is applied (replay only)

    def matches(
        self,
        *,
        client_id: str,
        ordinal: int | None,
        instance_id: str | None,
        member_key: str | None = None,
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
        return self.member_key is None or (
            member_key is not None and fnmatch.fnmatchcase(member_key, self.member_key)
        )


def template_problem(template: str, placeholders: tuple[str, ...]) -> str | None:
    """Why `template` cannot make an instance id (None when it can): only `{name}` placeholders
    from `placeholders`, no index, attribute, conversion or format spec, non-empty, bounded."""
    if not template:
        return "an empty instance id"
    try:
        parts = list(string.Formatter().parse(template))
    except ValueError as exc:
        return f"not a template: {exc} (write {{{{ and }}}} for literal braces)"
    literal = 0
    for text, name, spec, conversion in parts:
        literal += len(text)
        if name is None:
            continue
        if name not in placeholders:
            return f"unknown placeholder {{{name}}} (known: {', '.join('{' + p + '}' for p in placeholders)})"
        if spec or conversion:
            return f"placeholder {{{name}}} takes no format spec or conversion"
    if literal > MAX_INSTANCE_ID_CHARS:
        return f"longer than {MAX_INSTANCE_ID_CHARS} characters"
    return None


def render_instance_id(template: str, *, client_id: str, ordinal: int, member_key: str = "") -> str:
    """The instance id a checked template (`template_problem` is None) makes for one member."""
    return template.format(client_id=client_id, ordinal=ordinal, member_key=member_key)


def read_selector(reader: YamlReader, node: yaml.Node, path: str, keys: tuple[str, ...]) -> MemberSelector:
    """A `match:` mapping with the selector keys this kind of file allows."""
    fields = reader.mapping(node, path, keys)
    if "all" in fields and not reader.boolean(fields["all"], f"{path}.all"):
        raise reader.fail(fields["all"], f"{path}.all", "only `all: true` makes sense")

    def glob(key: str) -> str | None:
        return reader.string(fields[key], f"{path}.{key}") if key in fields else None

    return MemberSelector(
        client_id=glob("client_id"),
        ordinal=reader.integer(fields["ordinal"], f"{path}.ordinal", 0, MAX_ORDINAL)
        if "ordinal" in fields
        else None,
        instance_id=glob("instance_id"),
        member_key=glob("member_key"),
        leader=reader.boolean(fields["leader"], f"{path}.leader") if "leader" in fields else None,
    )


def read_instance_id(reader: YamlReader, node: yaml.Node, path: str, placeholders: tuple[str, ...]) -> str:
    template = reader.string(node, path)
    problem = template_problem(template, placeholders)
    if problem is not None:
        raise reader.fail(node, path, problem)
    return template


__all__ = [
    "LEGACY_ACTIONS",
    "MAX_INSTANCE_ID_CHARS",
    "MAX_ORDINAL",
    "PLACEHOLDERS",
    "SELECTOR_KEYS",
    "MemberSelector",
    "Membership",
    "read_instance_id",
    "read_selector",
    "render_instance_id",
    "template_problem",
]
