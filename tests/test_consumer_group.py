"""The reference coordinator's KIP-848 consumer groups (replay.coordinator.consumer), in virtual time.

Expected behaviour is Kafka 4.3.1's (GroupMetadataManager.consumerGroupHeartbeat,
CurrentAssignmentBuilder, UniformAssignor/RangeAssignor); the differential test
(tests/test_consumer_group_differential.py) checks the same sequences against a real broker.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer import (
    ConsumerGroupConfig,
    ConsumerGroupCoordinator,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberSpec,
    MemberState,
    assign,
)
from replay.coordinator.consumer.assignors import java_hash_order, java_string_hash, java_uuid_hash
from tests.support.group_ops import op_lists

FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID = ErrorCode.fenced_member_epoch, ErrorCode.unknown_member_id
GROUP_ID_NOT_FOUND, UNRELEASED_INSTANCE_ID = ErrorCode.group_id_not_found, ErrorCode.unreleased_instance_id
INVALID_REQUEST, UNSUPPORTED_ASSIGNOR = ErrorCode.invalid_request, ErrorCode.unsupported_assignor
FENCED_INSTANCE_ID = ErrorCode.fenced_instance_id


@dataclass
class Client:
    """A well-behaved consumer-protocol client: reports what it owns, releases what it loses."""

    coordinator: ConsumerGroupCoordinator
    member_id: str
    topics: tuple[str, ...] = ("t",)
    instance_id: str | None = None
    assignor: str | None = None
    group_id: str = "g"
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    last: HeartbeatResponse | None = None

    def beat(self, now_ms: int, epoch: int | None = None) -> HeartbeatResponse:
        joining = self.epoch == 0 if epoch is None else epoch == 0
        response = self.coordinator.heartbeat(
            now_ms,
            HeartbeatRequest(
                group_id=self.group_id,
                member_id=self.member_id,
                member_epoch=self.epoch if epoch is None else epoch,
                instance_id=self.instance_id,
                rebalance_timeout_ms=30_000 if joining else -1,
                subscribed_topic_names=self.topics if joining else None,
                server_assignor=self.assignor if joining else None,
                owned={} if joining else dict(self.owned),
            ),
        )
        self.last = response
        if response.error_code == 0:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.owned = dict(response.assignment)
        return response

    def partitions(self) -> list[int]:
        return sorted(p for parts in self.owned.values() for p in parts)


def _coordinator(partitions: int = 4, interval_ms: int = 0) -> ConsumerGroupCoordinator:
    coordinator = ConsumerGroupCoordinator(ConsumerGroupConfig(assignment_interval_ms=interval_ms))
    coordinator.add_topic("t", partitions)
    return coordinator


def _b_joins_and_a_is_asked_to_revoke(coordinator: ConsumerGroupCoordinator) -> tuple[Client, Client]:
    """a joins alone at 0 and takes every partition, b joins at 1, a's heartbeat at 2 is asked to
    revoke some of them for b."""
    a = Client(coordinator, "a")
    a.beat(0)
    b = Client(coordinator, "b")
    b.beat(1)
    a.beat(2)
    return a, b


def test_second_member_waits_until_the_first_releases_its_partitions() -> None:
    coordinator = _coordinator()
    a = Client(coordinator, "a")
    assert a.beat(0).member_epoch == 2 and a.partitions() == [0, 1, 2, 3]  # a new group starts at epoch 1
    b = Client(coordinator, "b")
    joined = b.beat(10)
    group = coordinator.groups["g"]
    assert group.group_epoch == 3 and group.assignment_epoch == 3
    # b's target partitions are still a's: b moves to epoch 3 holding nothing (UNRELEASED_PARTITIONS).
    assert joined.member_epoch == 3 and joined.assignment == {}
    assert group.members["b"].state is MemberState.UNRELEASED_PARTITIONS
    # a must revoke first: it stays at epoch 2 and is told to keep only its target.
    revoke = a.beat(20)
    assert revoke.member_epoch == 2 and len(a.partitions()) == 2
    assert group.members["a"].state is MemberState.UNREVOKED_PARTITIONS
    # a's next heartbeat reports the revocation: it reaches epoch 3, and b then gets the rest.
    assert a.beat(30).member_epoch == 3
    b.beat(40)
    assert sorted(a.partitions() + b.partitions()) == [0, 1, 2, 3] and b.partitions()
    assert group.state.value == "Stable"


def test_errors_of_the_heartbeat() -> None:
    coordinator = _coordinator()
    a = Client(coordinator, "a")
    a.beat(0)
    assert a.beat(1, epoch=5).error_code == FENCED_MEMBER_EPOCH
    assert Client(coordinator, "zz", epoch=3).beat(2).error_code == UNKNOWN_MEMBER_ID
    assert Client(coordinator, "a", group_id="nope", epoch=3).beat(3).error_code == GROUP_ID_NOT_FOUND
    assert Client(coordinator, "q", assignor="sticky").beat(4).error_code == UNSUPPORTED_ASSIGNOR
    # v1 requires a client-generated member id; epoch < -2 is invalid
    assert Client(coordinator, "").beat(5).error_code == INVALID_REQUEST
    assert Client(coordinator, "a").beat(6, epoch=-3).error_code == INVALID_REQUEST
    # leaving with -1 removes the member and bumps the group epoch
    before = coordinator.groups["g"].group_epoch
    assert a.beat(7, epoch=-1).member_epoch == -1
    assert "a" not in coordinator.groups["g"].members and coordinator.groups["g"].group_epoch == before + 1


def test_previous_epoch_with_a_subset_is_accepted() -> None:
    """throwIfConsumerGroupMemberEpochIsInvalid: the answer with the bumped epoch may have been lost."""
    coordinator = _coordinator()
    a, _ = _b_joins_and_a_is_asked_to_revoke(coordinator)
    a.beat(3)  # epoch 3 now, previous 2, owns a subset of its partitions
    assert a.epoch == 3
    assert a.beat(4, epoch=2).error_code == 0
    assert a.beat(5, epoch=0).error_code == 0  # epoch 0 always passes the check


def test_static_member_temporary_leave_keeps_its_partitions() -> None:
    coordinator = _coordinator()
    a = Client(coordinator, "a1", instance_id="pod-a")
    b = Client(coordinator, "b1", instance_id="pod-b")
    a.beat(0)
    b.beat(1)
    for now in range(2, 8):
        a.beat(now)
        b.beat(now)
    held = a.partitions()
    group = coordinator.groups["g"]
    epoch = group.group_epoch
    assert b.beat(10, epoch=-2).member_epoch == -2
    # Another process with the same instance id while a is active: refused.
    assert Client(coordinator, "a2", instance_id="pod-a").beat(11).error_code == UNRELEASED_INSTANCE_ID
    # b comes back under a new member id: same partitions, no group epoch bump.
    b2 = Client(coordinator, "b2", instance_id="pod-b")
    answer = b2.beat(12)
    assert answer.error_code == 0 and group.group_epoch == epoch
    assert sorted(b2.partitions() + held) == [0, 1, 2, 3] and "b1" not in group.members
    # The old member id is fenced by the new one.
    assert Client(coordinator, "b1", instance_id="pod-b", epoch=3).beat(13).error_code == FENCED_INSTANCE_ID


def test_session_timeout_fences_and_rebalance_timeout_fences() -> None:
    coordinator = _coordinator()
    _, b = _b_joins_and_a_is_asked_to_revoke(coordinator)  # and a never comes back
    assert coordinator.groups["g"].members["a"].state is MemberState.UNREVOKED_PARTITIONS
    assert coordinator.next_deadline() == 2 + 30_000  # the rebalance timeout comes before the session's
    coordinator.advance(30_002)
    assert "a" not in coordinator.groups["g"].members
    assert [e.kind for e in coordinator.events if e.member_id == "a"][-1] == "member_fenced"
    b.beat(30_003)
    assert b.partitions() == [0, 1, 2, 3]
    coordinator.advance(30_003 + 45_000)
    assert not coordinator.groups["g"].members
    assert coordinator.events[-1].kind == "member_expired"


def test_assignment_interval_batches_target_assignments() -> None:
    """Kafka 4.3: a new target at most once per group.consumer.assignment.interval.ms (1 s)."""
    coordinator = _coordinator(interval_ms=1000)
    a = Client(coordinator, "a")
    a.beat(0)
    b = Client(coordinator, "b")
    b.beat(100)  # within the interval: b joins at the old assignment epoch with nothing
    group = coordinator.groups["g"]
    assert (group.group_epoch, group.assignment_epoch, b.epoch, b.partitions()) == (3, 2, 2, [])
    a.beat(1000)  # the interval has passed: the new target is computed
    assert group.assignment_epoch == 3


def test_range_assignor_sorts_static_members_first() -> None:
    topic = uuid.UUID(int=1)
    members = [
        MemberSpec("m-b", None, frozenset({topic}), {}),
        MemberSpec("m-a", "z", frozenset({topic}), {}),
        MemberSpec("m-c", None, frozenset({topic}), {}),
    ]
    result = assign("range", members, {topic: 7})
    assert result["m-a"][topic] == frozenset({0, 1, 2})  # static first, one extra
    assert result["m-b"][topic] == frozenset({3, 4})
    assert result["m-c"][topic] == frozenset({5, 6})


def test_uniform_keeps_what_it_can() -> None:
    topic = uuid.UUID(int=1)
    members = [
        MemberSpec("a", None, frozenset({topic}), {topic: frozenset(range(6))}),
        MemberSpec("b", None, frozenset({topic}), {}),
        MemberSpec("c", None, frozenset({topic}), {}),
    ]
    result = assign("uniform", members, {topic: 6})
    assert result["a"][topic] == frozenset({0, 1})
    assert sorted(result["b"][topic] | result["c"][topic]) == [2, 3, 4, 5]


def test_java_hashes() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("polygenelubricants") == -2147483648
    assert java_uuid_hash(uuid.UUID(int=(1 << 64) | 2)) == 3
    # java.util.HashMap order (a JVM's `new HashMap<>()`, put in this order, then keySet(); 22 keys
    # make it resize to 32 buckets).
    keys = [
        "b",
        "a",
        "c",
        "5f8133b3-fce4-5a6a",
        "x-member-1",
        "QwErTy-00",
        "ZZtop",
        "7d9c1d2e-aaaa-4bbb-8ccc-111111111111",
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
        "m1",
        "m2",
        "m3",
        "m4",
        "m5",
        "m6",
        "m7",
        "m8",
        "m9",
        "m10",
        "m11",
        "m12",
        "m13",
    ]
    assert ",".join(java_hash_order(keys)) == (
        "a,b,c,m1,m2,m3,m4,m5,m6,m7,ZZtop,m8,m9,m11,5f8133b3-fce4-5a6a,x-member-1,m10,m13,m12,"
        "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA,QwErTy-00,7d9c1d2e-aaaa-4bbb-8ccc-111111111111"
    )


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    op_lists(("beat", "join", "leave", "static_leave", "wait"), 5, min_size=1, max_size=60),
    st.sampled_from(["uniform", "range"]),
    st.integers(1, 9),
)
def test_invariants_under_any_sequence(ops: list[tuple[str, int]], assignor: str, partitions: int) -> None:  # noqa: C901 - one interpreter over the random operations
    """No partition is owned by two members; a member's epoch never goes down while it stays; once
    every member has heartbeated to a fixed point, the group is Stable and owns every partition of
    every subscribed topic. Members subscribe to "t", "u" or both (by their number), so the uniform
    assignor runs both its homogeneous and heterogeneous builders."""
    coordinator = _coordinator(partitions, interval_ms=0)
    coordinator.add_topic("u", 3)
    subscriptions = (("t",), ("u",), ("t", "u"))
    clients: dict[int, Client] = {}
    now = 0
    epochs: dict[str, int] = {}
    for op, who in ops:
        now += 100
        client = clients.get(who)
        match op:
            case "join" if client is None:
                client = clients[who] = Client(
                    coordinator,
                    f"m{who}-{now}",
                    topics=subscriptions[who % 3],
                    instance_id=f"pod-{who}" if who % 2 else None,
                    assignor=assignor,
                )
                client.beat(now)
            case "beat" if client is not None:
                client.beat(now)
            case "leave" if client is not None:
                client.beat(now, epoch=-1)
                del clients[who]
            case "static_leave" if client is not None and client.instance_id is not None:
                client.beat(now, epoch=-2)
                del clients[who]
            case "wait":
                now += 50_000
                coordinator.advance(now)
                for key, c in list(clients.items()):
                    if (
                        coordinator.groups.get("g") is None
                        or c.member_id not in coordinator.groups["g"].members
                    ):
                        del clients[key]
        group = coordinator.groups.get("g")
        if group is None:
            continue
        owners: dict[tuple[uuid.UUID, int], str] = {}
        for member in group.members.values():
            for key in member.owned():
                assert key not in owners, f"{key} owned by {owners[key]} and {member.member_id}"
                owners[key] = member.member_id
            if member.member_epoch >= 0:
                assert member.member_epoch >= epochs.get(member.member_id, 0)
                epochs[member.member_id] = member.member_epoch
    group = coordinator.groups.get("g")
    if group is None or not clients:
        return
    # Settle: everyone heartbeats until nothing changes, then the group is Stable and complete.
    for _ in range(12):
        now += 100
        for client in list(clients.values()):
            client.beat(now)
    active = [m for m in group.members.values() if m.member_epoch >= 0]
    if len(active) == len(group.members):
        assert group.state.value == "Stable"
        owned = sorted((t, p) for m in active for t, parts in m.assigned.items() for p in parts)
        names = {n for m in active for n in m.subscribed_topic_names}
        expected = {
            (coordinator.topic_id(n), p) for n in names for p in range(coordinator.topic_partitions[n])
        }
        assert owned == sorted(expected)


def test_kio_adapters_encode_what_serve_will_answer() -> None:
    """replay.coordinator.consumer.wire: responses encode through proxy.wire in v0 and v1."""
    from proxy.wire import decode_request, decode_response, encode_request, encode_response
    from replay.coordinator.consumer.wire import (
        describe_response_to_kio,
        heartbeat_from_kio,
        heartbeat_response_from_kio,
        heartbeat_response_to_kio,
        heartbeat_to_kio,
    )

    coordinator = _coordinator()
    a = Client(coordinator, "a", instance_id="pod-a")
    answer = a.beat(0)
    topic_names = {t.topic_id: t.name for t in coordinator.topics.values()}
    for api_version in (0, 1):
        request = HeartbeatRequest("g", "a", 2, owned=dict(a.owned), api_version=api_version)
        _, decoded = decode_request(encode_request(heartbeat_to_kio(request, api_version), 1, "c")[4:])
        assert heartbeat_from_kio(decoded, api_version) == request
        wire = encode_response(heartbeat_response_to_kio(answer, api_version), 1)
        assert heartbeat_response_from_kio(decode_response(wire[4:], 68, api_version)[1]) == answer
        described = coordinator.describe(["g", "missing"])
        wire = encode_response(describe_response_to_kio(described, api_version, topic_names), 2)
        groups = decode_response(wire[4:], 69, api_version)[1].groups
        assert [int(g.error_code) for g in groups] == [0, GROUP_ID_NOT_FOUND]
        assert groups[0].group_state == "Stable" and groups[0].assignor_name == "uniform"
        member = groups[0].members[0]
        assert (member.member_id, member.instance_id, int(member.member_epoch)) == ("a", "pod-a", 2)
        assert [tuple(tp.partitions) for tp in member.assignment.topic_partitions] == [(0, 1, 2, 3)]
        assert member.assignment.topic_partitions[0].topic_name == "t"


def test_service_answers_kio_requests_and_respects_classic_groups() -> None:
    """replay.coordinator.consumer.service: what the coordinator's dispatch calls for 68/69."""
    from replay.coordinator.consumer.service import ConsumerGroupService
    from replay.coordinator.consumer.wire import heartbeat_to_kio

    topics = {"t": 2}
    service = ConsumerGroupService(ConsumerGroupConfig(assignment_interval_ms=0), topics)
    classic = {"old-empty": "Empty", "old-busy": "Stable"}
    dropped: list[str] = []

    def beat(group_id: str, epoch: int = 0, member_id: str = "m1") -> Any:
        request = HeartbeatRequest(
            group_id, member_id, epoch, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={}
        )
        return service.heartbeat(
            0, heartbeat_to_kio(request), 1, "client", "/127.0.0.1", classic.get(group_id), dropped.append
        )

    answer = beat("g")
    assert int(answer.error_code) == 0 and int(answer.member_epoch) == 2
    assert [tuple(tp.partitions) for tp in answer.assignment.topic_partitions] == [(0, 1)]
    assert int(beat("old-busy").error_code) == GROUP_ID_NOT_FOUND  # online upgrade not modelled
    assert int(beat("old-busy", epoch=3).error_code) == GROUP_ID_NOT_FOUND
    assert int(beat("old-empty").error_code) == 0 and dropped == ["old-empty"]
    topics["t"] = 3  # serve created a partition: seen at the next heartbeat (epoch bump)
    assert int(beat("g", epoch=2).member_epoch) == 3
    assert service.validate_offset_commit("g", "m1", None, 3, 9) == 0
    assert service.validate_offset_commit("g", "m1", None, 2, 9) == ErrorCode.stale_member_epoch
    # v9+ for the consumer protocol
    assert service.validate_offset_commit("g", "m1", None, 3, 8) == ErrorCode.unsupported_version
    assert service.validate_offset_commit("g", "nobody", None, 3, 9) == UNKNOWN_MEMBER_ID
    assert service.validate_offset_fetch("g", None, -1) == 0
    assert service.handles_classic("g") and not service.handles_classic("other")
    assert {(g.group_id, g.group_state) for g in service.listed_groups()} == {
        ("g", "Stable"),
        ("old-empty", "Stable"),
    }


