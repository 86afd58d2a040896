"""One consumer-group member as a sans-IO state machine (the classic group protocol).

`ClassicMember` is what one Kafka consumer does towards its group coordinator: JoinGroup ->
SyncGroup -> Heartbeat every interval, LeaveGroup on a clean shutdown, and the Java consumer's
reactions to every error, written once here. It opens no socket and reads no clock: the caller
passes time in and interprets the commands it returns,

    start(now_ms) / stop(now_ms, leave) / on_response(now_ms, sent, response) / on_wake(now_ms, wake)
    / on_request_timeout(now_ms, sent)  ->  tuple[Send | WakeAt | Disconnect, ...]

so the same member runs in virtual time against the in-process reference coordinator
(`replay.run`) and in scaled real time over TCP against a broker (`replay.live`).

The spec is Kafka's client: `AbstractCoordinator` (clients/.../consumer/internals) for the
member states (`MemberState`: UNJOINED, PREPARING_REBALANCE, COMPLETING_REBALANCE, STABLE) and
the response handlers (`JoinGroupResponseHandler`, `SyncGroupResponseHandler`,
`HeartbeatResponseHandler`, `joinGroupIfNeeded`), `ConsumerCoordinator` for the leader's
assignment (`onLeaderElected` runs the assignor the group selected, `replay.assignors`).

The interface, its commands and the lifecycle states are `replay.group_member`'s (re-exported
here): the KIP-848 member (consumer protocol, ConsumerGroupHeartbeat) is the second class with the
same five methods and the same commands (`replay.consumer_member.ConsumerMember`), and the runners
only speak `GroupMember`.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from proxy.wire import ApiKey, CodecError, request_schema
from proxy.wire.consumer_protocol import (
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from proxy.wire.convert import convert
from replay.assignors import STICKY_PROTOCOLS, compute, encode, subscribed_topics
from replay.group_member import (
    ERROR_REACTIONS,
    REQUEST_TIMEOUT_MS,
    RETRY_BACKOFF_MS,
    Command,
    Commands,
    Disconnect,
    GroupMember,
    MemberState,
    Reaction,
    Send,
    Wake,
    WakeAt,
    from_values,
    reaction_to,
)
from replay.sticky import cooperative_user_data, sticky_user_data

JOIN: Final = int(ApiKey.JOIN_GROUP)
SYNC: Final = int(ApiKey.SYNC_GROUP)
HEARTBEAT: Final = int(ApiKey.HEARTBEAT)
LEAVE: Final = int(ApiKey.LEAVE_GROUP)
GROUP_APIS: Final = (JOIN, SYNC, HEARTBEAT, LEAVE)
NEWEST: Final = {JOIN: 9, SYNC: 5, HEARTBEAT: 4, LEAVE: 5}
# The oldest version `entity` builds without `convert`: no adapter applies from there to NEWEST.
_DIRECT_FROM: Final = {JOIN: 1, SYNC: 0, HEARTBEAT: 0, LEAVE: 3}

# JoinGroup version -> the SyncGroup, Heartbeat and LeaveGroup versions a client that sends it
# pairs with it (what a member that never used an API in the capture sends). The pairs follow
# the KIPs that bumped them together in one Kafka release (clients/src/main/resources/common/
# message/*.json): v9 (KIP-814) and v8 (KIP-800 `Reason`, the same 3.2.0 commits that added
# LeaveGroup v5's `Reason`: #11566 and #11571) -> 5/4/5; v7 (KIP-559 protocol type and name,
# 2.5) -> SyncGroup v5, Heartbeat v4, LeaveGroup v4; v6 (first flexible, 2.4) -> 4/4/4;
# v5 (KIP-345, 2.3) -> 3/3/3; v4 (KIP-394, 2.2) and v3 -> 2/2/2; v2 and v1 -> 1/1/1; v0 -> 0/0/0.
# The differential driver's old table paired JoinGroup v8 with LeaveGroup v4: Kafka's is v5.
COMPANION_VERSIONS: Final[dict[int, tuple[int, int, int]]] = {
    0: (0, 0, 0),
    1: (1, 1, 1),
    2: (1, 1, 1),
    3: (2, 2, 2),
    4: (2, 2, 2),
    5: (3, 3, 3),
    6: (4, 4, 4),
    7: (5, 4, 4),
    8: (5, 4, 5),
    9: (5, 4, 5),
}
COMPANION_API_KEYS: Final = (SYNC, HEARTBEAT, LEAVE)


def companion_versions(join_api_version: int) -> dict[int, int]:
    """{api_key: api_version} for every group API of a client sending JoinGroup `join_api_version`."""
    return {
        JOIN: join_api_version,
        **dict(zip(COMPANION_API_KEYS, COMPANION_VERSIONS[join_api_version], strict=True)),
    }


DEFAULT_HEARTBEAT_INTERVAL_MS: Final = 3_000  # heartbeat.interval.ms


# ---------------------------------------------------------------------------------------------
# The transition table of the lifecycle states (replay.group_member.MemberState)


_RUNNING: Final = frozenset(
    {MemberState.PREPARING_REBALANCE, MemberState.COMPLETING_REBALANCE, MemberState.STABLE}
)

# Target state -> legal previous states (the style of replay.coordinator.types).
VALID_PREVIOUS_STATES: Final[dict[MemberState, frozenset[MemberState]]] = {
    MemberState.UNJOINED: _RUNNING,  # stop() from any running state
    MemberState.PREPARING_REBALANCE: frozenset({MemberState.UNJOINED, *_RUNNING}),  # start or rejoin
    MemberState.COMPLETING_REBALANCE: frozenset({MemberState.PREPARING_REBALANCE}),
    MemberState.STABLE: frozenset({MemberState.COMPLETING_REBALANCE}),
    MemberState.FATAL: _RUNNING,
}


class IllegalMemberTransition(AssertionError):
    """A transition the table forbids: a bug in this module, never a coordinator's answer."""


