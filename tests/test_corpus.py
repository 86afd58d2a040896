"""The capture corpus (fixtures/captures): real clients recorded through the proxy in front of real
Kafka brokers (`python -m tests.support.corpus record`). No broker is needed here.

- the manifest lists every file, with the checksum of the bytes in the repository;
- every capture reads cleanly (`group-replay capture show`, each RPC decoded);
- an as-recorded replay against the reference coordinator reproduces the recorded rebalances
  (issue 17's done-when), and the manifest's count is what the capture says; a KIP-848 or
  migration capture's replay tells the recorded story event for event;
- the validator compares every capture's recorded run with its reference replay in one Spark job.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from group_replay import main as group_replay
from proxy.capture.reader import Capture, read_capture
from replay.events import EventName, RebalanceEvent
from replay.plan import ReplayInputError, build_plan, recorded_events
from replay.run import replay_reference
from tests.support.corpus import CORPUS_DIR, MANIFEST, Entry, capture_files, load_manifest, sha256_of
from tests.support.migration_story import event_story

ENTRIES = load_manifest()
IDS = [Path(e.file).stem for e in ENTRIES]
CLASSIC = [e for e in ENTRIES if e.protocol == "classic"]
CONSUMER = [e for e in ENTRIES if e.protocol != "classic"]  # KIP-848 members: consumer or mixed


def rebalances(events: list[RebalanceEvent] | tuple[RebalanceEvent, ...]) -> int:
    return sum(e.event == EventName.REBALANCE_STARTED for e in events)


def test_every_capture_is_in_the_manifest_with_its_checksum() -> None:
    on_disk = capture_files()
    assert on_disk, "the corpus is empty"
    assert sorted(e.file for e in ENTRIES) == on_disk
    assert len({e.file for e in ENTRIES}) == len(ENTRIES)
    wrong = [e.file for e in ENTRIES if sha256_of(CORPUS_DIR / e.file) != e.sha256]
    assert wrong == [], f"checksum differs (re-record, or `python -m tests.support.corpus manifest`): {wrong}"
    assert all((CORPUS_DIR / e.file).stat().st_size == e.bytes for e in ENTRIES)


def test_the_manifest_describes_the_matrix() -> None:
    """Every row says who recorded what against which broker; the corpus spans clients, brokers
    and stories (a static bounce, a dynamic rolling restart, a mixed group)."""
    raw = json.loads((CORPUS_DIR / MANIFEST).read_text(encoding="utf-8"))
    assert set(raw["captures"][0]) == set(Entry.__dataclass_fields__)
    for entry in ENTRIES:
        assert entry.client and entry.client_version and entry.scenario and entry.members > 0
        assert Path(entry.file).name.startswith(f"kafka-{entry.broker}--{entry.client}--{entry.story}")
        # the CI job replays the top directory: every classic capture; KIP-848 and migration
        # captures (consumer, mixed) sit in consumer-protocol/
        assert entry.protocol in ("classic", "consumer", "mixed")
        assert ("/" in entry.file) == (entry.protocol != "classic")
    assert {e.broker for e in ENTRIES} >= {"3.9.2", "4.3.1"}
    assert {e.story for e in ENTRIES} >= {"static-bounce", "dynamic-rolling", "mixed"}
    assert len({e.client for e in ENTRIES}) >= 4
    total = sum(e.bytes for e in ENTRIES)
    assert total < 8_000_000, f"the corpus grew to {total} bytes"


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_capture_reads_cleanly(entry: Entry, capsys: pytest.CaptureFixture[str]) -> None:
    path = CORPUS_DIR / entry.file
    capture = read_capture(path)
    assert capture.damage is None
    assert capture.group_settings is not None and capture.group_settings.broker_version
    assert group_replay(["capture", "show", "--format", "jsonl", str(path)]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]
    assert rows and not [r for r in rows if "decode_error" in r]
    group_apis = {"JoinGroup", "SyncGroup", "Heartbeat"}
    if entry.protocol == "consumer":
        group_apis = {"ConsumerGroupHeartbeat"}
    elif entry.protocol == "mixed":
        group_apis |= {"ConsumerGroupHeartbeat"}
    assert {r["api"] for r in rows} >= group_apis


@pytest.mark.parametrize("entry", ENTRIES, ids=IDS)
def test_as_recorded_replay_reproduces_the_recorded_rebalances(entry: Entry) -> None:
    plan = build_plan(read_capture(CORPUS_DIR / entry.file), Path(entry.file).stem)
    recorded = recorded_events(plan)
    assert rebalances(recorded) == entry.recorded_rebalances
    assert len(plan.scripts) == entry.members
    replayed = replay_reference(plan).events
    assert rebalances(replayed) == entry.recorded_rebalances
    assert {e.member_key for e in replayed} == {s.member_key for s in plan.scripts}


@pytest.mark.parametrize("entry", CONSUMER, ids=[Path(e.file).stem for e in CONSUMER])
def test_a_kip848_or_migration_capture_replays_event_for_event(entry: Entry) -> None:
    """KIP-848 members (and members rolled from classic to the consumer protocol) replayed as
    recorded against the reference, each session in its recorded protocol with its recorded
    member id and heartbeat times and the reference's epochs, tell the recorded story event for
    event: the same joins, generations and epochs, partitions revoked and received, conversion
    and leaves, member by member; consumer-protocol rows at the same milliseconds."""
    plan = build_plan(read_capture(CORPUS_DIR / entry.file), Path(entry.file).stem)
    assert plan.uses_consumer_protocol
    recorded = recorded_events(plan)
    assert {e.event for e in recorded} >= {"member_joined", "assignment_received", "member_left"}
    replayed = replay_reference(plan).events
    assert event_story(replayed) == event_story(recorded)
    consumer_rows = [(e.ts_ms, e.event, e.member_key) for e in recorded if e.protocol == "consumer"]
    assert consumer_rows == [(e.ts_ms, e.event, e.member_key) for e in replayed if e.protocol == "consumer"]
    if entry.protocol == "mixed":  # a migration: converted once, static `a` spoke both protocols
        converted = [e.detail for e in replayed if e.event == "group_converted"]
        assert converted == ["classic -> consumer"]
        both = [s.member_key for s in plan.scripts if len(s.protocols) == 2]
        assert both == [e.member_key for e in replayed if e.event == "group_converted"]


def test_a_capture_without_group_members_is_refused_with_a_reason() -> None:
    """The input error replay gives (exit 2) when a capture has nothing to replay."""
    with pytest.raises(ReplayInputError, match="no group requests"):
        build_plan(Capture(header={}, frames=[], damage=None), "empty")
