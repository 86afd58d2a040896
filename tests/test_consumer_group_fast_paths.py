"""The consumer coordinator's fast paths against its full path, over random groups.

`steady.steady_heartbeat` answers heartbeats that change nothing from O(1) state; `reconcile`
moves only the epoch of a member whose target is the very assignment it has. Each is compared
with what Kafka's sequence (consumerGroupHeartbeat, CurrentAssignmentBuilder.computeNextAssignment)
as ported in `_heartbeat` / `_next_assignment` gives: the same answers, events, members, targets
and timers, whatever the members do (join, beat, re-send their fields, leave, static leave, go
silent) and whatever the metadata does (partitions added, topics created)."""

from __future__ import annotations

import uuid
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.coordinator.consumer import ConsumerGroupConfig, HeartbeatRequest, target
from replay.coordinator.consumer.assignors import java_hash_order
from replay.coordinator.consumer.classic_members import supports_classic_protocols
from replay.coordinator.consumer.group import (
    ClassicMemberMetadata,
    ConsumerGroup,
    ConsumerGroupMember,
    MemberState,
    _next_assignment,
    reconcile,
)
from replay.coordinator.consumer.service import ConsumerGroupService
from replay.coordinator.consumer.wire import heartbeat_response_from_kio, heartbeat_to_kio
from tests.support.group_ops import heartbeat_of, op_lists

TOPIC = uuid.UUID(int=7)
_SUBSCRIPTIONS = (("t",), ("u",), ("t", "u"), ("t", "later"))
_OPS = op_lists(
    ("join", "join", "beat", "round", "round", "resend", "leave", "static_leave", "wait", "grow"),
    6,
    min_size=1,
    max_size=70,
)


def clients_of(ops: list[tuple[str, int]]) -> set[int]:
    return {who for _, who in ops}


def _drive(  # noqa: C901 - one interpreter over the random operations
    ops: list[tuple[str, int]], assignor: str, interval_ms: int, mixed: bool, via_kio: bool = False
) -> list[Any]:
    """The random operations against a coordinator; `via_kio`: through ConsumerGroupService with
    kio requests (its steady path reads them before any conversion), the kio answers kept."""
    service = ConsumerGroupService(ConsumerGroupConfig(assignment_interval_ms=interval_ms))
    coordinator = service.coordinator
    coordinator.add_topic("t", 12)
    coordinator.add_topic("u", 5)
    clients: dict[int, dict[str, Any]] = {}
    seen: list[Any] = []
    now = 0
    steps = [(op, w) for op, who in ops for w in (sorted(clients_of(ops)) if op == "round" else [who])]
    for op, who in steps:
        op = "beat" if op == "round" else op
        now += 700
        client = clients.get(who)
        request: HeartbeatRequest | None = None
        if op == "join" and client is None:
            client = clients[who] = {
                "id": f"m{who}-{now}",
                "epoch": 0,
                "owned": {},
                "instance": f"pod-{who}" if who % 2 else None,
            }
            request = heartbeat_of(
                client,
                0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=_SUBSCRIPTIONS[who % 4] if mixed else ("t",),
                server_assignor=assignor if who % 3 else None,
                owned={},
            )
        elif client is not None and op in ("beat", "resend", "leave", "static_leave"):
            epoch = {"leave": -1, "static_leave": -2}.get(op, client["epoch"])
            if op == "static_leave" and client["instance"] is None:
                epoch = -1
            resend = op == "resend"
            request = heartbeat_of(
                client,
                epoch,
                rebalance_timeout_ms=30_000 if resend else -1,
                server_assignor=(assignor if who % 3 else None) if resend else None,
                owned=dict(client["owned"]),
            )
            if epoch < 0:
                del clients[who]
        elif op == "wait":
            now += 20_000 * (who + 1)
            coordinator.advance(now)
        elif op == "grow":
            name = ("t", "u", "later")[who % 3]
            coordinator.add_topic(name, coordinator.topic_partitions.get(name, 0) + 1)
        if request is not None and client is not None:
            if via_kio:
                api_version = 1 if who % 2 else 0
                kio_answer = service.heartbeat(
                    now, heartbeat_to_kio(request, api_version), api_version, "", "", None, _drop_nothing
                )
                seen.append(kio_answer)
                answer = heartbeat_response_from_kio(kio_answer)
            else:
                answer = coordinator.heartbeat(now, request)
                seen.append(answer)
            if answer.error_code == 0 and request.member_epoch >= 0:
                client["epoch"] = answer.member_epoch
                if answer.assignment is not None:
                    client["owned"] = dict(answer.assignment)
            elif answer.error_code != 0:
                clients.pop(who, None)
    group = coordinator.groups.get("g")
    seen.append(list(coordinator.events))
    if group is not None:
        seen.append(
            (group.group_epoch, group.assignment_epoch, group.state, dict(group.members), group.target)
        )
        seen.append(sorted((k, coordinator.timers.deadline(k)) for k in coordinator.timers._live))
    return seen


def _drop_nothing(group_id: str) -> None:
    return None


def _java_hash_order(group: ConsumerGroup, member_ids: list[str]) -> list[str]:
    return java_hash_order(member_ids)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_OPS, st.sampled_from(["uniform", "range"]), st.sampled_from([0, 1000]), st.booleans(), st.booleans())