# ConsumerGroupHeartbeatResponse.json's possible errors (plus UNKNOWN_SERVER_ERROR).
KAFKA_HEARTBEAT_ERRORS = {
    ErrorCode.none, ErrorCode.coordinator_not_available, ErrorCode.unknown_member_id,
    ErrorCode.invalid_request, ErrorCode.group_id_not_found, ErrorCode.group_max_size_reached,
    ErrorCode.fenced_instance_id, ErrorCode.fenced_member_epoch, ErrorCode.unreleased_instance_id,
    ErrorCode.unsupported_assignor, ErrorCode.invalid_regular_expression, ErrorCode.unknown_server_error,
}  # fmt: skip
_TOPIC_T = uuid.uuid5(uuid.NAMESPACE_URL, "group-replay:t")
_hostile_request = st.builds(
    HeartbeatRequest,
    group_id=st.sampled_from(["g", "h", "", " "]),
    member_id=st.sampled_from(["m1", "m2", "m3", "", " "]),
    member_epoch=st.integers(-5, 12) | st.sampled_from([2**31 - 1, -(2**31)]),
    instance_id=st.none() | st.sampled_from(["pod-1", "pod-2", ""]),
    rack_id=st.none() | st.sampled_from(["r1", ""]),
    rebalance_timeout_ms=st.sampled_from([-1, 0, 1, 5000, 2**31 - 1]),
    subscribed_topic_names=st.none()
    | st.lists(st.sampled_from(["t", "u", "missing", ""]), max_size=5).map(tuple)
    | st.just(tuple(f"x{i}" for i in range(2000))),
    subscribed_topic_regex=st.none() | st.sampled_from(["t.*", "("]),
    server_assignor=st.none() | st.sampled_from(["uniform", "range", "sticky"]),
    owned=st.none()
    | st.dictionaries(
        st.sampled_from([_TOPIC_T, uuid.UUID(int=5)]),
        st.frozensets(st.integers(-3, 40), max_size=6),
        max_size=2,
    ),
    api_version=st.sampled_from([0, 1]),
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(st.lists(st.tuples(_hostile_request, st.integers(0, 60_000)), min_size=1, max_size=40))
def test_hostile_heartbeats_get_kafka_errors_never_a_crash(steps: list[tuple[HeartbeatRequest, int]]) -> None:
    """Issue 13 bad input: negative and huge epochs, unknown topics and partitions, 2,000-topic
    subscriptions, an instance id shared by two member ids, bogus assignors: every answer carries
    one of ConsumerGroupHeartbeat's error codes and no partition ever has two owners."""
    coordinator = _coordinator(4, interval_ms=0)
    coordinator.add_topic("u", 2)
    now = 0
    for request, pause_ms in steps:
        now += pause_ms
        coordinator.advance(now)
        answer = coordinator.heartbeat(now, request)
        assert answer.error_code in KAFKA_HEARTBEAT_ERRORS, answer
        if answer.error_code == 0 and answer.assignment is not None:
            for topic_id, parts in answer.assignment.items():
                assert all(
                    0 <= p < coordinator.topic_partitions["t" if topic_id == _TOPIC_T else "u"] for p in parts
                )
        for group in coordinator.groups.values():
            owners: dict[tuple[uuid.UUID, int], str] = {}
            for member in group.members.values():
                for key in member.owned():
                    assert key not in owners, (key, owners[key], member.member_id)
                    owners[key] = member.member_id


def _range_as_kafka_walks_it(members: list[MemberSpec], counts: dict[uuid.UUID, int]) -> dict[str, Any]:
    """RangeAssignor.assignHeterogeneousGroup literally: members in order, topics inner, nextRange."""
    ordered = sorted(
        members, key=lambda m: (0, m.instance_id) if m.instance_id is not None else (1, m.member_id)
    )
    subscribers = {t: sum(t in m.subscribed_topic_ids for m in ordered) for t in counts}
    next_range = dict.fromkeys(counts, 0)
    extra = {t: counts[t] % n for t, n in subscribers.items() if n}
    result: dict[str, Any] = {}
    for m in ordered:
        result[m.member_id] = {}
        for t in sorted(m.subscribed_topic_ids):
            quota = counts[t] // subscribers[t]
            if extra[t] > 0:
                quota += 1
                extra[t] -= 1
            start, end = next_range[t], min(next_range[t] + quota, counts[t])
            next_range[t] = end
            if start < end:
                result[m.member_id][t] = frozenset(range(start, end))
    return result


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.booleans(), st.sets(st.integers(0, 3), min_size=1)), min_size=1, max_size=12),
    st.lists(st.integers(0, 13), min_size=4, max_size=4),
)
def test_range_per_topic_formula_equals_kafkas_walk(
    shape: list[tuple[bool, set[int]]], sizes: list[int]
) -> None:
    counts = {uuid.UUID(int=i + 1): n for i, n in enumerate(sizes)}
    members = [
        MemberSpec(
            f"m{i:02d}",
            f"pod-{i % 5}-{i}" if static else None,
            frozenset(uuid.UUID(int=t + 1) for t in topics),
            {},
        )
        for i, (static, topics) in enumerate(shape)
    ]
    assert assign("range", members, counts) == _range_as_kafka_walks_it(members, counts)


