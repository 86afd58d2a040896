"""A scenario's `coordinator_restarts`: the group coordinator moves mid-session (a broker roll).

Kafka's kafkatest `test_static_consumer_persisted_after_rejoin` (tests/kafkatest/tests/client/
consumer_test.py) restarts a static consumer (its member id changes and is written to
__consumer_offsets), then bounces every broker: the coordinator moves, loads the group from the
log, and the consumer must not be fenced. In a reference run the in-process coordinator does the
same: the old one unloads (GroupMetadataManager.onUnloaded: held JoinGroup/SyncGroup answered
NOT_COORDINATOR), a new one loads the records the old one wrote (`GroupCoordinator.load`:
GroupMetadataManager.replay, then onLoaded). A live broker's coordinator is not moved by the
replay (it would take restarting the broker): those runs keep theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from replay.coordinator import GroupCoordinator, Output, Record


def schedule_restarts(runner: Any, settle_ms: int) -> int:
    """Queue the scenario's restarts on `runner` when its transport is the in-process reference
    (`replay.run.CoordinatorTransport`: a `coordinator` and the `records` it wrote); returns when
    the last one is (0 without any), for the run to last past it."""
    transport = runner.transport
    in_process = hasattr(transport, "coordinator") and hasattr(transport, "records")
    if in_process and runner.scenario.coordinator_restarts:  # before any request: a full log
        config = transport.coordinator.config
        transport.coordinator.config = dataclasses.replace(config, write_records=True)
    latest = 0
    for restart in runner.scenario.coordinator_restarts:
        if in_process:
            runner.at(settle_ms + restart.at_ms, move_coordinator, transport)
        latest = max(latest, settle_ms + restart.at_ms)
    return latest


def move_coordinator(now_ms: int, transport: Any) -> None:
    """Replace the transport's coordinator by one loaded from its log."""
    transport.coordinator = moved(
        transport.coordinator, transport.records, now_ms, transport.outputs, transport.configure
    )


def moved(
    old: GroupCoordinator,
    records: list[Record],
    now_ms: int,
    deliver: Callable[[int, list[Output]], None],
    configure: Callable[[GroupCoordinator], None] | None = None,
) -> GroupCoordinator:
    """The coordinator that replaces `old` (same configuration), loaded from its log; `deliver`
    gets the outputs of both (the unloaded groups' answers, the new coordinator's epoch record);
    `configure` sets the new one up as the old was before it loads (the scenario's KIP-848 rules)."""
    deliver(now_ms, old.unload(now_ms))
    new = GroupCoordinator(old.config)
    if configure is not None:
        configure(new)
    new.load(records, now_ms)
    deliver(now_ms, new.advance(now_ms))
    return new


__all__ = ["move_coordinator", "moved", "schedule_restarts"]
