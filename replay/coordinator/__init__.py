"""Sans-IO reference classic group coordinator (Kafka's JoinGroup/SyncGroup/Heartbeat/LeaveGroup
state machine), driven by `handle(now_ms, context, request)`, `advance(now_ms)` and
`next_deadline()`. No sockets, no clock, no asyncio: time is an argument."""

from replay.coordinator.core import (
    SUPPORTED_VERSIONS,
    CoordinatorFault,
    GroupCoordinator,
    UnsupportedRequest,
)
from replay.coordinator.group import ClassicGroup, Member
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
    "RequestContext",
    "Respond",
    "UnsupportedRequest",
]
