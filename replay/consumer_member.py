"""One KIP-848 consumer-protocol member as a sans-IO state machine: the second `GroupMember`.

`ConsumerMember` is what a consumer configured with `group.protocol=consumer` does towards its
group coordinator: ConsumerGroupHeartbeat (API 68) with member epochs, nothing else. It speaks
the same five methods and returns the same commands (`replay.group_member`) as the classic
`replay.member.ClassicMember`, so the runners (`replay.run` in virtual time against the
reference coordinator, `replay.live` over TCP) drive either without knowing which:

    start / stop / on_response / on_wake / on_request_timeout  ->  (Send | WakeAt | Disconnect, ...)

The spec is Kafka 4.3's Java consumer (clients/.../consumer/internals):
- `AbstractMembershipManager` / `ConsumerMembershipManager`: the member states (`MemberState`:
  UNSUBSCRIBED, JOINING, RECONCILING, ACKNOWLEDGING, STABLE, FENCED, LEAVING, FATAL), the member
  epoch taken from every successful answer (onHeartbeatSuccess), reconciliation of a new
  assignment (maybeReconcile: revoke what the target drops before taking what it adds, then
  ACKNOWLEDGING so the next heartbeat - sent at once - carries the owned partitions),
  transitionToFenced (partitions lost, rejoin with epoch 0 keeping the member id, KIP-1082: the
  client generates its member id once per process) and leaveGroup (leaveGroupEpoch: -1 for a
  dynamic member, -2 for a static one, which keeps its partitions until its session expires);
- `ConsumerHeartbeatRequestManager.HeartbeatState.buildRequestData`: a joining member sends every
  field (rebalance timeout = max.poll.interval.ms, subscribed topic names, server assignor, owned
  partitions: none); later heartbeats send only what changed (the owned partitions after a
  reconciliation), and after a failed heartbeat (`resetHeartbeatState`) everything again;
- `AbstractHeartbeatRequestManager.onErrorResponse` and `ConsumerHeartbeatRequestManager.
  handleSpecificError` for the error reactions (`replay.group_member.ERROR_REACTIONS`), and
  `HeartbeatRequestState` for the timing: the next heartbeat one heartbeat interval (from the
  coordinator's answer) after the last, at once after a failure that asks for a rejoin,
  retry.backoff.ms after a retriable one; one heartbeat in flight at a time.

Reconciliation is instantaneous here (the application's rebalance callbacks take no time).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, Final

from proxy.wire import ApiKey
from replay.coordinator.consumer.types import HeartbeatRequest
from replay.coordinator.consumer.wire import heartbeat_to_kio
from replay.group_member import (
    RETRY_BACKOFF_MS,
    Command,
    Commands,
    Disconnect,
    MemberState,
    Reaction,
    Send,
    Wake,
    WakeAt,
    reaction_to,
)

CONSUMER_HEARTBEAT: Final = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
NEWEST_CONSUMER_HEARTBEAT: Final = 1  # KIP-1082 (Kafka 4.0+): the client generates its member id
JOIN_EPOCH: Final = 0
LEAVE_EPOCH: Final = -1  # ConsumerGroupHeartbeatRequest.LEAVE_GROUP_MEMBER_EPOCH
LEAVE_STATIC_EPOCH: Final = -2  # ConsumerGroupHeartbeatRequest.LEAVE_GROUP_STATIC_MEMBER_EPOCH
DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS: Final = 5_000  # group.consumer.heartbeat.interval.ms
DEFAULT_MAX_POLL_INTERVAL_MS: Final = 300_000  # max.poll.interval.ms: the rebalance timeout sent

Partitions = Mapping[uuid.UUID, frozenset[int]]


class ConsumerState(StrEnum):
    """AbstractMembershipManager's MemberState (PREPARE_LEAVING and STALE have no duration here)."""

    UNSUBSCRIBED = "unsubscribed"  # not in the group: not started, or stopped
    JOINING = "joining"  # epoch-0 heartbeat sent (first join, or rejoin after being fenced)
    RECONCILING = "reconciling"  # an assignment arrived and is being applied
    ACKNOWLEDGING = "acknowledging"  # applied: the next heartbeat (at once) carries it
    STABLE = "stable"  # owns its assignment, heartbeats every interval
    FENCED = "fenced"  # FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID: partitions lost, rejoining
    FATAL = "fatal"  # a non-retriable error: poll() throws, the application ends


