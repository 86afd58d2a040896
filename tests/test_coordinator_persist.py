"""The coordinator's log (issue 15): what it writes, as Kafka writes __consumer_offsets, and what a
coordinator loading it serves (GroupMetadataManager.replay / onLoaded), in the sans-IO core; and
the served log's file (replay.state_log): damage is read up to, reported and set aside."""

from __future__ import annotations

import signal
import socket
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from replay.coordinator import CoordinatorConfig, GroupCoordinator, GroupState, Record
from replay.coordinator import requests as Q
from replay.coordinator.records import (
    CoordinatorEpochRecord,
    GroupMetadataRecord,
    OffsetCommitRecord,
    OffsetCommitValue,
)
from replay.state_log import DAMAGED_FILE, RECORDS_FILE, StateLog, decode_line, encode_line, read_log
from tests.coordinator_sim import Sim
from tests.test_coordinator import form_group

E = ErrorCode
WRITING = CoordinatorConfig(group_initial_rebalance_delay_ms=0, write_records=True)


def restarted(sim: Sim, at_ms: int, before: tuple[Record, ...] = ()) -> Sim:
    """A new coordinator loaded from the log: `before` (what earlier runs wrote) and `sim`'s
    records, each through its log line and back."""
    log = [*before, *sim.records]
    records = [decode_line(encode_line(r)[:-1]) for r in log]
    assert records == log
    again = Sim(sim.config, now_ms=at_ms)
    again.coordinator.load(records, at_ms)
    again.tick(at_ms)  # collects the epoch record the load appended
    return again


def test_a_completed_generation_and_offsets_survive_a_restart() -> None:
    sim = Sim(WRITING)
    ids = form_group(sim, [(1, "static-a"), (2, None), (3, "static-c")])
    group = sim.coordinator.groups["g"]
    leader, generation = group.leader_id, group.generation_id
    sim.call(1, 8, Q.offset_commit(8, "g", generation, ids[1], {("t", 0): 5, ("t", 1): 9}))
    kinds = [type(r).__name__ for r in sim.records]
    assert kinds.count("GroupMetadataRecord") >= 1 and kinds.count("OffsetCommitRecord") == 2
    written = [r for r in sim.records if isinstance(r, GroupMetadataRecord)][-1]
    assert written.value is not None and written.value.generation == generation

    again = restarted(sim, sim.now_ms + 1_000)
    loaded = again.coordinator.groups["g"]
    assert loaded.state is GroupState.STABLE
    assert (loaded.generation_id, loaded.leader_id, loaded.protocol_name) == (generation, leader, "range")
    assert loaded.static_members == {"static-a": ids[1], "static-c": ids[3]}
    for member_id, member in group.members.items():
        back = loaded.members[member_id]
        assert (back.identity, back.session_timeout_ms, back.rebalance_timeout_ms, back.assignment) == (
            member.identity,
            member.session_timeout_ms,
            member.rebalance_timeout_ms,
            member.assignment,
        )
    assert {tp: o.offset for tp, o in again.coordinator.offsets.of("g").items()} == {("t", 0): 5, ("t", 1): 9}
    # The members carry on with their ids and generation: no rebalance.
    for conn, member_id in ids.items():
        assert again.heartbeat(conn, 3, generation, member_id).error_code == E.none
    assert (
        again.call(1, 8, Q.offset_commit(8, "g", generation, ids[2], {("t", 0): 6}))
        .topics[0]
        .partitions[0]
        .error_code
        == E.none
    )
    assert "rebalance_started" not in again.kinds()
    # The restart is epoch 1: a new member's id is not one the first run issued.
    assert again.records[0] == CoordinatorEpochRecord(1)
    joined = again.answer(again.join(4, 4))  # MEMBER_ID_REQUIRED with the id it will have
    assert joined is not None and joined.error_code == E.member_id_required
    assert joined.member_id not in ids.values() and "-0001-" in joined.member_id


def test_members_that_do_not_come_back_expire_after_their_session_timeout() -> None:
    """onLoaded: every loaded member's heartbeat deadline starts at the load."""
    sim = Sim(WRITING)
    ids = form_group(sim, [(1, None), (2, None)])
    generation = sim.coordinator.groups["g"].generation_id
    load_ms = sim.now_ms + 60_000
    again = restarted(sim, load_ms)
    for at in range(load_ms + 3_000, load_ms + 30_000, 3_000):
        again.run_timers(at)
        assert again.heartbeat(1, 3, generation, ids[1]).error_code in (E.none, E.rebalance_in_progress)
    expired = [e.member_id for e in again.events if e.event == "member_expired"]
    assert expired == [ids[2]]  # session timeout 10 s after the load
    assert again.coordinator.groups["g"].state is GroupState.PREPARING_REBALANCE


