"""Issue 14's real end to end, live: a real classic -> consumer rolling upgrade recorded through the
proxy and replayed as recorded.

On the session's Kafka 4.3.1 broker (`kafka_4x`): Java kafka-clients 4.3.1 and confluent-kafka
consumers join classic through `group-replay proxy --record`, then a rolling restart switches them
one by one to `group.protocol=consumer` (tests/support/migration_story.py). The capture shows both
protocols (`capture show`); replayed as recorded against the reference it tells the recorded story
event for event; replayed as recorded against the same broker (KIP-848 members with their recorded
member ids, epochs from the broker's answers, classic members with the ids the broker gives) the
group goes through the same generations, conversion and final assignments.

What needs no broker runs without one: the same story's capture is in fixtures/captures/
consumer-protocol/ (tests/test_corpus.py replays it, tests/test_corpus_validate.py validates it),
and a classic capture under the upgrade scenario against the broker and the reference is
tests/test_migration_broker.py's scenarios (run in tests/test_consumer_group_migration_differential.py
on the policy brokers).
"""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from group_replay import main as group_replay
from proxy.capture.reader import read_capture
from replay.events import EventName
from replay.live import replay_live
from replay.plan import ReplayPlan, build_plan, recorded_events
from replay.run import replay_reference
from tests.support.corpus import recording_proxy
from tests.support.migration_story import MEMBERS, PARTITIONS, event_story, run_migration_story

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SPEED = 4.0


def _fresh_group(plan: ReplayPlan, group: str) -> ReplayPlan:
    """The plan with its one group renamed: the recorded group still holds the static member that
    left with epoch -2 until its session times out."""
    scripts = tuple(
        dataclasses.replace(
            s, group_id=group, join_template=dataclasses.replace(s.join_template, group_id=group)
        )
        for s in plan.scripts
    )
    (layout,) = plan.partitions.values()
    return dataclasses.replace(plan, scripts=scripts, partitions={group: layout})


def _outcome(events: Iterable[Any]) -> dict[str, Any]:
    """What a live run must share with the recording: the rebalances, the conversion, who spoke
    which protocol in which order, the errors, who left, and the partitions each protocol's
    members were given. Not when each partition moved: at `SPEED` a live run compresses the
    heartbeat gaps that decide it (and the recorded run holds the recorded times)."""
    rows = list(events)
    protocols: dict[str, list[str]] = {}
    for e in rows:
        spoken = protocols.setdefault(e.member_key, [])
        if e.protocol and (not spoken or spoken[-1] != e.protocol):
            spoken.append(e.protocol)
    given = [e for e in rows if e.event == EventName.ASSIGNMENT_RECEIVED]
    received = {(e.protocol, tp) for e in given for tp in e.assignment or ()}
    return {
        "rebalances": sum(e.event == EventName.REBALANCE_STARTED for e in rows),
        "converted": [e.detail for e in rows if e.event == EventName.GROUP_CONVERTED],
        "protocols": protocols,
        "errors": sorted({e.error_code for e in rows if e.error_code}),
        "left": sorted(e.member_key for e in rows if e.event == EventName.MEMBER_LEFT),
        "received": sorted(received),
    }


def test_a_real_rolling_upgrade_is_recorded_and_replays_as_recorded(
    kafka_4x: Any, make_topic: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    began = time.monotonic()
    topic = make_topic(kafka_4x.bootstrap, partitions=PARTITIONS, prefix="migration")
    group = f"migration-{uuid.uuid4().hex[:8]}"
    capture = tmp_path / "migration.pcapng"
    with recording_proxy(kafka_4x.bootstrap, capture) as bootstrap:
        steps = run_migration_story(bootstrap, group, topic)
    assert len(steps) == 1 + len(MEMBERS)
    recorded_s = time.monotonic() - began

    # the capture shows both protocols, and the member that spoke both
    assert group_replay(["capture", "show", str(capture)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert f"group {group}: 3 classic and 3 consumer protocol members; 1 spoke both" in shown
    assert group_replay(["capture", "show", "--format", "jsonl", str(capture)]) == 0
    apis = {json.loads(line)["api"] for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert apis >= {"JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup", "ConsumerGroupHeartbeat"}

    # as recorded against the reference: the recorded story, event for event
    plan = build_plan(read_capture(capture), "e2e-migration")
    recorded = recorded_events(plan)
    assert [e.detail for e in recorded if e.event == EventName.GROUP_CONVERTED] == ["classic -> consumer"]
    assert event_story(replay_reference(plan).events) == event_story(recorded)

    # as recorded against the broker itself: the same rebalances, conversion, protocols, leaves
    live_began = time.monotonic()
    live = replay_live(_fresh_group(plan, f"{group}-replayed"), address=kafka_4x.bootstrap, speed=SPEED)
    assert live.not_run is None
    assert _outcome(live.events) == _outcome(recorded)
    print(
        f"\nrecorded the story in {recorded_s:.0f} s, replayed it live in "
        f"{time.monotonic() - live_began:.0f} s; {time.monotonic() - began:.0f} s in all"
    )