# The lifecycle the runners read (`GroupMember.state`, replay.group_member.MemberState).
LIFECYCLE: Final[dict[ConsumerState, MemberState]] = {
    ConsumerState.UNSUBSCRIBED: MemberState.UNJOINED,
    ConsumerState.JOINING: MemberState.PREPARING_REBALANCE,
    ConsumerState.FENCED: MemberState.PREPARING_REBALANCE,
    ConsumerState.RECONCILING: MemberState.COMPLETING_REBALANCE,
    ConsumerState.ACKNOWLEDGING: MemberState.COMPLETING_REBALANCE,
    ConsumerState.STABLE: MemberState.STABLE,
    ConsumerState.FATAL: MemberState.FATAL,
}
_RUNNING: Final = frozenset(
    s for s, life in LIFECYCLE.items() if life not in (MemberState.UNJOINED, MemberState.FATAL)
)


def _partitions(assignment: Any) -> dict[uuid.UUID, frozenset[int]]:
    """A kio ConsumerGroupHeartbeatResponse.Assignment as {topic id: partitions}."""
    return {
        uuid.UUID(str(tp.topic_id)): frozenset(int(p) for p in tp.partitions)
        for tp in assignment.topic_partitions
        if tp.partitions
    }


class ConsumerMember:
    """One consumer of the KIP-848 protocol: join with epoch 0, heartbeat, reconcile, leave.

    `member_key` is the recorded identity and never changes; a member that switches protocol at a
    scenario step keeps it, its subscription (`topics`), its rebalance timeout and its sessions.
    `incarnation` counts processes: a response to an older one is ignored (the runner carries it
    over from the classic member it replaces, so answers to that member are ignored too).
    """

    is_leader = False  # the coordinator assigns: no member leads

    def __init__(
        self,
        member_key: str,
        client_id: str,
        group_id: str,
        topics: tuple[str, ...],
        *,
        instance_id: str | None,
        rebalance_timeout_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
        server_assignor: str | None = None,
        api_versions: dict[int, int] | None = None,
        incarnation: int = 0,
        client_software: str | None = None,
    ) -> None:
        self.member_key = member_key
        self.client_id = client_id
        self.group_id = group_id
        self.topics = tuple(sorted(set(topics)))
        self.instance_id = instance_id
        self.rebalance_timeout_ms = rebalance_timeout_ms
        self.server_assignor = server_assignor
        self.api_versions = dict(api_versions or {CONSUMER_HEARTBEAT: NEWEST_CONSUMER_HEARTBEAT})
        self.client_software = client_software
        self.incarnation = incarnation
        self.consumer_state = ConsumerState.UNSUBSCRIBED
        self.member_id = ""
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = DEFAULT_CONSUMER_HEARTBEAT_INTERVAL_MS
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.error_code = 0  # the error that made the member FATAL
        self._sent_owned: dict[uuid.UUID, frozenset[int]] | None = None  # sentFields.localAssignment
        self._full = True  # the next heartbeat sends every field (joining, or after a failure)
        self._in_flight = False
        self._token = 0  # the current heartbeat wake; older wakes are stale
        self._steady: tuple[tuple[int, str, int, str | None], Send] | None = None
        self._interval: Any = None  # the last heartbeat_interval answered (a timedelta)

    # -- what runners read --------------------------------------------------------------------
    @property
    def state(self) -> MemberState:
        return LIFECYCLE[self.consumer_state]

    @property
    def running(self) -> bool:
        return self.consumer_state in _RUNNING

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, now_ms: int) -> Commands:
        """The process starts: a new member id (KIP-1082, Uuid.randomUuid at construction; here
        derived from the identity and the incarnation, so runs are deterministic), epoch 0."""
        if self.consumer_state is not ConsumerState.UNSUBSCRIBED:
            return ()
        self.incarnation += 1
        self.member_id = str(
            uuid.uuid5(uuid.NAMESPACE_URL, f"group-replay:{self.member_key}/{self.incarnation}")
        )
        if self.api_versions[CONSUMER_HEARTBEAT] == 0:
            self.member_id = ""  # v0: the coordinator gives the id
        self.owned = {}
        return self._join()

    def stop(self, now_ms: int, leave: bool) -> Commands:
        """The process ends; with `leave`, the leave heartbeat first (AbstractMembershipManager.
        leaveGroup: epoch -1, or -2 for a static member, which keeps its partitions)."""
        if not self.running:
            return ()
        commands: list[Command] = []
        if leave and self.member_id and self.member_epoch > 0:
            epoch = LEAVE_STATIC_EPOCH if self.instance_id is not None else LEAVE_EPOCH
            commands.append(self._send(self._request(epoch, full=False)))
        commands.append(Disconnect(self.incarnation))
        self.consumer_state = ConsumerState.UNSUBSCRIBED
        self.member_epoch = JOIN_EPOCH
        self.owned = {}
        self.incarnation += 1  # answers still in flight belong to the old process
        return tuple(commands)

    def on_wake(self, now_ms: int, wake: WakeAt) -> Commands:
        if wake.incarnation != self.incarnation or wake.generation_id != self._token or self._in_flight:
            return ()
        if self.consumer_state not in _RUNNING:
            return ()
        return (self._heartbeat(),)

    def on_request_timeout(self, now_ms: int, sent: Send) -> Commands:
        """No answer within request.timeout.ms: a retriable failure (onFailure), retry after backoff."""
        if sent.incarnation != self.incarnation or not self.running:
            return ()
        self._in_flight = False
        self._full = True
        return (self._wake_at(now_ms + RETRY_BACKOFF_MS),)

    # -- responses ----------------------------------------------------------------------------
    def on_response(self, now_ms: int, sent: Send, response: Any) -> Commands:
        if sent.incarnation != self.incarnation or self.consumer_state not in _RUNNING:
            return ()
        self._in_flight = False
        code = int(response.error_code)
        if code:
            return self._on_error(now_ms, code)
        interval = response.heartbeat_interval
        if interval is not None and interval is not self._interval:  # mostly the same object
            self._interval = interval
            ms = int(interval.total_seconds() * 1000)
            if ms > 0:
                self.heartbeat_interval_ms = ms  # updateHeartbeatIntervalMs
        if response.member_id:
            self.member_id = str(response.member_id)
        self.member_epoch = int(response.member_epoch)
        if response.assignment is not None:
            return self._reconcile(now_ms, _partitions(response.assignment))
        if self.consumer_state in (ConsumerState.JOINING, ConsumerState.FENCED):
            self.consumer_state = ConsumerState.STABLE
        elif self.consumer_state is ConsumerState.ACKNOWLEDGING:
            self.consumer_state = ConsumerState.STABLE  # onHeartbeatRequestGenerated
        return (self._wake_at(now_ms + self.heartbeat_interval_ms),)

    def _reconcile(self, now_ms: int, target: dict[uuid.UUID, frozenset[int]]) -> Commands:
        """maybeReconcile: revoke what the target drops, then take what it adds; acknowledge it in
        the next heartbeat, sent at once (ACKNOWLEDGING)."""
        if target == self.owned:
            self.consumer_state = ConsumerState.STABLE
            if self._sent_owned == self.owned:
                return (self._wake_at(now_ms + self.heartbeat_interval_ms),)
            self.consumer_state = ConsumerState.ACKNOWLEDGING
            return (self._acknowledge(now_ms),)
        # RECONCILING: onPartitionsRevoked for what the target drops, then onPartitionsAssigned
        # for what it adds; both callbacks take no time here, so the member goes straight on
        self.consumer_state = ConsumerState.RECONCILING
        self.owned = dict(target)
        self.consumer_state = ConsumerState.ACKNOWLEDGING
        return (self._acknowledge(now_ms),)

    def _acknowledge(self, now_ms: int) -> Command:
        """The heartbeat that acknowledges a reconciliation: at once (ACKNOWLEDGING makes
        HeartbeatRequestManager send without waiting for the interval)."""
        return self._heartbeat()

    def _on_error(self, now_ms: int, code: int) -> Commands:
        self._full = True  # resetHeartbeatState
        match reaction_to(code).consumer:
            case Reaction.REJOIN:
                # transitionToFenced: onPartitionsLost, then JOINING with epoch 0 (no backoff)
                self.consumer_state = ConsumerState.FENCED
                self.owned = {}
                self.member_epoch = JOIN_EPOCH
                return (self._heartbeat(),)
            case Reaction.RETRY_NOW:
                return (self._wake_at(now_ms),)
            case Reaction.RETRY_AFTER_BACKOFF:
                return (self._wake_at(now_ms + RETRY_BACKOFF_MS),)
            case _:
                self.error_code = code
                self.consumer_state = ConsumerState.FATAL
                self.owned = {}
                self.incarnation += 1
                return (Disconnect(self.incarnation - 1),)

    # -- requests -----------------------------------------------------------------------------
    def _join(self) -> Commands:
        self.consumer_state = ConsumerState.JOINING
        self.member_epoch = JOIN_EPOCH
        self._full = True
        return (self._heartbeat(),)

    def _wake_at(self, at_ms: int) -> WakeAt:
        self._token += 1
        return WakeAt(at_ms, Wake.HEARTBEAT, self.incarnation, self._token)

    def _heartbeat(self) -> Send:
        """HeartbeatState.buildRequestData: every field when joining or after a failure, else
        the owned partitions only when they changed since they were last sent."""
        self._in_flight = True
        self._token += 1  # a heartbeat going out makes pending wakes stale
        if self._full or self.member_epoch == JOIN_EPOCH:
            self._full = False
            self._sent_owned = dict(self.owned)
            return self._send(self._request(self.member_epoch, full=True))
        if self._sent_owned != self.owned:
            self._sent_owned = dict(self.owned)
            return self._send(self._request(self.member_epoch, full=False, owned=self.owned))
        key = (self.api_versions[CONSUMER_HEARTBEAT], self.member_id, self.member_epoch, self.instance_id)
        cached = self._steady
        if cached is not None and cached[0] == key and cached[1].incarnation == self.incarnation:
            return cached[1]
        send = self._send(self._request(self.member_epoch, full=False))
        self._steady = (key, send)
        return send

    def _request(self, epoch: int, *, full: bool, owned: Partitions | None = None) -> Any:
        joining = epoch == JOIN_EPOCH
        request = HeartbeatRequest(
            group_id=self.group_id,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=self.rebalance_timeout_ms if full else -1,
            subscribed_topic_names=self.topics if full else None,
            server_assignor=self.server_assignor if full else None,
            owned=({} if joining else dict(self.owned)) if full else owned,
        )
        return heartbeat_to_kio(request, self.api_versions[CONSUMER_HEARTBEAT])

    def _send(self, request: Any) -> Send:
        api_version = self.api_versions[CONSUMER_HEARTBEAT]
        return Send(CONSUMER_HEARTBEAT, api_version, request, self.incarnation)


def is_leave(send: Send) -> bool:
    """A leave heartbeat (epoch -1 / -2): the one answer a closing consumer still awaits."""
    return send.api_key == CONSUMER_HEARTBEAT and int(send.request.member_epoch) < 0


__all__ = [
    "CONSUMER_HEARTBEAT",
    "LEAVE_EPOCH",
    "LEAVE_STATIC_EPOCH",
    "LIFECYCLE",
    "ConsumerMember",
    "ConsumerState",
    "is_leave",
]
