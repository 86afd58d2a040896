"""The incremental `uniform` target (replay/coordinator/consumer/incremental.py: the next target
from the last one's profile and the members that left or joined since) against the full
computation over every member and the partition-by-partition port of Kafka's
UniformHomogeneousAssignmentBuilder (tests/support/reference_uniform.py), over random groups
and member changes; and the coordinator with the shortcut against the coordinator without it
(answers, events, members, targets)."""

from __future__ import annotations

import uuid
from typing import Any
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.coordinator.consumer import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    assignors,
    incremental,
    target,
)
from replay.coordinator.consumer.assignors import java_hash_order
from replay.coordinator.consumer.group import ConsumerGroup, ConsumerGroupMember
from tests.support.group_ops import heartbeat_of, op_lists
from tests.support.reference_uniform import reference_uniform_homogeneous

_REAL_NEXT_TARGET = incremental.next_target


class _Checked:
    """`incremental.next_target` that also computes, before it moves anything, what the full
    path would (target.py's specs in java_hash_order, assignors.uniform) and Kafka's builder
    as ported partition by partition, and asserts the three agree whenever the shortcut answers."""

    def __init__(self) -> None:
        self.taken = 0
        self.declined = 0

    def __call__(
        self,
        coordinator: ConsumerGroupCoordinator,
        group: ConsumerGroup,
        updated: ConsumerGroupMember,
        member_count: int,
        topic_order: tuple[uuid.UUID, ...],
    ) -> Any:
        member_ids = list(group.members)
        if updated.member_id not in group.members:
            member_ids.append(updated.member_id)
        assert member_count == len(member_ids)
        specs = target._specs(coordinator, group, java_hash_order(member_ids), updated)
        counts = coordinator._partition_counts()
        first = specs[0].member_id
        order = target.topic_ids_order(
            coordinator, group, updated if first == updated.member_id else group.members[first]
        )
        assert order == topic_order  # a homogeneous group's members share their topic order
        full = assignors.uniform(specs, counts, True, order)
        result = _REAL_NEXT_TARGET(coordinator, group, updated, member_count, topic_order)
        if result is None:
            self.declined += 1
            return None
        self.taken += 1
        assert result == full
        # A member the full computation leaves with its very assignment object keeps it here
        # too (reconciliation's identity check: group.reconcile).
        currents = {spec.member_id: spec.assignment for spec in specs}
        assert all(result[m] is full[m] for m in full if full[m] is currents[m])
        subscribed = specs[0].subscribed_topic_ids
        if assignors._topic_order(subscribed) == assignors._target_order(order):
            assert result == reference_uniform_homogeneous(specs, counts)
        return result


_OPS = op_lists(
    ("join", "join", "leave", "leave", "replace", "beat", "round", "grow", "other", "name"), 100, max_size=40
)


class _Run:
    """A uniform group on topic t driven by heartbeats, every answer kept."""

    def __init__(self, partitions: int, interval_ms: int) -> None:
        self.coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(assignment_interval_ms=interval_ms))
        self.coordinator.add_topic("t", partitions)
        self.coordinator.add_topic("u", 3)
        self.clients: dict[str, dict[str, Any]] = {}
        self.seen: list[Any] = []
        self.now = 0
        self.serial = 0

    def beat(self, client: dict[str, Any], epoch: int | None = None, **fields: Any) -> None:
        self.now += 500
        sent = client["epoch"] if epoch is None else epoch
        joining = sent == 0
        request = heartbeat_of(
            client,
            sent,
            rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=client["topics"] if joining or "topics" in fields else None,
            server_assignor=fields.get("assignor"),
            owned={} if joining else dict(client["owned"]),
        )
        answer = self.coordinator.heartbeat(self.now, request)
        self.seen.append(answer)
        if answer.error_code == 0 and sent >= 0:
            client["epoch"] = answer.member_epoch
            if answer.assignment is not None:
                client["owned"] = dict(answer.assignment)

    def join(self, instance: str | None) -> None:
        self.serial += 1
        client = {"id": f"m-{self.serial}", "epoch": 0, "owned": {}, "instance": instance, "topics": ("t",)}
        self.clients[client["id"]] = client
        self.beat(client)

    def step(self, op: str, pick: int) -> None:
        ids = list(self.clients)
        client = self.clients[ids[pick % len(ids)]] if ids else None
        if op == "join" or client is None:
            self.join(f"pod-new-{self.serial}" if pick % 4 == 0 else None)
        elif op in ("leave", "replace"):
            static = op == "replace" and client["instance"] is not None
            self.beat(self.clients.pop(client["id"]), -2 if static else -1)
            if static:
                self.join(client["instance"])  # the same instance id under a new member id
        elif op == "round":
            for other in list(self.clients.values()):
                self.beat(other)
        elif op == "grow":
            self.coordinator.add_topic("t", self.coordinator.topic_partitions["t"] + 1)
            self.beat(client)
        elif op == "other":
            client["topics"] = ("t", "u") if client["topics"] == ("t",) else ("t",)
            self.beat(client, topics=True)
        else:
            self.beat(client, assignor=("uniform" if pick % 2 else "range") if op == "name" else None)