def test_a_group_is_loaded_as_of_its_last_record() -> None:
    """A rebalance in progress at the crash is not in the log: the last generation comes back."""
    sim = Sim(WRITING)
    ids = form_group(sim, [(1, None), (2, None)])
    generation = sim.coordinator.groups["g"].generation_id
    sim.join(1, 3, ids[1])  # a rejoin starts a rebalance; then the coordinator dies
    assert sim.state() == "PreparingRebalance"
    again = restarted(sim, sim.now_ms + 1)
    assert again.state() == "Stable" and again.coordinator.groups["g"].generation_id == generation


def test_a_replaced_static_member_id_is_persisted() -> None:
    """kafkatest's test_static_consumer_persisted_after_rejoin: a static member that restarts gets
    a new member id (updateStaticMemberAndRebalance writes the group); after a coordinator move the
    new id is the member's and the old one is fenced."""
    sim = Sim(WRITING)
    ids = form_group(sim, [(1, "s1"), (2, "s2")])
    generation = sim.coordinator.groups["g"].generation_id
    rejoined = sim.answer(sim.join(1, 5, group_instance_id="s1"))
    assert rejoined is not None and rejoined.error_code == E.none and rejoined.member_id != ids[1]
    again = restarted(sim, sim.now_ms + 1)
    assert again.coordinator.groups["g"].static_members["s1"] == rejoined.member_id
    assert again.heartbeat(1, 3, generation, rejoined.member_id, group_instance_id="s1").error_code == E.none
    fenced = again.heartbeat(1, 3, generation, ids[1], group_instance_id="s1")
    assert fenced.error_code == E.fenced_instance_id


def test_empty_groups_deletions_and_offset_tombstones() -> None:
    sim = Sim(WRITING)
    ids = form_group(sim, [(1, None)])
    generation = sim.coordinator.groups["g"].generation_id
    sim.call(1, 8, Q.offset_commit(8, "g", generation, ids[1], {("t", 0): 1, ("u", 0): 2}))
    sim.call(1, 3, Q.leave_group(3, "g", [(ids[1], None)]))
    sim.run_timers(sim.now_ms + 1)
    assert sim.state() == "Empty"
    sim.call(1, 8, Q.offset_commit(8, "simple", -1, "", {("t", 0): 7}))
    again = restarted(sim, sim.now_ms + 1)
    empty = again.coordinator.groups["g"]
    assert (empty.state, empty.generation_id, empty.protocol_type) == (
        GroupState.EMPTY,
        generation + 1,
        "consumer",
    )
    assert again.coordinator.groups["simple"].protocol_type is None
    assert set(again.coordinator.offsets.of("g")) == {("t", 0), ("u", 0)}

    from tests.test_coordinator_admin import delete_groups, offset_delete

    again.call(1, 0, offset_delete("g", {"u": (0,)}))
    again.call(1, 2, delete_groups("simple"))
    third = restarted(again, again.now_ms + 1, before=tuple(sim.records))
    assert set(third.coordinator.offsets.of("g")) == {("t", 0)}
    assert "simple" not in third.coordinator.groups and not third.coordinator.offsets.has_offsets("simple")
    assert third.records[0] == CoordinatorEpochRecord(2)


def _log_bytes(records: list[Record]) -> bytes:
    return b"".join(encode_line(r) for r in records)


