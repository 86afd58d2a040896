"""What every group member shares with the runners: the `GroupMember` interface and its commands.

A member is a sans-IO state machine: the runner passes time in and interprets the commands it
returns,

    start(now_ms) / stop(now_ms, leave) / on_response(now_ms, sent, response) / on_wake(now_ms, wake)
    / on_request_timeout(now_ms, sent)  ->  tuple[Send | WakeAt | Disconnect, ...]

so one runner drives either protocol's member: the classic one (`replay.member.ClassicMember`:
JoinGroup / SyncGroup / Heartbeat) and the KIP-848 one (`replay.consumer_member.ConsumerMember`:
ConsumerGroupHeartbeat), in virtual time against the reference coordinator (`replay.run`) or in
scaled real time over TCP (`replay.live`). Both map their own states onto the lifecycle here
(`MemberState`, the classic client's `AbstractCoordinator.MemberState` plus FATAL), and both read
the client settings they share (retry.backoff.ms, request.timeout.ms) from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum, StrEnum
from typing import Any, Final, NamedTuple, Protocol

from kio.schema.errors import ErrorCode

from proxy.wire.entities import build_tree

RETRY_BACKOFF_MS: Final = 100  # retry.backoff.ms
REQUEST_TIMEOUT_MS: Final = 30_000  # request.timeout.ms


class MemberState(StrEnum):
    """AbstractCoordinator.MemberState, plus FATAL: stopped for good by a non-retriable error."""

    UNJOINED = "unjoined"  # not part of the group: not started, stopped, or restarting
    PREPARING_REBALANCE = "preparing_rebalance"  # JoinGroup sent, or a rejoin scheduled
    COMPLETING_REBALANCE = "completing_rebalance"  # JoinGroup answered, SyncGroup sent
    STABLE = "stable"  # has an assignment, heartbeats
    FATAL = "fatal"  # FENCED_INSTANCE_ID, INVALID_SESSION_TIMEOUT, ...: poll() throws, the app ends


def error_code(name: str) -> int:
    """Kafka's error code by its lower-case name (kio's `ErrorCode`), for the reaction table."""
    return int(ErrorCode[name])


# ---------------------------------------------------------------------------------------------
# Error reactions of both protocols' clients (written once)


class Reaction(Enum):
    ADOPT_MEMBER_ID = "rejoin at once with the member id the coordinator gave (KIP-394)"
    RESET_MEMBER_ID = "forget member id and generation, rejoin at once"
    REJOIN = "rejoin at once, keeping the member id (consumer: epoch 0, partitions lost)"
    RETRY_AFTER_BACKOFF = "retry after retry.backoff.ms (classic: the join; consumer: the heartbeat)"
    RETRY_NOW = "find the coordinator again and retry without backoff"
    FATAL = "stop for good: the Java consumer raises it from poll()"


class Reactions(NamedTuple):
    """What the Java consumer does on one error, per group.protocol."""

    classic: Reaction  # ConsumerCoordinator / AbstractCoordinator
    consumer: Reaction  # AbstractHeartbeatRequestManager (KIP-848)


_ADOPT, _RESET, _REJOIN, _BACKOFF, _NOW, _FATAL = Reaction

# classic, joinGroupIfNeeded: UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, REBALANCE_IN_PROGRESS and
# MEMBER_ID_REQUIRED `continue` (rejoin without backoff); anything else retriable sleeps
# retry.backoff.ms; non-retriable errors are thrown. UNKNOWN_MEMBER_ID resets the member id
# (resetStateOnResponseError(..., shouldResetMemberId=true)); ILLEGAL_GENERATION keeps it
# ("the member ID might still be valid"). FENCED_INSTANCE_ID is fatal on every API (the heartbeat
# thread stores it and poll() throws FencedInstanceIdException). JoinGroupResponseHandler raises
# INCONSISTENT_GROUP_PROTOCOL, INVALID_SESSION_TIMEOUT, INVALID_GROUP_ID, GROUP_AUTHORIZATION_FAILED
# and GROUP_MAX_SIZE_REACHED to the application.
# consumer, AbstractHeartbeatRequestManager.onErrorResponse (Kafka 4.3): NOT_COORDINATOR and
# COORDINATOR_NOT_AVAILABLE reset the backoff (retry once the coordinator is found again);
# COORDINATOR_LOAD_IN_PROGRESS backs off; FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID call
# transitionToFenced and skip the backoff; GROUP_AUTHORIZATION_FAILED, INVALID_REQUEST,
# GROUP_MAX_SIZE_REACHED, UNSUPPORTED_ASSIGNOR and INVALID_REGULAR_EXPRESSION are fatal;
# ConsumerHeartbeatRequestManager.handleSpecificError makes UNRELEASED_INSTANCE_ID and
# FENCED_INSTANCE_ID fatal; every other error is "unexpected" and fatal too (the `default` branch):
# GROUP_ID_NOT_FOUND (a refused online upgrade), INCONSISTENT_GROUP_PROTOCOL, ...
ERROR_REACTIONS: Final[dict[int, Reactions]] = {
    error_code("member_id_required"): Reactions(_ADOPT, _FATAL),
    error_code("unknown_member_id"): Reactions(_RESET, _REJOIN),
    error_code("illegal_generation"): Reactions(_REJOIN, _FATAL),
    error_code("rebalance_in_progress"): Reactions(_REJOIN, _FATAL),
    error_code("fenced_member_epoch"): Reactions(_BACKOFF, _REJOIN),
    error_code("not_coordinator"): Reactions(_BACKOFF, _NOW),
    error_code("coordinator_not_available"): Reactions(_BACKOFF, _NOW),
    error_code("coordinator_load_in_progress"): Reactions(_BACKOFF, _BACKOFF),
    error_code("fenced_instance_id"): Reactions(_FATAL, _FATAL),
    error_code("inconsistent_group_protocol"): Reactions(_FATAL, _FATAL),
    error_code("invalid_session_timeout"): Reactions(_FATAL, _FATAL),
    error_code("invalid_group_id"): Reactions(_FATAL, _FATAL),
    error_code("group_authorization_failed"): Reactions(_FATAL, _FATAL),
    error_code("group_max_size_reached"): Reactions(_FATAL, _FATAL),
}
OTHER_ERRORS: Final = Reactions(_BACKOFF, _FATAL)
"""Any error the table does not list: classic retries it after the backoff, consumer stops."""


def reaction_to(error_code: int) -> Reactions:
    """What the Java consumer does on this error, per protocol."""
    return ERROR_REACTIONS.get(error_code, OTHER_ERRORS)


# ---------------------------------------------------------------------------------------------
# Commands


class Wake(StrEnum):
    HEARTBEAT = "heartbeat"
    REJOIN = "rejoin"


# Commands are NamedTuples: immutable like frozen dataclasses, and one is built per heartbeat on
# the replay's hot path, where a frozen dataclass costs three times as much to construct.
class Send(NamedTuple):
    """Send `request` (a kio entity of `api_version`); answer with `on_response(now, this, response)`."""

    api_key: int
    api_version: int
    request: Any
    incarnation: int


class WakeAt(NamedTuple):
    """Call `on_wake(at_ms, this)` at `at_ms` (stale wakes are ignored by the member)."""

    at_ms: int
    wake: Wake
    incarnation: int
    generation_id: int


class Disconnect(NamedTuple):
    """The member's process is gone: close its connection (a new incarnation opens a new one)."""

    incarnation: int


