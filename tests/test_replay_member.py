"""The sans-IO classic member: its transition table and the Java consumer's error reactions."""

from __future__ import annotations

import bisect
import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from proxy.wire import response_schema
from proxy.wire.consumer_protocol import decode_assignment, encode_subscription
from replay.member import (
    ERROR_REACTIONS,
    HEARTBEAT,
    JOIN,
    LEAVE,
    RETRY_BACKOFF_MS,
    SYNC,
    VALID_PREVIOUS_STATES,
    ClassicMember,
    Disconnect,
    IllegalMemberTransition,
    JoinSettings,
    MemberState,
    Reaction,
    Send,
    Wake,
    WakeAt,
    companion_versions,
    from_values,
    reaction_to,
)

SUBSCRIPTION = encode_subscription(["orders"])


def member(join_api_version: int = 9, instance_id: str | None = None) -> ClassicMember:
    join = JoinSettings("g", 10_000, 30_000, "consumer", (("range", SUBSCRIPTION),))
    return ClassicMember(
        "c#0",
        "c",
        join,
        instance_id=instance_id,
        api_versions=companion_versions(join_api_version),
        heartbeat_interval_ms=3_000,
        topics={"orders": 4},
    )


def response(send: Send, **values: Any) -> Any:
    return from_values(response_schema(send.api_key, send.api_version), values)


def only_send(commands: tuple[Any, ...], api_key: int) -> Send:
    assert len(commands) == 1 and isinstance(commands[0], Send), commands
    assert commands[0].api_key == api_key
    return commands[0]


def joined_as_leader(m: ClassicMember) -> Send:
    join = only_send(m.start(0), JOIN)
    members = ({"member_id": "c-1", "group_instance_id": m.instance_id, "metadata": SUBSCRIPTION},)
    answer = response(
        join, generation_id=1, protocol_type="consumer", protocol_name="range", leader="c-1", member_id="c-1",
        members=members,
    )  # fmt: skip
    return only_send(m.on_response(10, join, answer), SYNC)


def stable(m: ClassicMember) -> None:
    sync = joined_as_leader(m)
    (wake,) = m.on_response(20, sync, response(sync, protocol_type="consumer", protocol_name="range"))
    assert isinstance(wake, WakeAt) and wake.wake is Wake.HEARTBEAT and wake.at_ms == 3_020


def test_happy_path_follows_the_transition_table() -> None:
    m = member()
    seen = [m.state]
    join = only_send(m.start(0), JOIN)
    seen.append(m.state)
    assert join.api_version == 9 and join.request.member_id == ""
    required = m.on_response(
        1, join, response(join, error_code=ErrorCode.member_id_required, member_id="c-1")
    )
    rejoin = only_send(required, JOIN)
    assert rejoin.request.member_id == "c-1"
    m2 = member()
    sync = joined_as_leader(m2)
    seen.append(m2.state)
    assert sync.api_version == 5 and m2.is_leader
    assignment = {a.member_id: decode_assignment(a.assignment) for a in sync.request.assignments}
    assert assignment == {"c-1": ("orders-0", "orders-1", "orders-2", "orders-3")}
    (wake,) = m2.on_response(20, sync, response(sync))
    seen.append(m2.state)
    beat = only_send(m2.on_wake(wake.at_ms, wake), HEARTBEAT)
    assert beat.api_version == 4 and beat.request.generation_id == 1
    assert seen == [
        MemberState.UNJOINED,
        MemberState.PREPARING_REBALANCE,
        MemberState.COMPLETING_REBALANCE,
        MemberState.STABLE,
    ]
    for before, after in itertools.pairwise(seen):
        assert before in VALID_PREVIOUS_STATES[after]


def test_an_illegal_transition_raises() -> None:
    m = member()
    with pytest.raises(IllegalMemberTransition):
        m._to(MemberState.STABLE)  # UNJOINED -> STABLE skips the rebalance


