"""The sans-IO KIP-848 member (replay.consumer_member) against the real in-process reference
coordinator, in virtual time: joining with epoch 0, the heartbeat interval the coordinator gives,
reconciliation (revoke before take, acknowledged at once), leaving with -1 / -2, and the Java
consumer's error reactions (rejoin on FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID, fatal on
UNRELEASED_INSTANCE_ID, GROUP_ID_NOT_FOUND, UNSUPPORTED_ASSIGNOR, ...)."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from proxy.wire.consumer_protocol import encode_subscription
from replay.consumer_member import (
    CONSUMER_HEARTBEAT,
    ConsumerMember,
    ConsumerState,
)
from replay.coordinator import CoordinatorConfig, GroupCoordinator, KafkaBehaviour, RequestContext, Respond
from replay.coordinator.consumer import ConsumerGroupConfig
from replay.coordinator.consumer.group import MigrationPolicy
from replay.group_member import Reaction, reaction_to
from replay.member import (
    ClassicMember,
    Disconnect,
    GroupMember,
    JoinSettings,
    MemberState,
    Send,
    Wake,
    WakeAt,
    companion_versions,
)

TOPIC = "orders"


class Loop:
    """Members and the reference coordinator in virtual time: a member's request is handled when
    sent, its answer delivered at the same virtual ms; wakes and coordinator timers in time order."""

    def __init__(self, policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL, partitions: int = 6) -> None:
        self.coordinator = GroupCoordinator(
            CoordinatorConfig(
                group_initial_rebalance_delay_ms=0, kafka_behaviour=KafkaBehaviour.NEW_COORDINATOR
            )
        )
        self.coordinator.consumer.coordinator.config = ConsumerGroupConfig(
            migration_policy=policy, heartbeat_interval_ms=2_000
        )
        self.coordinator.consumer.use_topics({TOPIC: partitions})
        self.now_ms = 0
        self._heap: list[tuple[int, int, str, Any]] = []
        self._seq = itertools.count()
        self._correlation = itertools.count(1)
        self._pending: dict[int, tuple[GroupMember, Send]] = {}
        self._connections: dict[str, int] = {}
        self.log: list[tuple[int, str, Send, Any]] = []  # (ms, member key, request, answer)
        self.dropped: set[str] = set()  # members whose heartbeats are lost (a network partition)
        self.started: dict[str, GroupMember] = {}

    def apply(self, member: GroupMember, commands: Any) -> None:
        for command in commands:
            if isinstance(command, WakeAt):
                heapq.heappush(self._heap, (command.at_ms, next(self._seq), "wake", (member, command)))
            elif isinstance(command, Send):
                self._send(member, command)
            else:
                assert isinstance(command, Disconnect)

    def _send(self, member: GroupMember, send: Send) -> None:
        if member.member_key in self.dropped:
            return
        correlation = next(self._correlation)
        connection = self._connections.setdefault(member.member_key, len(self._connections) + 1)
        context = RequestContext(connection, member.member_key, "/127.0.0.1", send.api_version, correlation)
        self._pending[correlation] = (member, send)
        self._outputs(self.coordinator.handle(self.now_ms, context, send.request))

    def _outputs(self, outputs: list[Any]) -> None:
        for output in outputs:
            if isinstance(output, Respond) and output.context.correlation_id in self._pending:
                member, send = self._pending.pop(output.context.correlation_id)
                heapq.heappush(
                    self._heap, (self.now_ms, next(self._seq), "answer", (member, send, output.response))
                )

    def start(self, member: GroupMember) -> None:
        self.started[member.member_key] = member
        self.apply(member, member.start(self.now_ms))

    def run_until(self, end_ms: int) -> None:
        while True:
            action = self._heap[0][0] if self._heap else None
            deadline = self.coordinator.next_deadline()
            if deadline is not None and (action is None or deadline < action) and deadline <= end_ms:
                self.now_ms = max(self.now_ms, deadline)
                self._outputs(self.coordinator.advance(self.now_ms))
                continue
            if action is None or action > end_ms:
                self.now_ms = end_ms
                return
            at_ms, _, kind, arg = heapq.heappop(self._heap)
            self.now_ms = max(self.now_ms, at_ms)
            if kind == "wake":
                member, wake = arg
                self.apply(member, member.on_wake(self.now_ms, wake))
            else:
                member, send, response = arg
                self.log.append((self.now_ms, member.member_key, send, response))
                self.apply(member, member.on_response(self.now_ms, send, response))
                check_no_partition_owned_twice(self.members())

    def members(self) -> list[ConsumerMember]:
        """Consumer members that can reach the coordinator (a cut-off one still believes it owns
        partitions the coordinator gave away: that is what a network partition does)."""
        return [
            m
            for m in self.started.values()
            if isinstance(m, ConsumerMember) and m.member_key not in self.dropped
        ]


def check_no_partition_owned_twice(members: list[ConsumerMember]) -> None:
    owned: dict[tuple[Any, int], str] = {}
    for member in {id(m): m for m in members}.values():
        for topic_id, partitions in member.owned.items():
            for p in partitions:
                assert (topic_id, p) not in owned, f"{member.member_key} and {owned[(topic_id, p)]} own {p}"
                owned[(topic_id, p)] = member.member_key


def consumer(key: str, instance_id: str | None = None, **kw: Any) -> ConsumerMember:
    return ConsumerMember(key, key, "g", (TOPIC,), instance_id=instance_id, rebalance_timeout_ms=30_000, **kw)


def classic(key: str) -> ClassicMember:
    join = JoinSettings("g", 10_000, 30_000, "consumer", (("range", encode_subscription([TOPIC])),))
    return ClassicMember(
        key, key, join, instance_id=None, api_versions=companion_versions(9), topics={TOPIC: 6}
    )


def heartbeats(loop: Loop, key: str) -> list[tuple[int, Any, Any]]:
    return [(ms, s.request, r) for ms, k, s, r in loop.log if k == key and s.api_key == CONSUMER_HEARTBEAT]


def owned_count(member: ConsumerMember) -> int:
    return sum(len(ps) for ps in member.owned.values())


def test_members_join_with_epoch_zero_and_share_the_partitions() -> None:
    loop = Loop()
    members = [consumer(f"c#{i}") for i in range(3)]
    for m in members:
        loop.start(m)
    loop.run_until(20_000)
    assert all(m.consumer_state is ConsumerState.STABLE and m.state is MemberState.STABLE for m in members)
    assert all(m.member_epoch > 0 for m in members)
    assert sorted(owned_count(m) for m in members) == [2, 2, 2]
    check_no_partition_owned_twice(members)
    first = heartbeats(loop, "c#0")[0][1]
    assert int(first.member_epoch) == 0 and list(first.subscribed_topic_names) == [TOPIC]
    assert first.topic_partitions == () and first.rebalance_timeout.total_seconds() == 30
    # the interval comes from the coordinator's answer (2 s here, not the 5 s default)
    assert members[0].heartbeat_interval_ms == 2_000
    steady = [ms for ms, request, _ in heartbeats(loop, "c#0") if ms > 10_000]
    assert {b - a for a, b in itertools.pairwise(steady)} == {2_000}


def test_a_new_member_gets_partitions_only_after_the_owners_revoked_them() -> None:
    loop = Loop()
    first, second = consumer("c#0"), consumer("c#1")
    loop.start(first)
    loop.run_until(5_000)
    assert owned_count(first) == 6
    loop.start(second)
    loop.run_until(20_000)  # run_until checks after every answer that no partition has two owners
    assert owned_count(first) == 3 and owned_count(second) == 3
    # the owner learnt of the revocation in a heartbeat answer and acknowledged it at once, with the
    # partitions it kept (HeartbeatState: topic partitions are sent when the local assignment changed)
    beats = heartbeats(loop, "c#0")
    shrunk = next(i for i, (_, _, r) in enumerate(beats) if r.assignment is not None and i > 0)
    ack_ms, ack, _ = beats[shrunk + 1]
    assert ack_ms == beats[shrunk][0]
    assert sum(len(tp.partitions) for tp in ack.topic_partitions) == 3
    # a steady heartbeat carries no partitions and no subscription
    assert beats[-1][1].topic_partitions is None and beats[-1][1].subscribed_topic_names is None


def test_dynamic_member_leaves_with_epoch_minus_one_static_with_minus_two() -> None:
    loop = Loop()
    dynamic, static, other = consumer("d#0"), consumer("s#0", instance_id="s"), consumer("o#0")
    for m in (dynamic, static, other):
        loop.start(m)
    loop.run_until(10_000)
    held = dict(static.owned)
    loop.apply(dynamic, dynamic.stop(loop.now_ms, leave=True))
    loop.apply(static, static.stop(loop.now_ms, leave=True))
    loop.run_until(12_000)
    leaves = {k: int(s.request.member_epoch) for _, k, s, _ in loop.log if int(s.request.member_epoch) < 0}
    assert leaves == {"d#0": -1, "s#0": -2}
    group = loop.coordinator.consumer.coordinator.groups["g"]
    assert dynamic.member_id not in group.members
    kept = group.members[static.member_id]
    assert kept.member_epoch == -2 and kept.assigned  # keeps its partitions until its session ends
    # the static member restarts (a new member id) and gets its partitions back (plus its share
    # of the dynamic member's, which the target gave the departed static member meanwhile)
    loop.start(static)
    loop.run_until(30_000)
    assert static.consumer_state is ConsumerState.STABLE
    assert all(held[t] <= static.owned[t] for t in held)
    assert owned_count(other) + owned_count(static) == 6


def test_fenced_member_epoch_rejoins_with_epoch_zero_and_the_same_member_id() -> None:
    loop = Loop()
    member = consumer("c#0")
    loop.start(member)
    loop.run_until(5_000)
    member_id = member.member_id
    member.member_epoch += 5  # an epoch the coordinator never gave: it fences the member
    loop.run_until(10_000)
    codes = [int(r.error_code) for _, _, r in heartbeats(loop, "c#0")]
    assert ErrorCode.fenced_member_epoch in codes
    fenced_at = codes.index(ErrorCode.fenced_member_epoch)
    rejoin = heartbeats(loop, "c#0")[fenced_at + 1][1]
    assert int(rejoin.member_epoch) == 0 and str(rejoin.member_id) == member_id
    assert member.consumer_state is ConsumerState.STABLE and owned_count(member) == 6


def test_unknown_member_id_after_the_session_expired_rejoins() -> None:
    loop = Loop()
    member, other = consumer("c#0"), consumer("c#1")
    loop.start(member)
    loop.start(other)
    loop.run_until(5_000)
    loop.dropped.add("c#0")  # its heartbeats are lost: the coordinator expires it after 45 s
    loop.run_until(60_000)
    assert owned_count(other) == 6
    loop.dropped.clear()
    last = next(s for _, k, s, _ in reversed(loop.log) if k == "c#0")
    loop.apply(member, member.on_request_timeout(loop.now_ms, last))
    loop.run_until(80_000)
    codes = [int(r.error_code) for _, _, r in heartbeats(loop, "c#0")]
    assert ErrorCode.unknown_member_id in codes
    assert member.consumer_state is ConsumerState.STABLE and owned_count(member) == 3


@pytest.mark.parametrize(
    ("setup", "error"),
    [
        ("unreleased_instance_id", ErrorCode.unreleased_instance_id),
        ("unsupported_assignor", ErrorCode.unsupported_assignor),
        ("group_id_not_found", ErrorCode.group_id_not_found),
    ],
)
def test_fatal_errors_stop_the_member(setup: str, error: ErrorCode) -> None:
    loop = Loop(policy=MigrationPolicy.DISABLED)
    match setup:
        case "unreleased_instance_id":  # the instance id is held by a live member
            loop.start(consumer("a#0", instance_id="shared"))
            loop.run_until(3_000)
            victim = consumer("b#0", instance_id="shared")
        case "unsupported_assignor":
            victim = consumer("b#0", server_assignor="sticky")
        case _:  # a live classic group and no online upgrade allowed (policy disabled)
            loop.start(classic("k#0"))
            loop.run_until(3_000)
            victim = consumer("b#0")
    loop.start(victim)
    loop.run_until(10_000)
    assert victim.consumer_state is ConsumerState.FATAL and victim.state is MemberState.FATAL
    assert victim.error_code == error and not victim.owned
    assert [int(r.error_code) for _, _, r in heartbeats(loop, "b#0")] == [error]  # never retried


def test_reaction_table_follows_the_java_heartbeat_request_manager() -> None:
    rejoin = {ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id}
    fatal = {
        ErrorCode.unreleased_instance_id,
        ErrorCode.fenced_instance_id,
        ErrorCode.group_id_not_found,
        ErrorCode.inconsistent_group_protocol,
        ErrorCode.unsupported_assignor,
        ErrorCode.group_max_size_reached,
        ErrorCode.invalid_request,
        ErrorCode.group_authorization_failed,
    }
    assert {c for c in rejoin if reaction_to(c).consumer is Reaction.REJOIN} == rejoin
    assert {c for c in fatal if reaction_to(c).consumer is Reaction.FATAL} == fatal
    assert reaction_to(ErrorCode.coordinator_load_in_progress).consumer is Reaction.RETRY_AFTER_BACKOFF
    assert reaction_to(ErrorCode.not_coordinator).consumer is Reaction.RETRY_NOW


def test_online_upgrade_a_consumer_member_joins_a_live_classic_group() -> None:
    loop = Loop(policy=MigrationPolicy.BIDIRECTIONAL)
    olds = [classic(f"k#{i}") for i in range(2)]
    for m in olds:
        loop.start(m)
    loop.run_until(5_000)
    assert all(m.state is MemberState.STABLE for m in olds)
    new = consumer("c#0")
    loop.start(new)
    loop.run_until(40_000)
    assert loop.coordinator.consumer.is_consumer_group("g")
    assert new.consumer_state is ConsumerState.STABLE and owned_count(new) == 2
    assert all(m.state is MemberState.STABLE and len(m.owned) == 2 for m in olds)
    # a classic member inside a consumer group is told to rejoin and never leads
    assert all(not m.is_leader for m in olds)


def test_stale_answers_and_wakes_are_ignored() -> None:
    loop = Loop()
    member = consumer("c#0")
    loop.start(member)
    loop.run_until(5_000)
    beat = heartbeats(loop, "c#0")[-1]
    stopped = member.stop(loop.now_ms, leave=False)
    assert stopped == (Disconnect(member.incarnation - 1),)
    assert member.state is MemberState.UNJOINED
    sent = next(s for _, k, s, _ in reversed(loop.log) if k == "c#0")
    assert member.on_response(loop.now_ms, sent, beat[2]) == ()
    assert member.on_wake(loop.now_ms, WakeAt(loop.now_ms, Wake.HEARTBEAT, sent.incarnation, 0)) == ()
