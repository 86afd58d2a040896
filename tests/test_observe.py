"""The client-side observer derives the design-section-4 events from exchanges."""

from __future__ import annotations

import datetime

import kio.schema.heartbeat.v4 as hb
import kio.schema.join_group.v9 as jg
import kio.schema.leave_group.v5 as lg
import kio.schema.sync_group.v5 as sg
from kio.schema.errors import ErrorCode
from kio.static.primitive import i32, i32Timedelta

from proxy.wire.consumer_protocol import encode_assignment
from replay.observe import Exchange, GroupObserver
from tests.support.group_entities import join_request, join_response

ZERO = i32Timedelta.parse(datetime.timedelta(0))


def join(instance_id: str | None, member_id: str = "") -> jg.JoinGroupRequest:
    return join_request(
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def joined(
    member_id: str, generation: int, leader: str, members: tuple[tuple[str, str | None], ...] = ()
) -> jg.JoinGroupResponse:
    return join_response(
        member_id=member_id,
        generation_id=generation,
        leader=leader,
        members=tuple((m, i, b"") for m, i in members),
    )


def join_error(code: ErrorCode, member_id: str = "") -> jg.JoinGroupResponse:
    return join_response(
        member_id=member_id,
        generation_id=-1,
        leader="",
        error_code=code,
        protocol_type=None,
        protocol_name=None,
    )


def sync(member_id: str, generation: int) -> sg.SyncGroupRequest:
    return sg.SyncGroupRequest(
        group_id="g",
        generation_id=i32(generation),
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name="range",
        assignments=(),
    )


def synced(partitions: list[int]) -> sg.SyncGroupResponse:
    return sg.SyncGroupResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        protocol_type="consumer",
        protocol_name="range",
        assignment=encode_assignment({"t": partitions}),
    )


def test_static_group_lifecycle() -> None:
    obs = GroupObserver("s1", "as-recorded", "reference")
    ex = [
        Exchange(0, "a", 11, 9, join("a"), joined("A1", 1, "A1", (("A1", "a"), ("B1", "b")))),
        Exchange(1, "b", 11, 9, join("b"), joined("B1", 1, "A1")),
        Exchange(2, "a", 14, 5, sync("A1", 1), synced([0, 1])),
        Exchange(3, "b", 14, 5, sync("B1", 1), synced([2])),
        # b bounces: a static rejoin with an unknown member id gets the same generation back
        Exchange(4, "b", 11, 9, join("b"), joined("B2", 1, "A1")),
        Exchange(5, "b", 14, 5, sync("B2", 1), synced([2])),
        # the old member id is fenced
        Exchange(
            6,
            "b",
            12,
            4,
            hb.HeartbeatRequest(group_id="g", generation_id=i32(1), member_id="B1", group_instance_id="b"),
            hb.HeartbeatResponse(throttle_time=ZERO, error_code=ErrorCode.fenced_instance_id),
        ),
    ]
    for e in ex:
        obs.observe(e)
    assert [(e.event, e.member_key, e.generation_id) for e in obs.events] == [
        ("rebalance_started", "a", 1),
        ("member_joined", "a", 1),
        ("member_joined", "b", 1),
        ("generation_completed", "a", 1),
        ("assignment_received", "a", 1),  # events format 2: each member's partitions followed
        ("generation_completed", "b", 1),
        ("assignment_received", "b", 1),
        ("member_joined", "b", 1),
        ("generation_completed", "b", 1),  # the same partitions again: nothing received
        ("member_fenced", "b", 1),
    ]
    assert [e.seq for e in obs.events] == list(range(10))
    completed = [e for e in obs.events if e.event == "generation_completed"]
    assert completed[0].assignment == ("t-0", "t-1") and completed[0].is_leader
    assert completed[1].assignment == ("t-2",) and not completed[1].is_leader
    assert obs.events[9].error_code == 82
    assert {(e.protocol, e.group_type, e.member_epoch) for e in obs.events} == {("classic", "classic", None)}
    assert obs.events[1].skip_assignment is False and obs.events[3].skip_assignment is None