@pytest.mark.parametrize(
    ("error", "reaction", "keeps_member_id", "delay_ms"),
    [
        (ErrorCode.rebalance_in_progress, Reaction.REJOIN, True, 0),
        (ErrorCode.illegal_generation, Reaction.REJOIN, True, 0),
        (ErrorCode.unknown_member_id, Reaction.RESET_MEMBER_ID, False, 0),
        (ErrorCode.coordinator_not_available, Reaction.RETRY_AFTER_BACKOFF, True, RETRY_BACKOFF_MS),
    ],
)
def test_heartbeat_errors_rejoin_like_the_java_consumer(
    error: ErrorCode, reaction: Reaction, keeps_member_id: bool, delay_ms: int
) -> None:
    assert reaction_to(int(error)).classic is reaction
    m = member()
    stable(m)
    (wake,) = [c for c in m.on_wake(3_020, WakeAt(3_020, Wake.HEARTBEAT, m.incarnation, 1))]
    assert isinstance(wake, Send)
    (rejoin_at,) = m.on_response(3_021, wake, response(wake, error_code=error))
    assert isinstance(rejoin_at, WakeAt) and rejoin_at.wake is Wake.REJOIN
    assert rejoin_at.at_ms == 3_021 + delay_ms
    assert m.state is MemberState.PREPARING_REBALANCE
    join = only_send(m.on_wake(rejoin_at.at_ms, rejoin_at), JOIN)
    assert join.request.member_id == ("c-1" if keeps_member_id else "")


@pytest.mark.parametrize(
    ("api_key", "error"),
    [
        (HEARTBEAT, ErrorCode.fenced_instance_id),
        (JOIN, ErrorCode.fenced_instance_id),
        (JOIN, ErrorCode.invalid_session_timeout),
        (JOIN, ErrorCode.group_max_size_reached),
        (JOIN, ErrorCode.inconsistent_group_protocol),
    ],
)
def test_fatal_errors_stop_the_member_for_good(api_key: int, error: ErrorCode) -> None:
    m = member(instance_id="static-a")
    if api_key == JOIN:
        sent = only_send(m.start(0), JOIN)
    else:
        stable(m)
        sent = only_send(m.on_wake(3_020, WakeAt(3_020, Wake.HEARTBEAT, m.incarnation, 1)), HEARTBEAT)
    commands = m.on_response(5_000, sent, response(sent, error_code=error))
    assert m.state is MemberState.FATAL and m.error_code == int(error)
    assert [type(c) for c in commands] == [Disconnect]
    assert m.start(6_000) == () and m.stop(6_000, leave=True) == ()


def test_stop_leaves_and_ignores_answers_to_the_old_process() -> None:
    m = member()
    stable(m)
    beat = only_send(m.on_wake(3_020, WakeAt(3_020, Wake.HEARTBEAT, m.incarnation, 1)), HEARTBEAT)
    leave, gone = m.stop(3_030, leave=True)
    assert isinstance(leave, Send) and leave.api_key == LEAVE and leave.api_version == 5
    assert leave.request.members[0].member_id == "c-1"
    assert isinstance(gone, Disconnect) and m.state is MemberState.UNJOINED
    assert m.on_response(3_040, beat, response(beat, error_code=ErrorCode.rebalance_in_progress)) == ()
    assert m.on_wake(6_020, WakeAt(6_020, Wake.HEARTBEAT, beat.incarnation, 1)) == ()
    restart = only_send(m.start(4_000), JOIN)
    assert restart.request.member_id == "" and restart.incarnation > beat.incarnation


def test_companion_versions_pair_joingroup_v8_with_leavegroup_v5() -> None:
    """KIP-800 added Reason to JoinGroup v8 and LeaveGroup v5 in the same release (3.2)."""
    assert companion_versions(8) == {JOIN: 8, SYNC: 5, HEARTBEAT: 4, LEAVE: 5}
    assert companion_versions(7) == {JOIN: 7, SYNC: 5, HEARTBEAT: 4, LEAVE: 4}


