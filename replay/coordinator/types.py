"""Configuration, request context, group states and the outputs of the sans-IO coordinator.

The coordinator is a pure state machine: `GroupCoordinator.handle(now_ms, context, request)` and
`advance(now_ms)` return lists of outputs that the caller interprets (an asyncio server writes
`Respond` frames to connections and appends `Append` records to its log; a replay engine collects
`GroupEvent`s).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Final

from replay.coordinator.records import Append
from replay.events import EventName

INT32_MAX: Final = 2**31 - 1

# Kafka's `GroupCoordinatorConfig` defaults (group.min.session.timeout.ms, ...).
DEFAULT_MIN_SESSION_TIMEOUT_MS: Final = 6_000
DEFAULT_MAX_SESSION_TIMEOUT_MS: Final = 1_800_000
DEFAULT_INITIAL_REBALANCE_DELAY_MS: Final = 3_000
# GroupCoordinator.NewMemberJoinTimeoutMs / GroupMetadataManager.classicGroupNewMemberJoinTimeoutMs
NEW_MEMBER_JOIN_TIMEOUT_MS: Final = 5 * 60 * 1000
# offsets.retention.check.interval.ms and offsets.retention.minutes (7 days), Kafka's defaults.
OFFSETS_RETENTION_CHECK_INTERVAL_MS: Final = 600_000
OFFSETS_RETENTION_MS: Final = 7 * 24 * 60 * 60 * 1000


class KafkaBehaviour(StrEnum):
    """Which Kafka coordinator to imitate where their observable behaviour differs.

    `scala-3.9`: core/.../GroupCoordinator.scala, the default on 3.x brokers.
    `new-coordinator`: group-coordinator/.../GroupMetadataManager.java (3.9 with
    group.coordinator.new.enable=true, the only coordinator on 4.x).
    """

    SCALA_3_9 = "scala-3.9"
    NEW_COORDINATOR = "new-coordinator"


@dataclass(frozen=True, slots=True)
class CoordinatorConfig:
    group_min_session_timeout_ms: int = DEFAULT_MIN_SESSION_TIMEOUT_MS
    group_max_session_timeout_ms: int = DEFAULT_MAX_SESSION_TIMEOUT_MS
    group_initial_rebalance_delay_ms: int = DEFAULT_INITIAL_REBALANCE_DELAY_MS
    group_max_size: int = INT32_MAX
    new_member_join_timeout_ms: int = NEW_MEMBER_JOIN_TIMEOUT_MS
    kafka_behaviour: KafkaBehaviour = KafkaBehaviour.SCALA_3_9
    # Where a new member id comes from: None generates them (GroupMetadata.generateMemberId);
    # else called with (client id, group.instance.id) before generating, an id it returns is
    # used (a replay reusing the ids the recorded broker issued). Pure and deterministic.
    member_ids: Callable[[str, str | None], str | None] | None = None
    offsets_retention_check_interval_ms: int = OFFSETS_RETENTION_CHECK_INTERVAL_MS
    offsets_retention_ms: int = OFFSETS_RETENTION_MS
    # Emit the records Kafka writes to __consumer_offsets as `Append` outputs (records.py):
    # on for a shell that keeps a log (serve --state-dir, a scenario's coordinator_restarts).
    write_records: bool = False
    # What FindCoordinator answers (the coordinator itself; the server sets its listener).
    node_id: int = 0
    host: str = "127.0.0.1"
    port: int = 9092


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who sent a request, and how to answer it (the response uses `api_version`)."""

    connection_id: int
    client_id: str
    client_host: str
    api_version: int
    correlation_id: int


class GroupState(StrEnum):
    """ClassicGroupState.java / GroupMetadata.scala states (Kafka's names as DescribeGroups shows them)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


# Target state -> legal previous states (GroupMetadata.scala `validPreviousStates`,
# ClassicGroupState.java `addValidPreviousStates`).
VALID_PREVIOUS_STATES: Final[dict[GroupState, frozenset[GroupState]]] = {
    GroupState.EMPTY: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.PREPARING_REBALANCE: frozenset(
        {GroupState.STABLE, GroupState.COMPLETING_REBALANCE, GroupState.EMPTY}
    ),
    GroupState.COMPLETING_REBALANCE: frozenset({GroupState.PREPARING_REBALANCE}),
    GroupState.STABLE: frozenset({GroupState.COMPLETING_REBALANCE}),
    GroupState.DEAD: frozenset(
        {
            GroupState.STABLE,
            GroupState.PREPARING_REBALANCE,
            GroupState.COMPLETING_REBALANCE,
            GroupState.EMPTY,
            GroupState.DEAD,
        }
    ),
}


class IllegalStateTransition(AssertionError):
    """A transition Kafka's state table forbids: a coordinator bug, never a client error."""


class GroupEventKind(StrEnum):
    """Server-side events; the first six are design section 4's event names (replay.events'
    EventName, the one source), the last is the coordinator's own."""

    MEMBER_JOINED = EventName.MEMBER_JOINED.value
    REBALANCE_STARTED = EventName.REBALANCE_STARTED.value
    GENERATION_COMPLETED = EventName.GENERATION_COMPLETED.value
    MEMBER_LEFT = EventName.MEMBER_LEFT.value
    MEMBER_EXPIRED = EventName.MEMBER_EXPIRED.value
    MEMBER_FENCED = EventName.MEMBER_FENCED.value
    STATE_CHANGED = "state_changed"


@dataclass(frozen=True, slots=True)
class Respond:
    """Send `response` (a kio response entity of the request's api_version) on the context's connection."""

    context: RequestContext
    response: Any


_new_object = object.__new__
_set_context = Respond.__dict__["context"].__set__  # the slots' descriptors: no frozen __setattr__
_set_response = Respond.__dict__["response"].__set__


def respond(context: RequestContext, response: Any) -> Respond:
    """`Respond(context, response)` built slot by slot (what the frozen dataclass's generated
    __init__ does through two `object.__setattr__` calls, in a third of the time): every
    request's answer is one."""
    out: Respond = _new_object(Respond)
    _set_context(out, context)
    _set_response(out, response)
    return out


@dataclass(frozen=True, slots=True)
class GroupEvent:
    """One server-side group event, with the design section 4 columns the coordinator knows.

    `member_key` is not known here (it is a replay-side identity); map it from
    `group_instance_id` or `client_id`. `assignment` is the raw SyncGroup bytes for
    `generation_completed` (decode with the consumer protocol when `protocol_type == "consumer"`).
    """

    ts_ms: int
    event: GroupEventKind
    group_id: str
    generation_id: int
    member_id: str = ""
    group_instance_id: str | None = None
    client_id: str = ""
    protocol_type: str | None = None
    protocol_name: str | None = None
    is_leader: bool = False
    skip_assignment: bool | None = None
    join_api_version: int = -1
    error_code: int = 0
    assignment: bytes | None = None
    from_state: GroupState | None = None
    to_state: GroupState | None = None
    reason: str = ""


# Append: a record for the coordinator's log (records.py), written before the answers after it.
Output = Respond | GroupEvent | Append