def test_kafka_4_0_behaviour_switches() -> None:
    """ConsumerGroupBehaviour.KAFKA_4_0 (each switch checked against a 4.0.1 broker in
    test_consumer_group_differential.py): groups start at epoch 0, a known member's epoch-0 rejoin
    is fenced, target assignments are not batched, describe leaves out pending revocations."""
    from replay.coordinator.consumer import ConsumerGroupBehaviour

    coordinator = ConsumerGroupCoordinator(
        ConsumerGroupConfig(behaviour=ConsumerGroupBehaviour.KAFKA_4_0, assignment_interval_ms=1000)
    )
    coordinator.add_topic("t", 4)
    a = Client(coordinator, "a")
    assert a.beat(0).member_epoch == 1
    b = Client(coordinator, "b")
    b.beat(100)  # within 4.3's interval, but 4.0 computes the new target at once
    assert coordinator.groups["g"].assignment_epoch == 2
    a.beat(200)  # asked to revoke
    (described,) = coordinator.describe(["g"])
    a_row = next(m for m in described.members if m.member_id == "a")
    assert sum(len(p) for p in a_row.assignment.values()) == 2  # the two pending revocation left out
    assert a.beat(300, epoch=0).error_code == FENCED_MEMBER_EPOCH


def test_an_empty_consumer_group_is_cleaned_up_like_kafka() -> None:
    """Through the coordinator's dispatch: when the last member leaves, the periodic group metadata
    cleanup (offsets.retention.check.interval.ms) deletes the empty consumer group once it holds no
    offsets (GroupMetadataManager.cleanupGroupMetadata / maybeDeleteGroup), so a long-running
    `coordinator serve` does not keep every group a client ever named."""
    from replay.coordinator import CoordinatorConfig, GroupCoordinator, RequestContext
    from replay.coordinator.consumer.wire import heartbeat_to_kio

    coordinator = GroupCoordinator(CoordinatorConfig(offsets_retention_check_interval_ms=1000))
    coordinator.consumer.use_topics({"t": 2})
    context = RequestContext(1, "client", "/127.0.0.1", 1, 7)
    join = HeartbeatRequest("g", "m1", 0, rebalance_timeout_ms=1000, subscribed_topic_names=("t",), owned={})
    (answer,) = coordinator.handle(10, context, heartbeat_to_kio(join))
    assert int(answer.response.member_epoch) == 2
    (left,) = coordinator.handle(20, context, heartbeat_to_kio(HeartbeatRequest("g", "m1", -1)))
    assert int(left.response.error_code) == 0 and coordinator.consumer.is_consumer_group("g")
    assert coordinator.next_deadline() == 1000  # the cleanup, scheduled when the group emptied
    coordinator.advance(1000)
    assert not coordinator.consumer.is_consumer_group("g") and coordinator.next_deadline() is None