# ---------------------------------------------------------------------------------------------
# Identity and configuration


@dataclass(frozen=True, slots=True)
class JoinSettings:
    """What a member puts in its JoinGroup: from the recorded request (the client's own config)."""

    group_id: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]  # (assignor name, subscription metadata), preference order

    @classmethod
    def from_request(cls, request: Any) -> JoinSettings:
        return cls(
            group_id=str(request.group_id),
            session_timeout_ms=_ms(request.session_timeout),
            rebalance_timeout_ms=_ms(getattr(request, "rebalance_timeout", request.session_timeout)),
            protocol_type=str(request.protocol_type),
            protocols=tuple((str(p.name), bytes(p.metadata)) for p in request.protocols),
        )


def _ms(value: Any) -> int:
    return int(value.total_seconds() * 1000) if hasattr(value, "total_seconds") else int(value)


def entity(api_key: int, api_version: int, values: Mapping[str, Any]) -> Any:
    """A request entity of `api_version` from plain values given for the newest version.

    JoinGroup v0 and LeaveGroup v0-2 go through `proxy.wire.convert`, whose adapters carry a
    field's meaning across versions (v0's session timeout doubling as rebalance timeout,
    LeaveGroup's one member before v3); every other version only loses fields, so it is built
    directly (tests/test_replay_member.py checks both ways agree on every version)."""
    if api_version >= _DIRECT_FROM[api_key]:
        return from_values(request_schema(api_key, api_version), values)
    return convert(from_values(request_schema(api_key, NEWEST[api_key]), values), api_version).entity


# ---------------------------------------------------------------------------------------------
# The classic member


