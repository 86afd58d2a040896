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
from enum import StrEnum
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
    """Kafka's error code by its lower-case name (kio's `ErrorCode`), for the reaction tables."""
    return int(ErrorCode[name])


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