Command = Send | WakeAt | Disconnect
Commands = tuple[Command, ...]


class GroupMember(Protocol):
    """What a runner drives: the classic member (replay.member), the KIP-848 one (replay.consumer_member)."""

    member_key: str
    incarnation: int
    is_leader: bool
    instance_id: str | None  # a scenario may change it between incarnations
    api_versions: dict[int, int]  # per API key; a scenario or the broker's ApiVersions may lower them

    @property
    def state(self) -> MemberState: ...  # the lifecycle (a KIP-848 member maps its own states on it)

    def start(self, now_ms: int) -> Commands: ...
    def stop(self, now_ms: int, leave: bool) -> Commands: ...
    def on_response(self, now_ms: int, sent: Send, response: Any) -> Commands: ...
    def on_wake(self, now_ms: int, wake: WakeAt) -> Commands: ...
    def on_request_timeout(self, now_ms: int, sent: Send) -> Commands: ...


def from_values(cls: type[Any], values: Mapping[str, Any]) -> Any:
    """A kio entity of class `cls` from plain values (nested entries as mappings, absent = default)."""
    return build_tree(cls, values)


__all__ = [
    "REQUEST_TIMEOUT_MS",
    "RETRY_BACKOFF_MS",
    "Command",
    "Commands",
    "Disconnect",
    "GroupMember",
    "MemberState",
    "Send",
    "Wake",
    "WakeAt",
    "error_code",
    "from_values",
]
