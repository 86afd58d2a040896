"""The sans-IO coordinator's memory stays bounded under hostile requests (issue 18 defect 5).

These tests measure the coordinator's own structures (timer heap, groups, protocol counts), not
the process's RSS: what a request sequence leaves behind once Kafka would have cleaned it up.
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from replay.coordinator import CoordinatorConfig
from replay.coordinator import requests as Q
from replay.coordinator.timers import COMPACT_SLACK
from tests.coordinator_sim import Sim

E = ErrorCode
THIRTY_MINUTES = 1_800_000


def join_alone(sim: Sim, group_id: str, **kw: object) -> str:
    """One member joins and syncs an empty group (the join completes on the timer); its id."""
    cid = sim.send(1, 3, Q.join_group(3, group_id, **kw))  # type: ignore[arg-type]
    sim.run_timers(sim.now_ms)
    joined = sim.answer(cid)
    assert joined is not None and joined.error_code == E.none
    sim.call(1, 3, Q.sync_group(3, group_id, joined.generation_id, joined.member_id, assignments={}))
    return str(joined.member_id)


def test_a_heartbeat_storm_leaves_no_pile_of_stale_timer_entries() -> None:
    """Each heartbeat replaces the member's timer; with a 30-minute session every replaced entry
    used to stay in the heap until its deadline (30 minutes later)."""
    sim = Sim()
    member_id = join_alone(sim, "g", session_timeout_ms=THIRTY_MINUTES)
    for _ in range(20_000):
        sim.now_ms += 1
        assert sim.heartbeat(1, 3, 1, member_id).error_code == E.none
    timers = sim.coordinator.timers
    assert len(timers) <= 2
    assert timers.heap_size() <= 2 * len(timers) + COMPACT_SLACK + 1


def test_groups_that_hostile_requests_create_are_cleaned_up_like_kafka() -> None:
    """Groups a client creates and abandons (a v4 JoinGroup that only got MEMBER_ID_REQUIRED, a
    JoinGroup refused for its empty protocol type, an offset commit without partitions) are
    Empty without offsets once their pending members expire: Kafka's periodic
    cleanupGroupMetadata removes them, and then nothing is left, not even a timer."""
    sim = Sim()
    for index in range(3_000):
        required = sim.call(1, 4, Q.join_group(4, f"pending-{index}", session_timeout_ms=6_000))
        assert required.error_code == E.member_id_required
        refused = sim.call(1, 3, Q.join_group(3, f"refused-{index}", protocol_type=""))
        assert refused.error_code == E.inconsistent_group_protocol
        committed = sim.call(1, 8, Q.offset_commit(8, f"commit-{index}", -1, "", {}))
        assert committed.topics == ()
    coordinator = sim.coordinator
    assert len(coordinator.groups) == 9_000
    sim.run_timers(sim.config.offsets_retention_check_interval_ms + 10_000)
    assert coordinator.groups == {}
    assert len(coordinator.timers) == 0 and coordinator.timers.heap_size() == 0
    assert coordinator.next_deadline() is None
    # A group that still holds offsets is kept (Kafka keeps it until the offsets expire).
    sim.call(1, 8, Q.offset_commit(8, "kept", -1, "", {("t", 0): 5}))
    sim.run_timers(sim.now_ms + 2 * sim.config.offsets_retention_check_interval_ms)
    assert list(coordinator.groups) == ["kept"]


def test_offsets_of_an_empty_group_expire_after_the_retention_then_the_group_goes() -> None:
    config = CoordinatorConfig(
        group_initial_rebalance_delay_ms=0,
        offsets_retention_check_interval_ms=1_000,
        offsets_retention_ms=60_000,
    )
    sim = Sim(config)
    member_id = join_alone(sim, "g")
    sim.call(1, 8, Q.offset_commit(8, "g", 1, member_id, {("t", 0): 7}))
    sim.call(1, 3, Q.leave_group(3, "g", [(member_id, None)]))
    assert sim.state() == "Empty"
    sim.run_timers(sim.now_ms + 59_000)
    assert sim.coordinator.offsets.has_offsets("g")  # not yet: the group became Empty < 60 s ago
    sim.run_timers(sim.now_ms + 2_000)
    assert "g" not in sim.coordinator.groups
    assert [e.to_state.value for e in sim.events if e.to_state is not None][-1] == "Dead"


def test_protocol_names_a_member_stops_listing_are_forgotten() -> None:
    sim = Sim()
    member_id = join_alone(sim, "g")
    for index in range(500):
        # The leader rejoins listing a new extra protocol each time: the join completes at once.
        rejoin = sim.call(
            1, 3, Q.join_group(3, "g", member_id, protocols=(("range", b""), (f"p{index}", b"")))
        )
        assert rejoin.error_code == E.none
        sim.call(1, 3, Q.sync_group(3, "g", rejoin.generation_id, member_id, assignments={}))
    assert set(sim.coordinator.groups["g"].supported_protocols) == {"range", "p499"}