def _drive(ops: list[tuple[str, int]], start: int, partitions: int, interval_ms: int) -> list[Any]:
    """`start` members (every third static), a round of heartbeats, then `ops`: joins, leaves
    (epoch -1), static replacements (-2, then the same instance id under a new member id),
    heartbeats, a round of everyone's, a partition added, a member subscribing to another topic
    too (a heterogeneous group) or back, a member naming an assignor."""
    run = _Run(partitions, interval_ms)
    for index in range(start):
        run.join(f"pod-{index}" if index % 3 == 0 else None)
    run.step("round", 0)
    for op, pick in ops:
        run.step(op, pick)
    group = run.coordinator.groups["g"]
    run.seen.append(list(run.coordinator.events))
    run.seen.append(
        (group.group_epoch, group.assignment_epoch, group.state, dict(group.members), group.target)
    )
    return run.seen


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(2, 40), st.integers(0, 90), st.sampled_from([0, 1000]), _OPS)
def test_incremental_targets_equal_the_full_computation_and_kafkas_builder(
    start: int, partitions: int, interval_ms: int, ops: list[tuple[str, int]]
) -> None:
    """Every target the shortcut gives is the full computation's and the port's (_Checked);
    the run with the shortcut answers, records and ends as the run without it."""
    checked = _Checked()
    with mock.patch.object(incremental, "next_target", checked):
        fast = _drive(ops, start, partitions, interval_ms)
    with mock.patch.object(incremental, "next_target", return_value=None):
        full = _drive(ops, start, partitions, interval_ms)
    assert fast == full


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(20, 60), st.integers(1, 4), st.integers(0, 19), st.data())
def test_a_rolling_restart_takes_the_incremental_path(
    members: int, per_member: int, spare: int, data: st.DataObject
) -> None:
    """The shape the shortcut is for (bench/consumer_group.py's dynamic restart): each member in
    turn leaves and a new one joins, a target between each; with partitions that do not divide
    evenly (`spare`) the last positions take an extra and the `q + 1` holders move."""
    picks = data.draw(st.lists(st.integers(0, 99), min_size=members, max_size=members))
    ops = [op for pick in picks for op in (("leave", pick), ("join", 1), ("round", 0))]
    checked = _Checked()
    with mock.patch.object(incremental, "next_target", checked):
        fast = _drive(ops, members, members * per_member + spare, 0)
    with mock.patch.object(incremental, "next_target", return_value=None):
        full = _drive(ops, members, members * per_member + spare, 0)
    assert fast == full
    # One target per restart (the leave's epoch bump is counted by the join's heartbeat): the
    # member count and so the quotas stay, and every one of them takes the shortcut.
    assert checked.taken >= members, (checked.taken, checked.declined)


def test_the_profile_records_leavers_and_joiners_and_drops_what_it_cannot_follow() -> None:
    """group.TargetProfile's bookkeeping: a leaver's target recorded, a joiner that a target
    already counted not listed again, a member stored later listed, and a member leaving before
    any target counted it ends the profile."""
    coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(assignment_interval_ms=0))
    coordinator.add_topic("t", 8)
    for index in range(4):
        joining = HeartbeatRequest(
            "g", f"m-{index}", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
        )
        coordinator.heartbeat(1_000 + index, joining)
    group = coordinator.groups["g"]
    profile = group.target_profile
    assert profile is not None and profile.result is group.target and len(group.target) == 4
    assert (profile.pending, profile.added, profile.removed) == (None, [], {})
    assert (profile.minimum_quota, profile.big, profile.member_count) == (2, set(), 4)
    leaver = group.target["m-1"]
    coordinator.heartbeat(2_000, HeartbeatRequest("g", "m-1", -1))
    assert group.target_profile is profile and profile.removed == {"m-1": leaver}
    joining = HeartbeatRequest(
        "g", "m-5", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("t",), owned={}
    )
    coordinator.heartbeat(3_000, joining)
    assert group.target["m-5"] == leaver  # the leaver's two partitions, nobody else's moved
    assert group.target_profile is profile and profile.result is group.target
    assert (profile.pending, profile.added, profile.removed, profile.member_count) == (None, [], {}, 4)
    group.update_member(ConsumerGroupMember("m-9", subscribed_topic_names=frozenset({"t"})))
    assert profile.added == ["m-9"]
    group.remove_member("m-9")  # left before any target counted it
    assert group.target_profile is None


@settings(max_examples=30, deadline=None)
@given(st.integers(4, 12), st.integers(0, 30), st.integers(0, 99))
def test_a_static_replacement_in_the_same_target_as_a_leave_and_a_join(
    members: int, partitions: int, pick: int
) -> None:
    """A replacing static member starts from the departed one's target (group.target_of), so it
    is not a new member to the shortcut (which falls back); with a leave and a join in the same
    target the member count, and so the quotas, stay as they were."""
    ops = [("replace", pick * 3), ("leave", pick), ("join", pick), ("round", 0), ("replace", 0), ("round", 0)]
    checked = _Checked()
    with mock.patch.object(incremental, "next_target", checked):
        fast = _drive(ops, members, partitions, 1000)
    with mock.patch.object(incremental, "next_target", return_value=None):
        full = _drive(ops, members, partitions, 1000)
    assert fast == full