def test_a_damaged_log_is_read_up_to_the_damage(tmp_path: Path) -> None:
    good = [
        OffsetCommitRecord("g", "t", 0, OffsetCommitValue(5, -1, "", 1)),
        OffsetCommitRecord("g", "t", 0, OffsetCommitValue(6, -1, "", 2)),
        OffsetCommitRecord("g", "t", 1, OffsetCommitValue(1, -1, None, 3)),
        OffsetCommitRecord("g", "t", 1, None),
    ]
    data = _log_bytes(good)
    whole = read_log(data)
    assert whole.records == good and whole.damage is None
    cut = read_log(data[:-5])
    assert cut.records == good[:3] and cut.damage is not None and ":4: truncated" in cut.damage
    flipped = bytearray(data)
    flipped[data.index(b'"offset":6') + 9] = ord("7")
    bad_crc = read_log(bytes(flipped))
    assert bad_crc.records == good[:1] and "2: damaged record: CRC" in str(bad_crc.damage)
    assert read_log(b"00000000 {}\n").damage is not None  # a CRC that does not match: not read
    assert "no CRC" in str(read_log(b"garbage\n").damage)

    # The served log: the good part is loaded and compacted, the damaged tail kept aside.
    (tmp_path / RECORDS_FILE).write_bytes(data[:-5])
    log, contents = StateLog.open(tmp_path)
    assert contents.records == good[:3] and contents.damage is not None
    log.append([CoordinatorEpochRecord(0)])
    log.close()
    assert (tmp_path / DAMAGED_FILE).read_bytes() == data[len(_log_bytes(good[:3])) : -5]
    log, contents = StateLog.open(tmp_path)
    log.close()
    assert contents.damage is None
    assert contents.records == [good[1], good[2], CoordinatorEpochRecord(0)]


def test_loading_nothing_is_epoch_zero() -> None:
    coordinator = GroupCoordinator(CoordinatorConfig())
    state = coordinator.load([], 0)
    assert (state.groups, state.offsets, state.epoch) == ({}, 0, 0)


def test_serve_reports_a_damaged_log_and_refuses_an_unusable_state_dir(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.support.serve import ROOT, start_serve

    state = tmp_path / "state"
    state.mkdir()
    good = OffsetCommitRecord("g", "t", 0, OffsetCommitValue(5, -1, "", 1))
    (state / RECORDS_FILE).write_bytes(encode_line(good) + encode_line(good)[:-9])
    process, _ = start_serve("t", "--state-dir", str(state))
    process.terminate()
    process.wait(timeout=10)
    assert process.stderr is not None
    stderr = process.stderr.read()
    assert "Traceback" not in stderr
    assert f"{RECORDS_FILE}:2: truncated record" in stderr and "loaded the 1 records before it" in stderr
    log = read_log((state / RECORDS_FILE).read_bytes())
    # A log with records and no epoch was written by an epoch 0 coordinator: this start is epoch 1.
    assert log.damage is None and log.records == [good, CoordinatorEpochRecord(1)]

    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    serve = [sys.executable, "-m", "group_replay", "coordinator", "serve", "--port", "0"]
    done = subprocess.run(
        [*serve, "--state-dir", str(not_a_dir)],
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2 and "--state-dir" in done.stderr and "Traceback" not in done.stderr


def test_a_loaded_group_over_the_max_size_rebalances() -> None:
    """onLoaded: "Freshly-loaded group is over capacity": a rebalance lets consumers commit."""
    sim = Sim(WRITING)
    form_group(sim, [(1, None), (2, None), (3, None)])
    smaller = Sim(CoordinatorConfig(group_initial_rebalance_delay_ms=0, group_max_size=2), now_ms=sim.now_ms)
    smaller.coordinator.load(sim.records, sim.now_ms)
    assert smaller.state() == "PreparingRebalance"
    assert restarted(sim, sim.now_ms).state() == "Stable"  # the same log under the old limit


def test_records_are_written_only_when_asked() -> None:
    """A record per generation copies every member: only a shell that keeps a log asks for them."""
    sim = Sim()
    ids = form_group(sim, [(1, None)])
    sim.call(1, 8, Q.offset_commit(8, "g", 1, ids[1], {("t", 0): 5}))
    assert sim.records == []
    writing = Sim(WRITING)
    ids = form_group(writing, [(1, None)])
    writing.call(1, 8, Q.offset_commit(8, "g", 1, ids[1], {("t", 0): 5}))
    assert [type(r) for r in writing.records] == [GroupMetadataRecord, OffsetCommitRecord]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_serve_stops_cleanly_on_a_supervisors_signal(signum: int, tmp_path: Path) -> None:
    """`docker stop`, systemd and Kubernetes send SIGTERM: serve shuts down as on Ctrl-C (exit 0,
    no traceback, its state log whole) with a client still connected."""
    from tests.support.serve import start_serve

    state = tmp_path / "state"
    process, port = start_serve("t:1", "--state-dir", str(state), "--events", str(tmp_path / "e.jsonl"))
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        process.send_signal(signum)
        assert process.wait(timeout=20) == 0
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()
    log = read_log((state / RECORDS_FILE).read_bytes())
    assert log.damage is None and log.records == [CoordinatorEpochRecord(0)]  # a fresh state dir