def test_steady_heartbeats_answer_what_the_full_path_answers(
    ops: list[tuple[str, int]], assignor: str, interval_ms: int, mixed: bool, via_kio: bool
) -> None:
    """The fast paths (steady heartbeats, from kio requests too, with their kio answers kept;
    the target's member order from kept hashes, homogeneous specs zipped) against the full
    path (`_heartbeat`, every kio request converted and every answer built, java_hash_order,
    the spec loop)."""
    # A settled group first (where steady heartbeats happen), the random part, a settle again.
    ops = [("join", who) for who in range(5)] + [("round", 0)] * 3 + ops + [("round", 0)] * 3
    fast = _drive(ops, assignor, interval_ms, mixed, via_kio)
    with (
        mock.patch("replay.coordinator.consumer.coordinator.steady_heartbeat", return_value=None),
        mock.patch("replay.coordinator.consumer.service.steady_from_kio", return_value=None),
        mock.patch("replay.coordinator.consumer.target.member_hash_order", _java_hash_order),
        mock.patch("replay.coordinator.consumer.target._homogeneous_specs", target._specs),
    ):
        full = _drive(ops, assignor, interval_ms, mixed, via_kio)
    assert fast == full


@given(st.lists(st.text(min_size=0, max_size=6), max_size=40, unique=True), st.integers(0, 40))
def test_member_hash_order_is_java_hash_order(member_ids: list[str], known: int) -> None:
    """With some of the hashes already kept (members seen by an earlier target) or none."""
    group = ConsumerGroup("g")
    target.member_hash_order(group, member_ids[:known])
    assert target.member_hash_order(group, member_ids) == java_hash_order(member_ids)


@settings(max_examples=200, deadline=None)
@given(
    st.integers(1, 30),
    st.lists(
        st.tuples(st.sampled_from(["leave", "join", "rejoin", "leave_join"]), st.integers(0, 99)), max_size=25
    ),
)
def test_member_hash_order_kept_between_targets_is_java_hash_order(
    start: int, changes: list[tuple[str, int]]
) -> None:
    """The order moved by the members that left and joined since the last target (and rebuilt
    when a member came back, or the table grew) against java_hash_order of the join order."""
    group = ConsumerGroup("g")
    member_ids = [f"m-{i}" for i in range(start)]
    joined = start
    assert target.member_hash_order(group, member_ids) == java_hash_order(member_ids)
    for change, pick in changes:
        if change in ("leave", "leave_join", "rejoin") and member_ids:
            gone = member_ids.pop(pick % len(member_ids))
            if change == "rejoin":
                member_ids.append(gone)  # back at the end of the member dict
        if change in ("join", "leave_join"):
            member_ids.append(f"m-{joined}")
            joined += 1
        assert target.member_hash_order(group, member_ids) == java_hash_order(member_ids)


_PARTS = st.frozensets(st.integers(0, 5), max_size=4)


@given(
    st.dictionaries(st.sampled_from([TOPIC, uuid.UUID(int=8)]), _PARTS, max_size=2),
    st.integers(1, 5),
    st.booleans(),
)
def test_reconciling_to_the_same_target_only_moves_the_epoch(
    assigned: dict[uuid.UUID, frozenset[int]], epoch: int, subscribed_all: bool
) -> None:
    member = ConsumerGroupMember("m", member_epoch=epoch, previous_member_epoch=epoch - 1, assigned=assigned)
    subscribed = frozenset(assigned) if subscribed_all else frozenset({TOPIC})
    fast = reconcile(member, epoch + 1, assigned, subscribed, {}, dict(assigned), False)
    full = _next_assignment(member, epoch + 1, assigned, subscribed, {}, dict(assigned))
    assert fast == full


def test_advanced_to_lists_every_field() -> None:
    member = ConsumerGroupMember(
        "m",
        member_epoch=4,
        previous_member_epoch=3,
        instance_id="pod",
        rack_id="r",
        rebalance_timeout_ms=9,
        client_id="c",
        client_host="h",
        subscribed_topic_names=frozenset({"t"}),
        subscribed_topic_regex="x.*",
        server_assignor="range",
        assigned={TOPIC: frozenset({1})},
    )
    expected = member._replace(member_epoch=6, previous_member_epoch=4, state=MemberState.STABLE)
    assert member.advanced_to(6) == expected


_PROTOCOLS = st.lists(st.sampled_from(["range", "roundrobin", "cooperative-sticky"]), max_size=3)


@given(st.lists(st.tuples(st.booleans(), _PROTOCOLS), max_size=6), st.integers(0, 6), _PROTOCOLS)
def test_supported_classic_protocols_follow_the_members(
    members: list[tuple[bool, list[str]]], leaving: int, names: list[str]
) -> None:
    """supportsClassicProtocols from the counts the group keeps equals the walk over its
    members, through joins, protocol changes (a member joins again) and removals."""
    group = ConsumerGroup("g")
    for index, (classic, protocols) in enumerate(members):
        metadata = ClassicMemberMetadata(45_000, tuple((p, b"") for p in protocols)) if classic else None
        group.update_member(ConsumerGroupMember(f"m{index}", classic=metadata))
        if index % 3 == 2:  # the same member rejoins with the first protocol only, or none
            again = ClassicMemberMetadata(45_000, tuple((p, b"") for p in protocols[:1])) if classic else None
            group.update_member(group.members[f"m{index}"]._replace(classic=again))
    group.remove_member(f"m{leaving}")
    classic_members = [m for m in group.members.values() if m.classic is not None]
    expected = (
        any(all(any(n == name for n, _ in m.classic.protocols) for m in classic_members) for name in names)  # type: ignore[union-attr]
        if group.members
        else bool(names)
    )
    assert supports_classic_protocols(group, "consumer", tuple((n, b"") for n in names)) == expected
