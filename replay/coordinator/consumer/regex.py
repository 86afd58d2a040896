"""Regex subscriptions as Kafka checks, resolves and refreshes them (GroupMetadataManager's
maybeUpdateRegularExpressions, handleRegularExpressionsResult; re2j; Utils.throwIfRegularExpressionIsInvalid,
TopicRegexResolver)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer.group import ConsumerGroup, ConsumerGroupMember
from replay.coordinator.consumer.types import HeartbeatError

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator

REGEX_BATCH_REFRESH_MIN_INTERVAL_MS = 10_000  # GroupMetadataManager

# RE2 (com.google.re2j, what Kafka compiles subscription regexes with) has no lookaround and no
# backreferences; Python's `re` has both. Everything else used in topic patterns reads the same.
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=|\(\?\(")


def regex_error(pattern: str) -> str | None:
    """Why Kafka (re2j) refuses `pattern`, or None (Utils.throwIfRegularExpressionIsInvalid)."""
    if _NOT_RE2.search(pattern):
        return "lookaround, backreferences and conditionals are not RE2 syntax"
    try:
        re.compile(pattern)
    except re.error as exc:
        return str(exc)
    return None


def resolve_regex(pattern: str, topic_names: Iterable[str]) -> frozenset[str]:
    """TopicRegexResolver: the topic names the regex matches entirely (`matcher(name).matches()`)."""
    try:
        compiled = re.compile(pattern)
    except re.error:
        return frozenset()
    return frozenset(name for name in topic_names if compiled.fullmatch(name))


def maybe_update_regexes(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
) -> bool:
    """maybeUpdateRegularExpressions for a changed regex; True is REGEX_UPDATED_AND_RESOLVED
    (the group epoch is bumped now; an unresolved new regex waits for its resolution)."""
    old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
    resolved = False
    require = False
    if new:
        others = sum(
            1
            for m in group.members.values()
            if m.member_id != member.member_id and m.subscribed_topic_regex == new
        )
        if others == 0:
            error = regex_error(new)
            if error is not None:
                raise HeartbeatError(
                    ErrorCode.invalid_regular_expression,
                    f"SubscribedTopicRegex `{new}` is not a valid regular expression: {error}.",
                )
            require = True
        elif new in group.resolved_regexes:
            resolved = True
    elif old:
        resolved = True
    maybe_refresh_regexes(coordinator, now_ms, group, member, updated, require)
    return resolved


def maybe_refresh_regexes(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group: ConsumerGroup,
    member: ConsumerGroupMember,
    updated: ConsumerGroupMember,
    require: bool,
) -> None:
    """The batching part of maybeUpdateRegularExpressions: resolve the group's regexes in the
    background (`{group}-regex` on Kafka's executor; a timer due now here, so it completes
    after this heartbeat's answer), at most every 10 s, when a regex is unresolved, topics
    were created since the last resolution, or group.consumer.regex.refresh.interval.ms passed."""
    subscribed = coordinator._counts_with(group, updated)[1]
    if not require and not subscribed:
        return
    key = f"{group.group_id}-regex"
    if coordinator.timers.is_scheduled(key):
        return
    last = group.last_regex_refresh_ms
    if last is not None and now_ms <= last + REGEX_BATCH_REFRESH_MIN_INTERVAL_MS:
        return
    require = require or len(subscribed) != len(group.resolved_regexes)
    require = require or group.regex_topic_names != frozenset(coordinator.topic_partitions)
    require = require or (last is not None and now_ms > last + coordinator.config.regex_refresh_interval_ms)
    if not require or not subscribed:
        return
    regexes = frozenset(subscribed)

    def resolved(at_ms: int) -> None:
        regexes_resolved(coordinator, at_ms, group.group_id, regexes, now_ms)

    coordinator.timers.schedule(key, now_ms, resolved)


def regexes_resolved(
    coordinator: ConsumerGroupCoordinator,
    now_ms: int,
    group_id: str,
    regexes: frozenset[str],
    started_ms: int,
) -> None:
    """handleRegularExpressionsResult (TopicRegexResolver: a regex resolves to the topic names
    it fully matches)."""
    group = coordinator.groups.get(group_id)
    if group is None:
        return
    names = frozenset(coordinator.topic_partitions)
    bump = False
    still = {m.subscribed_topic_regex for m in group.members.values() if m.subscribed_topic_regex}
    for regex in sorted(regexes):
        if regex not in still:
            continue
        topics = resolve_regex(regex, names)
        if group.resolved_regexes.get(regex, frozenset()) != topics:
            bump = True
        group.resolved_regexes[regex] = topics
    group.last_regex_refresh_ms = started_ms
    group.regex_topic_names = names
    metadata_hash = coordinator._metadata_hash(coordinator._subscribed_names(group, None))
    if bump or metadata_hash != group.metadata_hash:
        group.group_epoch += 1
        group.metadata_hash = metadata_hash


__all__ = [
    "REGEX_BATCH_REFRESH_MIN_INTERVAL_MS",
    "maybe_refresh_regexes",
    "maybe_update_regexes",
    "regex_error",
    "regexes_resolved",
    "resolve_regex",
]