def test_member_id_required_expiry_and_batch_leave() -> None:
    obs = GroupObserver("s1", "x", "broker-3.9.1")
    obs.observe(Exchange(0, "c#0", 11, 9, join(None), join_error(ErrorCode.member_id_required, "C1")))
    obs.observe(
        Exchange(1, "c#0", 11, 9, join(None, "C1"), joined("C1", 1, "C1", (("C1", None), ("D1", None))))
    )
    obs.observe(Exchange(1, "d#0", 11, 9, join(None, "D1"), joined("D1", 1, "C1")))
    # generation 2: D1 vanished without leaving -> expired
    obs.observe(Exchange(9, "c#0", 11, 9, join(None, "C1"), joined("C1", 2, "C1", (("C1", None),))))
    leave = lg.LeaveGroupRequest(
        group_id="g", members=(lg.request.MemberIdentity(member_id="C1", reason=None),)
    )
    left = lg.LeaveGroupResponse(
        throttle_time=ZERO,
        error_code=ErrorCode.none,
        members=(
            lg.response.MemberResponse(member_id="C1", group_instance_id=None, error_code=ErrorCode.none),
        ),
    )
    obs.observe(Exchange(10, "c#0", 13, 5, leave, left))
    names = [(e.event, e.member_key, e.error_code) for e in obs.events]
    assert names == [
        ("request_failed", "c#0", 79),
        ("rebalance_started", "c#0", 0),
        ("member_joined", "c#0", 0),
        ("member_joined", "d#0", 0),
        ("rebalance_started", "c#0", 0),
        ("member_joined", "c#0", 0),
        ("member_expired", "d#0", 0),
        ("member_left", "c#0", 0),
    ]


def test_consumer_protocol_exchanges_conversion_epochs_and_partitions() -> None:
    """Events format 2: a classic group seen converted by a ConsumerGroupHeartbeat, epochs as
    rebalances, each member's partitions followed, classic members inside the consumer group
    (answered without a leader), and the leave heartbeat."""
    from uuid import UUID

    from replay.coordinator.consumer.types import HeartbeatRequest, HeartbeatResponse
    from replay.coordinator.consumer.wire import heartbeat_response_to_kio, heartbeat_to_kio

    topic = UUID(int=7)
    obs = GroupObserver("s1", "upgrade", "reference")
    obs.topic_names[topic] = "t"

    def beat(epoch: int, answer_epoch: int, assignment: dict[UUID, frozenset[int]] | None) -> Exchange:
        request = heartbeat_to_kio(HeartbeatRequest("g", "C1", epoch, subscribed_topic_names=("t",)), 1)
        response = heartbeat_response_to_kio(
            HeartbeatResponse(0, None, "C1", answer_epoch, 5_000, assignment), 1
        )
        return Exchange(0, "c", 68, 1, request, response)

    for e in [
        Exchange(0, "a", 11, 9, join("a"), joined("A1", 3, "A1", (("A1", "a"),))),
        Exchange(1, "a", 14, 5, sync("A1", 3), synced([0, 1])),
        beat(0, 4, {}),  # c joins: the group is a consumer group now
        beat(4, 5, {topic: frozenset({1})}),
        Exchange(3, "a", 11, 9, join("a", "A1"), joined("A1", 5, "")),  # a classic follower now
        Exchange(4, "a", 14, 5, sync("A1", 5), synced([0])),
        beat(-1, -1, None),  # c leaves with epoch -1
    ]:
        obs.observe(e)
    rows = [
        (e.event, e.member_key, e.protocol, e.group_type, e.member_epoch, e.assignment) for e in obs.events
    ]
    assert rows == [
        ("rebalance_started", "a", "classic", "classic", None, None),
        ("member_joined", "a", "classic", "classic", None, None),
        ("generation_completed", "a", "classic", "classic", None, ("t-0", "t-1")),
        ("assignment_received", "a", "classic", "classic", None, ("t-0", "t-1")),
        ("group_converted", "c", "consumer", "consumer", 4, None),
        ("rebalance_started", "c", "consumer", "consumer", 4, None),
        ("member_joined", "c", "consumer", "consumer", 4, None),
        ("rebalance_started", "c", "consumer", "consumer", 5, None),
        ("assignment_received", "c", "consumer", "consumer", 5, ("t-1",)),
        ("member_joined", "a", "classic", "consumer", None, None),
        ("generation_completed", "a", "classic", "consumer", None, ("t-0",)),
        ("assignment_revoked", "a", "classic", "consumer", None, ("t-1",)),
        ("member_left", "c", "consumer", "consumer", -1, None),
        ("assignment_revoked", "c", "consumer", "consumer", -1, ("t-1",)),
    ]
    assert obs.events[4].detail == "classic -> consumer"
