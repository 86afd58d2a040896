"""The differential scenario library: scripted groups played by `replay.driver` against the
reference coordinator and real Kafka (tests/test_differential.py).

Scenarios follow Kafka's system tests (consumer_test.py test_static_consumer_bounce*,
test_fencing_static_consumer, test_static_consumer_persisted_after_rejoin).
"""

from __future__ import annotations

from typing import Any

from replay.driver import (
    AdminLeave,
    Bounce,
    Commit,
    Describe,
    ForgeMemberId,
    Heartbeat,
    Join,
    Leave,
    MemberSpec,
    Pause,
    Scenario,
    Step,
    Wait,
    form,
)


def _static(key: str, version: int = 9, **kw: Any) -> MemberSpec:
    return MemberSpec(key=key, group_instance_id=key, join_api_version=version, **kw)


def _dynamic(key: str, version: int = 5, **kw: Any) -> MemberSpec:
    return MemberSpec(key=key, join_api_version=version, **kw)


def _bounce_each(names: tuple[str, ...]) -> tuple[Step, ...]:
    steps: list[Step] = []
    for name in names:
        steps += [Bounce(name), Join((name,))]
    return tuple(steps)


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in [
        Scenario(
            "static-rolling-bounce",
            (_static("a"), _static("b", 5), _static("c", 7)),
            (*form("a", "b", "c"), *_bounce_each(("a", "b", "c")), Heartbeat(("a", "b", "c")), Describe()),
            why="test_static_consumer_bounce: restarts within the session timeout cause no rebalance",
        ),
        Scenario(
            "dynamic-rolling-bounce",
            (_dynamic("a"), _dynamic("b"), _dynamic("c")),
            (
                *form("a", "b", "c"),
                Leave("c"),
                Bounce("c"),
                Join(("c", "a", "b")),
                Leave("b"),
                Bounce("b"),
                Join(("b", "a", "c")),
            ),
            why="dynamic members rebalance on every leave and join",
        ),
        Scenario(
            "static-leader-rejoin-v9",
            (_static("a", 9), _static("b", 9)),
            (*form("a", "b"), Bounce("a"), Join(("a",)), Heartbeat(("a", "b")), Describe()),
            why="KIP-814: the rejoining static leader gets SkipAssignment and the member list",
        ),
        Scenario(
            "static-leader-rejoin-v5",
            (_static("a", 5), _static("b", 5)),
            (*form("a", "b"), Bounce("a"), Join(("a",)), Heartbeat(("a", "b"))),
            why="before v9 the rejoining static leader is given the old leader id and no members",
        ),
        Scenario(
            "duplicate-instance-fencing",
            (_static("a"), _static("b"), MemberSpec(key="a-twin", group_instance_id="a", join_api_version=9)),
            (
                *form("a", "b"),
                Join(("a-twin",)),
                Heartbeat(("a",)),
                Commit(("a",)),
                Heartbeat(("a-twin", "b")),
                Commit(("a-twin", "b")),
                Describe(),
            ),
            why="test_fencing_static_consumer: the older process with the same instance id is fenced "
            "on Heartbeat and OffsetCommit (and JoinGroup/SyncGroup)",
        ),
        Scenario(
            "static-session-timeout",
            (_static("a", session_timeout_ms=3000), _static("b", session_timeout_ms=3000)),
            (*form("a", "b"), Pause("b"), Wait(5000), Join(("a",))),
            why="a static member is removed only by the session timeout (or LeaveGroup)",
        ),
        Scenario(
            "batch-leave-static",
            (_static("a"), _static("b"), _static("c")),
            (*form("a", "b", "c"), AdminLeave(("b", "c", "nobody")), Describe(), Join(("a",)), Describe()),
            why="KIP-345 LeaveGroup v3+: administrative batch removal by group.instance.id",
        ),
        Scenario(
            "mixed-static-dynamic",
            (_static("s1"), _dynamic("d1", 7), _static("s2", 5)),
            (
                *form("s1", "d1", "s2"),
                Bounce("s2"),
                Join(("s2",)),
                Leave("d1"),
                Bounce("d1"),
                Join(("d1", "s1", "s2")),
                Describe(),
            ),
            why="static and dynamic members coexist; only the dynamic bounce rebalances",
        ),
        Scenario(
            "pre-v5-client-joins-static-group",
            (_static("a", 5), _static("b", 5), _dynamic("old", 3)),
            (*form("a", "b"), Join(("old", "a", "b")), Heartbeat(("a", "b", "old"))),
            why="a JoinGroup v3 client (no instance id, no MEMBER_ID_REQUIRED) joins static members",
        ),
        Scenario(
            "member-id-required",
            (_dynamic("a", 4), _dynamic("b", 9)),
            (*form("a", "b"), Heartbeat(("a", "b"))),
            why="KIP-394: dynamic members on v4+ first get MEMBER_ID_REQUIRED with their member id",
        ),
        Scenario(
            "static-to-dynamic",
            (_static("a"), _static("b", session_timeout_ms=3000)),
            (
                *form("a", "b"),
                Bounce("b", as_spec=MemberSpec(key="b", join_api_version=9, session_timeout_ms=3000)),
                Join(("b", "a")),
                Heartbeat(("a", "b")),
                Describe(),
            ),
            why="KIP-345 downgrade: a restart without group.instance.id is a new dynamic member; "
            "the old static identity stays until its session times out. (The follower switches: "
            "when a leader's old identity expires Kafka picks the next leader in HashMap order.)",
        ),
        Scenario(
            "invalid-session-timeout",
            (_static("a"), _dynamic("tiny", 5, session_timeout_ms=500)),
            (*form("a"), Join(("tiny",)), Heartbeat(("a",))),
            why="a session timeout below group.min.session.timeout.ms (1000 here) is refused",
        ),
        Scenario(
            "pre-v3-clients",
            (_static("a", 9), _dynamic("v0", 0), _dynamic("v2", 2)),
            (
                *form("a", "v2", "v0"),
                Heartbeat(("a", "v2", "v0")),
                Leave("v0"),
                Join(("a", "v2")),
                Describe(),
            ),
            why="JoinGroup v0 (the session timeout doubles as rebalance timeout) and v2 clients beside a "
            "static v9 member (4.3.1 still serves JoinGroup v0-v9; KIP-896 removed OffsetCommit v0-1 "
            "and OffsetFetch v0)",
        ),
        Scenario(
            "static-rejoin-changes-protocol",
            (_static("a"), _static("b", 5)),
            (
                *form("a", "b"),
                Bounce("b", as_spec=_static("b", 5, protocols=("roundrobin", "range"))),
                Join(("b",)),
                Bounce("a", as_spec=_static("a", 9, protocols=("roundrobin", "range"))),
                Join(("a", "b")),
            ),
            why="updateStaticMemberAndRebalance: a static rejoin in Stable rebalances only when the "
            "group's selected protocol would change (b alone cannot move it; a and b together do)",
        ),
        Scenario(
            "stale-generation-and-unknown-member",
            (_static("a"), _dynamic("d", 5)),
            (
                *form("a", "d"),
                Heartbeat(("a", "d"), generation_offset=-1),
                Heartbeat(("d",), generation_offset=1),
                ForgeMemberId("d"),
                Join(("d",)),
                Heartbeat(("a",)),
            ),
            why="ILLEGAL_GENERATION for stale or future generations; UNKNOWN_MEMBER_ID for a member id "
            "the group never issued",
        ),
        Scenario(
            "commit-to-missing-group",
            (_static("a"),),
            (
                *form("a"),
                Commit(("a",), api_version=8, missing_group=True),
                Commit(("a",), api_version=9, missing_group=True),
            ),
            why="OffsetCommit with a generation to a group that does not exist: ILLEGAL_GENERATION, "
            "except OffsetCommit v9+ on the new coordinator, which says GROUP_ID_NOT_FOUND",
        ),
        Scenario(
            "leave-unknown-group",
            (_static("a"),),
            (AdminLeave(("ghost",)), *form("a"), AdminLeave(("a", "ghost"))),
            why="LeaveGroup v3 for a group that does not exist: per-member UNKNOWN_MEMBER_ID on every "
            "coordinator (the new one's UnknownMemberIdException is mapped back by "
            "GroupCoordinatorService.leaveGroup)",
        ),
    ]
}