class ClassicMember:
    """One consumer of the classic protocol: join -> sync -> heartbeat, reacting as Java does.

    `member_key` is the recorded identity and never changes (a scenario that gives the member a
    group.instance.id changes `instance_id`, not its name). `topics` is the partition count per
    topic the leader's assignor sees (the client's metadata).
    """

    def __init__(
        self,
        member_key: str,
        client_id: str,
        join: JoinSettings,
        *,
        instance_id: str | None,
        api_versions: dict[int, int],
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        topics: Mapping[str, int] | None = None,
        heartbeat_times_ms: Sequence[int] = (),
        client_software: str | None = None,
    ) -> None:
        self.member_key = member_key
        self.client_id = client_id
        self.join_settings = join
        self.instance_id = instance_id
        self.api_versions = dict(api_versions)
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.heartbeat_times_ms = tuple(heartbeat_times_ms)
        self.client_software = client_software  # KIP-511 name/version: whose assignor runs
        self.topics = dict(topics or {})
        self.state = MemberState.UNJOINED
        self.member_id = ""
        self.generation_id = -1
        self.incarnation = 0
        self.is_leader = False
        self.protocol_name: str | None = None
        self.owned: tuple[tuple[str, int], ...] = ()  # the last assignment (sticky assignors read it)
        # ConsumerCoordinator picks COOPERATIVE when every configured assignor supports it
        self.cooperative = bool(join.protocols) and all(n == "cooperative-sticky" for n, _ in join.protocols)
        self.error_code = 0  # the error that made the member FATAL
        self.assignment_user_data: bytes | None = None  # a custom assignor's userData (scenario)
        self._heartbeat: tuple[tuple[int, int, str, str | None], tuple[Send]] | None = None
        self._beat_index = 0  # heartbeat_times_ms[:_beat_index] are <= the last now_ms asked about

    @property
    def running(self) -> bool:
        return self.state in _RUNNING

    def _to(self, state: MemberState) -> None:
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalMemberTransition(f"{self.member_key}: {self.state} -> {state}")
        self.state = state

    # -- lifecycle ----------------------------------------------------------------------------
    def start(self, now_ms: int) -> Commands:
        """The process starts: a new incarnation without member id (KIP-345: static ones too)."""
        if self.state is not MemberState.UNJOINED:
            return ()
        self.incarnation += 1
        self.member_id = ""
        self.generation_id = -1
        self.is_leader = False
        self.owned = ()
        return self._join()

    def stop(self, now_ms: int, leave: bool) -> Commands:
        """The process ends; with `leave`, LeaveGroup first (a dynamic member's close())."""
        if not self.running:
            return ()
        commands: list[Command] = []
        if leave and self.member_id:
            commands.append(self._send(LEAVE, self._leave_values()))
        commands.append(Disconnect(self.incarnation))
        self._to(MemberState.UNJOINED)
        self.incarnation += 1  # responses still in flight belong to the old process
        return tuple(commands)

    def request_rejoin(self, now_ms: int) -> Commands:
        """AbstractCoordinator.requestRejoin: rejoin keeping the member id (a stopped member starts)."""
        if self.state is MemberState.UNJOINED:
            return self.start(now_ms)
        return self._join() if self.running else ()

    def on_request_timeout(self, now_ms: int, sent: Send) -> Commands:
        """No answer within request.timeout.ms: the Java client disconnects and rejoins."""
        if sent.incarnation != self.incarnation or not self.running:
            return ()
        return self._join()

    def on_wake(self, now_ms: int, wake: WakeAt) -> Commands:
        if wake.incarnation != self.incarnation:
            return ()
        if wake.wake is Wake.HEARTBEAT:
            if self.state is MemberState.STABLE and self.generation_id == wake.generation_id:
                return self._heartbeat_send()
            return ()
        return self._join() if self.state is MemberState.PREPARING_REBALANCE else ()

    # -- responses ----------------------------------------------------------------------------
    def on_response(self, now_ms: int, sent: Send, response: Any) -> Commands:
        if sent.incarnation != self.incarnation or self.state not in _RUNNING:
            return ()
        code = int(response.error_code)
        if not code:
            if sent.api_key == HEARTBEAT:  # the hot path
                if self.state is MemberState.STABLE:
                    due = self._heartbeat_due(now_ms)
                    return (WakeAt(due, Wake.HEARTBEAT, self.incarnation, self.generation_id),)
                return ()
            match sent.api_key:
                case ApiKey.JOIN_GROUP:
                    return self._joined(response)
                case ApiKey.SYNC_GROUP:
                    self._to(MemberState.STABLE)
                    if self._assigned(response) and self.cooperative:
                        # ConsumerCoordinator.onJoinComplete: partitions were revoked, so rejoin
                        # at once for them to be assigned to their new owners (KIP-429)
                        return self._rejoin_at(now_ms)
                    due = self._heartbeat_due(now_ms)
                    return (WakeAt(due, Wake.HEARTBEAT, self.incarnation, self.generation_id),)
            return ()
        return self._on_error(now_ms, sent, response, code)

    def _on_error(self, now_ms: int, sent: Send, response: Any, code: int) -> Commands:
        """joinGroupIfNeeded and the response handlers' reaction to `code` (ERROR_REACTIONS)."""
        reaction = reaction_to(code).classic
        if reaction is Reaction.FATAL:
            self.error_code = code
            self._to(MemberState.FATAL)
            self.incarnation += 1
            return (Disconnect(self.incarnation - 1),)
        if sent.api_key == HEARTBEAT and self.state is not MemberState.STABLE:
            return ()  # a late heartbeat answer during a rebalance changes nothing
        match reaction:
            case Reaction.ADOPT_MEMBER_ID if sent.api_key == JOIN:  # only JoinGroup carries it
                self.member_id = str(response.member_id)
                return self._join()
            case Reaction.RESET_MEMBER_ID:
                self.member_id = ""
                self.generation_id = -1
                return self._rejoin_at(now_ms)
            case Reaction.REJOIN:
                return self._rejoin_at(now_ms)
            case _:
                return self._rejoin_at(now_ms + RETRY_BACKOFF_MS)

    def _rejoin_at(self, at_ms: int) -> Commands:
        self._to(MemberState.PREPARING_REBALANCE)
        return (WakeAt(at_ms, Wake.REJOIN, self.incarnation, self.generation_id),)

    def _joined(self, response: Any) -> Commands:
        self.member_id = str(response.member_id)
        self.generation_id = int(response.generation_id)
        self.protocol_name = response.protocol_name
        self.is_leader = response.leader == response.member_id
        assignments: dict[str, bytes] = {}
        if self.is_leader and not getattr(response, "skip_assignment", False):
            assignments = self.assign(response.protocol_name, response.members)
        self._to(MemberState.COMPLETING_REBALANCE)
        return (self._send(SYNC, self._sync_values(assignments, response.protocol_name)),)

    def assign(self, protocol_name: str | None, members: Any) -> dict[str, bytes]:
        """ConsumerCoordinator.onLeaderElected: the group's chosen assignor over the members'
        subscriptions (JoinGroup response metadata) and the topics the leader knows."""
        subscriptions = {
            str(m.member_id): (getattr(m, "group_instance_id", None), bytes(m.metadata)) for m in members
        }
        topics = dict(self.topics)
        for _, metadata in subscriptions.values():
            for topic in subscribed_topics(metadata):
                topics.setdefault(topic, 0)
        computed = compute(protocol_name or "range", subscriptions, topics, self.client_software)
        return encode(computed, self.assignment_user_data)

    def _heartbeat_due(self, now_ms: int) -> int:
        """When the next Heartbeat goes out: the recorded client's next Heartbeat when there is one
        within two intervals, else one interval from now (Kafka's Heartbeat timer,
        AbstractCoordinator.HeartbeatThread). Following the recorded send times keeps the replayed
        member in the recorded phase: whether a member learns of a rebalance before it stops
        (a dynamic member leaving while the others are between heartbeats) depends on where its
        heartbeats fall, and an interval restarted from each replayed answer drifts from that."""
        times = self.heartbeat_times_ms
        # bisect_right(times, now_ms) by a cursor (hot path): a run's clock only moves forward
        index, count = self._beat_index, len(times)
        if index > count or (index and times[index - 1] > now_ms):
            index = bisect.bisect_right(times, now_ms)
        while index < count and times[index] <= now_ms:
            index += 1
        self._beat_index = index
        if index < count and times[index] <= now_ms + 2 * self.heartbeat_interval_ms:
            return times[index]
        return now_ms + self.heartbeat_interval_ms

    # -- requests -----------------------------------------------------------------------------
    def _join(self) -> Commands:
        self._to(MemberState.PREPARING_REBALANCE)
        return (self._send(JOIN, self._join_values()),)

    def _send(self, api_key: int, values: Mapping[str, Any]) -> Send:
        api_version = self.api_versions[api_key]
        return Send(api_key, api_version, entity(api_key, api_version, values), self.incarnation)

    def _heartbeat_send(self) -> Commands:
        """A heartbeat is the same request (and command) until the generation or identity
        changes (hot path)."""
        key = (self.api_versions[HEARTBEAT], self.generation_id, self.member_id, self.instance_id)
        cached = self._heartbeat
        if cached is not None and cached[0] == key and cached[1][0].incarnation == self.incarnation:
            return cached[1]
        commands = (self._send(HEARTBEAT, self.heartbeat_values()),)
        self._heartbeat = (key, commands)
        return commands

    def _assigned(self, response: Any) -> bool:
        """Keep the partitions SyncGroup gave; True when some owned ones were revoked."""
        try:
            assigned = tuple(_topic_partition(tp) for tp in decode_assignment(response.assignment))
        except (CodecError, ValueError):
            assigned = ()
        revoked = set(self.owned) - set(assigned)
        self.owned = assigned
        return bool(revoked)

    def _metadata(self, name: str, recorded: bytes) -> bytes:
        """ConsumerCoordinator.metadata(): a sticky assignor's subscription says what the member
        owns and its generation (owned partitions only under COOPERATIVE: EAGER revoked them all
        in onJoinPrepare; StickyAssignor keeps its last assignment in the user data)."""
        if name not in STICKY_PROTOCOLS:
            return recorded
        try:
            subscription = decode_subscription(recorded)
        except CodecError:
            return recorded
        if self.generation_id < 0 or not self.member_id:
            self.owned = ()  # onJoinPrepare: partitions lost with the generation
        if name == "sticky":
            user_data = sticky_user_data(self.owned, self.generation_id) if self.owned else None
        else:
            user_data = cooperative_user_data(self.generation_id)
        return encode_subscription(
            subscription.topics,
            subscription.blob_version,
            owned_partitions=self.owned if self.cooperative else (),
            generation_id=self.generation_id,
            user_data=user_data,
        )

    def _join_values(self) -> dict[str, Any]:
        join = self.join_settings
        protocols = tuple(
            {"name": name, "metadata": self._metadata(name, data)} for name, data in join.protocols
        )
        return {
            "group_id": join.group_id,
            "session_timeout": _duration(join.session_timeout_ms),
            "rebalance_timeout": _duration(join.rebalance_timeout_ms),
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": join.protocol_type,
            "protocols": protocols,
            "reason": None,
        }

    def _sync_values(self, assignments: Mapping[str, bytes], protocol_name: str | None) -> dict[str, Any]:
        return {
            "group_id": self.join_settings.group_id,
            "generation_id": self.generation_id,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": self.join_settings.protocol_type,
            "protocol_name": protocol_name,
            "assignments": tuple({"member_id": m, "assignment": a} for m, a in assignments.items()),
        }

    def heartbeat_values(self, generation_offset: int = 0) -> dict[str, Any]:
        return {
            "group_id": self.join_settings.group_id,
            "generation_id": self.generation_id + generation_offset,
            "member_id": self.member_id,
            "group_instance_id": self.instance_id,
        }

    def _leave_values(self) -> dict[str, Any]:
        return {
            "group_id": self.join_settings.group_id,
            "members": (
                {"member_id": self.member_id, "group_instance_id": self.instance_id, "reason": None},
            ),
        }


def _topic_partition(name: str) -> tuple[str, int]:
    topic, _, partition = name.rpartition("-")
    return topic, int(partition)


_DURATIONS: dict[int, Any] = {}


def _duration(ms: int) -> Any:
    """An i32Timedelta of `ms` (immutable, cached: a member builds one per JoinGroup)."""
    duration = _DURATIONS.get(ms)
    if duration is None:
        import datetime

        from kio.static.primitive import i32Timedelta

        duration = _DURATIONS[ms] = i32Timedelta.parse(datetime.timedelta(milliseconds=ms))
    return duration


__all__ = [
    "COMPANION_VERSIONS",
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "ERROR_REACTIONS",
    "GROUP_APIS",
    "REQUEST_TIMEOUT_MS",
    "RETRY_BACKOFF_MS",
    "VALID_PREVIOUS_STATES",
    "ClassicMember",
    "Command",
    "Commands",
    "Disconnect",
    "GroupMember",
    "IllegalMemberTransition",
    "JoinSettings",
    "MemberState",
    "Reaction",
    "Send",
    "Wake",
    "WakeAt",
    "companion_versions",
    "entity",
    "from_values",
    "reaction_to",
]