def test_cooperative_member_advertises_what_it_owns_and_rejoins_after_a_revocation() -> None:
    """ConsumerCoordinator: under COOPERATIVE the subscription carries the owned partitions and
    generation (KIP-429/KIP-792), and a SyncGroup that revokes some makes the member rejoin."""
    from proxy.wire.consumer_protocol import decode_subscription, encode_assignment

    metadata = encode_subscription(["orders"], 2)
    join = JoinSettings("g", 10_000, 30_000, "consumer", (("cooperative-sticky", metadata),))
    m = ClassicMember(
        "c#0", "c", join, instance_id=None, api_versions=companion_versions(9), topics={"orders": 4}
    )
    sync = joined_as_leader(m)
    (wake,) = m.on_response(20, sync, response(sync, assignment=encode_assignment({"orders": [0, 1]})))
    assert wake.wake is Wake.HEARTBEAT and m.owned == (("orders", 0), ("orders", 1))
    beat = only_send(m.on_wake(wake.at_ms, wake), HEARTBEAT)
    (rejoin_at,) = m.on_response(30, beat, response(beat, error_code=ErrorCode.rebalance_in_progress))
    join_again = only_send(m.on_wake(30, rejoin_at), JOIN)
    sent = decode_subscription(join_again.request.protocols[0].metadata)
    assert sent.owned_partitions == (("orders", 0), ("orders", 1)) and sent.generation_id == 1
    assert sent.user_data == (1).to_bytes(4, "big")  # CooperativeStickyAssignor user data: generation
    members = (
        {
            "member_id": "c-1",
            "group_instance_id": None,
            "metadata": sent and join_again.request.protocols[0].metadata,
        },
    )
    answer = response(
        join_again,
        generation_id=2,
        protocol_name="cooperative-sticky",
        leader="c-1",
        member_id="c-1",
        members=members,
    )
    sync2 = only_send(m.on_response(40, join_again, answer), SYNC)
    revoking = m.on_response(50, sync2, response(sync2, assignment=encode_assignment({"orders": [0]})))
    assert [(type(c), c.wake) for c in revoking] == [(WakeAt, Wake.REJOIN)]  # type: ignore[union-attr]
    assert m.owned == (("orders", 0),)


ERRORS = [0, *ERROR_REACTIONS, int(ErrorCode.coordinator_not_available), int(ErrorCode.not_coordinator)]


@settings(max_examples=200, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["answer", "wake", "stop", "start", "timeout"]), st.sampled_from(ERRORS)),
        max_size=40,
    )
)
def test_any_sequence_of_answers_stays_inside_the_transition_table(steps: list[tuple[str, int]]) -> None:
    """Whatever the coordinator answers, the member only moves along VALID_PREVIOUS_STATES (a bad
    move raises IllegalMemberTransition) and FATAL is for good."""
    m = member(instance_id="static-a")
    inflight: list[Send] = list(c for c in m.start(0) if isinstance(c, Send))
    wakes: list[WakeAt] = []
    now = 0
    for action, code in steps:
        now += 100
        was_fatal = m.state is MemberState.FATAL
        commands: tuple[Any, ...] = ()
        if action == "answer" and inflight:
            sent = inflight.pop(0)
            values: dict[str, Any] = {"error_code": code}
            if sent.api_key == JOIN and not code:
                metadata = {"member_id": "c-1", "group_instance_id": "static-a", "metadata": SUBSCRIPTION}
                values |= {"generation_id": 1, "protocol_name": "range", "leader": "c-1", "member_id": "c-1"}
                values["members"] = (metadata,)
            commands = m.on_response(now, sent, response(sent, **values))
        elif action == "wake" and wakes:
            commands = m.on_wake(now, wakes.pop(0))
        elif action == "stop":
            commands = m.stop(now, leave=bool(code % 2))
        elif action == "start":
            commands = m.start(now)
        elif action == "timeout" and inflight:
            commands = m.on_request_timeout(now, inflight.pop(0))
        inflight += [c for c in commands if isinstance(c, Send)]
        wakes += [c for c in commands if isinstance(c, WakeAt)]
        if was_fatal:
            assert m.state is MemberState.FATAL and not [c for c in commands if isinstance(c, Send)]


@settings(max_examples=300, deadline=None)
@given(
    times=st.lists(st.integers(0, 60_000), max_size=40).map(sorted),
    asks=st.lists(st.integers(0, 70_000), min_size=1, max_size=30),
    forward=st.booleans(),
)
def test_next_heartbeat_time_by_cursor_is_the_bisect(
    times: list[int], asks: list[int], forward: bool
) -> None:
    """The member steps a cursor over the recorded heartbeat times (the hot path) instead of a
    bisect per beat: for any sequence of times asked about, a run's forward clock or one that
    jumps back, it picks what the straightforward search picks."""
    m = ClassicMember(
        "c#0", "c", JoinSettings("g", 10_000, 30_000, "consumer", (("range", SUBSCRIPTION),)),
        instance_id=None, api_versions=companion_versions(9), heartbeat_interval_ms=3_000,
        heartbeat_times_ms=times,
    )  # fmt: skip
    for now_ms in sorted(asks) if forward else asks:
        index = bisect.bisect_right(times, now_ms)
        due = times[index] if index < len(times) and times[index] <= now_ms + 6_000 else now_ms + 3_000
        assert m._heartbeat_due(now_ms) == due
