"""Sans-IO reference classic group coordinator (Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup
state machine), driven by `handle(now_ms, context, request)`, `advance(now_ms)` and
`next_deadline()`. No sockets, no clock, no asyncio: time is an argument.

Layout (Kafka's names in brackets): core.py routes requests by API key [GroupCoordinatorShard];
parse.py parses each request once; runtime.py holds groups, timers and outputs; rebalance.py,
join.py and classic.py are the classic group manager [GroupMetadataManager]; offsets.py the
offsets [OffsetMetadataManager]; group.py the group and member state [ClassicGroup]; records.py
and persist.py the records of its log [__consumer_offsets, GroupCoordinatorRecordHelpers] and their
loading [GroupMetadataManager.replay]."""

from replay.coordinator.core import (
    SUPPORTED_VERSIONS,
    CoordinatorFault,
    GroupCoordinator,
    Route,
    UnsupportedRequest,
)
from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.records import Append, Record
from replay.coordinator.types import (
    CoordinatorConfig,
    GroupEvent,
    GroupEventKind,
    GroupState,
    IllegalStateTransition,
    KafkaBehaviour,
    Output,
    RequestContext,
    Respond,
)

__all__ = [
    "SUPPORTED_VERSIONS",
    "Append",
    "ClassicGroup",
    "CoordinatorConfig",
    "CoordinatorFault",
    "GroupCoordinator",
    "GroupEvent",
    "GroupEventKind",
    "GroupState",
    "IllegalStateTransition",
    "KafkaBehaviour",
    "Member",
    "Output",
    "Record",
    "RequestContext",
    "Respond",
    "Route",
    "UnsupportedRequest",
]
