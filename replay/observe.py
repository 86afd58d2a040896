"""Client-side observer: derive design-section-4 rebalance events from members' group exchanges.

Recorded sessions (from a capture), reference replays and live-broker replays all feed their
(request, response) pairs through this one observer, so every run's events are seen from the same
vantage point, what the clients saw, and the validator compares like with like. The coordinator's
own server-side view is richer but exists only for the reference run.

What is derived, and from what:
- `rebalance_started`: the first successful JoinGroup response carrying a generation higher than
  any seen for the group (a static member rejoining a Stable group gets the same generation back,
  KIP-345, and starts nothing).
- `member_joined`: every successful JoinGroup response (leader, protocol, SkipAssignment on v9+).
- `generation_completed`: every successful SyncGroup response, one row per member, with the
  member's decoded assignment.
- `member_left`: each member a successful LeaveGroup removed (v3+ batches carry per-member errors).
- `member_fenced`: any response with FENCED_INSTANCE_ID.
- `member_expired`: a member of the previous generation that is missing from the leader's member
  list of the next one without having left or been fenced (session timeout, or a dynamic member
  that never came back). Undetectable when a static leader rejoins below v9 and gets no members.
- `request_failed`: any other non-zero error code, except Heartbeat REBALANCE_IN_PROGRESS, which
  is how the coordinator asks for a rejoin and whose count depends only on heartbeat timing.

KIP-848 (events format 2): a ConsumerGroupHeartbeat with epoch 0 that succeeds is a
`member_joined`, one with epoch -1/-2 a `member_left`; an answer carrying an assignment with a
member epoch higher than any seen is a `rebalance_started` (the group moved to a new target, as
tests/support/corpus.py counts consumer-protocol rebalances). Every member's partitions are
followed: what a new assignment (SyncGroup, or a heartbeat answer's) drops is an
`assignment_revoked`, what it adds an `assignment_received`, each with those partitions. The
group's type is what the clients can see: a consumer-protocol answer, or a classic JoinGroup
answered without a leader (a classic member inside a consumer group is always a follower),
means `consumer`; a classic JoinGroup answered with a leader means `classic`; a change is a
`group_converted` (detail: from -> to). Every row says the `protocol` its member spoke.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from proxy.wire.apis import ApiKey
from proxy.wire.codec import CodecError
from proxy.wire.consumer_protocol import decode_assignment
from replay.events import EventName, RebalanceEvent

FENCED_INSTANCE_ID = int(ErrorCode.fenced_instance_id)
REBALANCE_IN_PROGRESS = int(ErrorCode.rebalance_in_progress)
CLASSIC = "classic"
CONSUMER = "consumer"
_CLASSIC_APIS = frozenset({ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT})


@dataclass(frozen=True, slots=True)
class Exchange:
    """One request a member sent and the response it got (None when it got none)."""

    ts_ms: int
    member_key: str
    api_key: int
    api_version: int
    request: Any
    response: Any  # None when the member got no response


@dataclass(slots=True)
class _MemberView:
    member_id: str = ""
    group_instance_id: str | None = None
    join_api_version: int = -1
    generation_id: int = -1
    is_leader: bool = False
    protocol_name: str | None = None
    skip_assignment: bool | None = None
    protocol: str = CLASSIC
    member_epoch: int | None = None
    owned: frozenset[str] = frozenset()  # topic-partitions it holds (assignment deltas)


@dataclass(slots=True)
class _GroupView:
    generation_id: int = -1
    seq: int = 0
    member_key_by_id: dict[str, str] = field(default_factory=dict)
    # group.instance.id -> the member_key of the member that last joined with it (the stable name
    # of a member a scenario made static, AGREED #3)
    member_key_by_instance: dict[str, str] = field(default_factory=dict)
    # identity (instance id, else member id) -> is static, from the last leader's member list
    last_members: dict[str, bool] = field(default_factory=dict)
    departed: set[str] = field(default_factory=set)  # identities that left or were fenced since
    group_type: str | None = None  # classic | consumer, as the clients saw it (None: not yet)


def _error(entity: Any) -> int:
    code = getattr(entity, "error_code", 0)
    return int(code)


def _offset_commit_error(response: Any) -> int:
    for topic in getattr(response, "topics", ()):
        for partition in topic.partitions:
            if int(partition.error_code):
                return int(partition.error_code)
    return 0


class GroupObserver:
    """Turns exchanges into RebalanceEvents for one (session, scenario, run)."""

    def __init__(self, session_id: str, scenario: str, run: str) -> None:
        self.session_id = session_id
        self.scenario = scenario
        self.run = run
        self.events: list[RebalanceEvent] = []
        # member_key -> ApiVersions v3+ `name/version`, filled by whoever knows the clients
        self.client_software: dict[str, str] = {}
        self._groups: dict[str, _GroupView] = {}
        self._members: dict[tuple[str, str], _MemberView] = {}
        # topic id -> name, for consumer-protocol assignments (the run knows its topics' ids)
        self.topic_names: dict[UUID, str] = {}

    def observe(self, exchange: Exchange) -> list[RebalanceEvent]:
        """Events this exchange produced (also appended to `events`)."""
        if exchange.response is None:
            return []
        if exchange.api_key in _CLASSIC_APIS:  # the member speaks classic now (maybe after KIP-848)
            member = self._member(exchange.request.group_id, exchange.member_key)
            member.protocol, member.member_epoch = CLASSIC, None
        match exchange.api_key:
            case ApiKey.JOIN_GROUP:
                new = self._join(exchange)
            case ApiKey.SYNC_GROUP:
                new = self._sync(exchange)
            case ApiKey.HEARTBEAT:
                code = _error(exchange.response)
                new = [] if code in (0, REBALANCE_IN_PROGRESS) else self._failure(exchange, code)
            case ApiKey.LEAVE_GROUP:
                new = self._leave(exchange)
            case ApiKey.OFFSET_COMMIT:
                code = _error(exchange.response) or _offset_commit_error(exchange.response)
                new = self._failure(exchange, code) if code else []
            case ApiKey.CONSUMER_GROUP_HEARTBEAT:
                new = self._consumer_heartbeat(exchange)
            case _:
                new = []
        self.events.extend(new)
        return new

    # -- per API ---------------------------------------------------------------------------

    def _join(self, ex: Exchange) -> list[RebalanceEvent]:
        request, response = ex.request, ex.response
        group = self._group(request.group_id)
        member = self._member(request.group_id, ex.member_key)
        member.join_api_version = ex.api_version
        member.group_instance_id = getattr(request, "group_instance_id", None)
        code = _error(response)
        if code:
            return self._failure(ex, code)
        out: list[RebalanceEvent] = []
        generation = int(response.generation_id)
        member.member_id = response.member_id
        member.generation_id = generation
        out += self._group_type(ex, group, member, CONSUMER if not response.leader else CLASSIC)
        member.is_leader = response.leader == response.member_id
        member.protocol_name = response.protocol_name
        member.skip_assignment = bool(response.skip_assignment) if ex.api_version >= 9 else None
        group.member_key_by_id[response.member_id] = ex.member_key
        if member.group_instance_id:
            group.member_key_by_instance[member.group_instance_id] = ex.member_key
        if generation > group.generation_id:
            group.generation_id = generation
            out.append(self._event(ex, group, EventName.REBALANCE_STARTED, member))
        out.append(self._event(ex, group, EventName.MEMBER_JOINED, member))
        if member.is_leader and response.members:
            out += self._expired_since_last_generation(ex, group, response.members)
        return out

    def _expired_since_last_generation(
        self, ex: Exchange, group: _GroupView, members: Any
    ) -> list[RebalanceEvent]:
        current = {getattr(entry, "group_instance_id", None) or entry.member_id for entry in members}
        out = []
        for identity, is_static in group.last_members.items():
            if identity in current or identity in group.departed:
                continue
            # Resolved now, not when the list arrived: followers' join responses may come later.
            if is_static:
                member_key = group.member_key_by_instance.get(identity, identity)
            else:
                member_key = group.member_key_by_id.get(identity, identity)
            gone = self._member(ex.request.group_id, member_key)
            out.append(
                self._event(ex, group, EventName.MEMBER_EXPIRED, gone, member_key=member_key, is_leader=False)
            )
        group.last_members = {
            getattr(entry, "group_instance_id", None) or entry.member_id: bool(
                getattr(entry, "group_instance_id", None)
            )
            for entry in members
        }
        group.departed.clear()
        return out

    def _sync(self, ex: Exchange) -> list[RebalanceEvent]:
        request, response = ex.request, ex.response
        code = _error(response)
        if code:
            return self._failure(ex, code)
        group = self._group(request.group_id)
        member = self._member(request.group_id, ex.member_key)
        member.generation_id = int(request.generation_id)
        protocol_type = getattr(response, "protocol_type", None) or getattr(request, "protocol_type", None)
        assignment: tuple[str, ...] | None = None
        if protocol_type in (None, "consumer"):
            try:
                assignment = decode_assignment(response.assignment)
            except CodecError:
                assignment = None
        done = [self._event(ex, group, EventName.GENERATION_COMPLETED, member, assignment=assignment)]
        return done + self._assigned(ex, group, member, assignment)

    def _leave(self, ex: Exchange) -> list[RebalanceEvent]:
        request, response = ex.request, ex.response
        group = self._group(request.group_id)
        top_code = _error(response)
        out: list[RebalanceEvent] = []
        if ex.api_version < 3:
            if top_code:
                return self._failure(ex, top_code)
            member = self._member(request.group_id, ex.member_key)
            group.departed.add(member.group_instance_id or member.member_id)
            left = self._event(ex, group, EventName.MEMBER_LEFT, member, is_leader=False)
            return [left, *self._assigned(ex, group, member, ())]
        if top_code and not getattr(response, "members", ()):
            return self._failure(ex, top_code)
        for entry in response.members:
            instance_id = entry.group_instance_id
            if instance_id:
                member_key = group.member_key_by_instance.get(instance_id, instance_id)
            else:
                member_key = group.member_key_by_id.get(entry.member_id, ex.member_key)
            member = self._member(request.group_id, member_key)
            code = int(entry.error_code)
            if code:
                out += self._failure(ex, code, member_key=member_key)
                continue
            group.departed.add(instance_id or entry.member_id or member.member_id)
            out.append(
                self._event(ex, group, EventName.MEMBER_LEFT, member, member_key=member_key, is_leader=False)
            )
            out += self._assigned(ex, group, member, (), member_key)  # a member that left holds nothing
        return out

    def _failure(self, ex: Exchange, code: int, member_key: str | None = None) -> list[RebalanceEvent]:
        group_id = ex.request.group_id
        group = self._group(group_id)
        key = member_key or ex.member_key
        member = self._member(group_id, key)
        if code == FENCED_INSTANCE_ID:
            group.departed.add(member.group_instance_id or member.member_id)
            name = EventName.MEMBER_FENCED
        else:
            name = EventName.REQUEST_FAILED
        return [self._event(ex, group, name, member, member_key=key, error_code=code)]

    def _consumer_heartbeat(self, ex: Exchange) -> list[RebalanceEvent]:
        """A ConsumerGroupHeartbeat (KIP-848): joins, leaves, new epochs, partitions."""
        request, response = ex.request, ex.response
        group = self._group(request.group_id)
        member = self._member(request.group_id, ex.member_key)
        member.protocol = CONSUMER
        member.group_instance_id = request.instance_id
        member.join_api_version = -1
        code = _error(response)
        if code:
            return self._failure(ex, code)
        sent_epoch = int(request.member_epoch)
        member.member_id = str(response.member_id or request.member_id)
        member.member_epoch = int(response.member_epoch)
        group.member_key_by_id[member.member_id] = ex.member_key
        if sent_epoch < 0:
            left = self._event(ex, group, EventName.MEMBER_LEFT, member, is_leader=False)
            return [left, *self._assigned(ex, group, member, ())]
        out = self._group_type(ex, group, member, CONSUMER)
        if response.assignment is not None and member.member_epoch > group.generation_id:
            group.generation_id = member.member_epoch
            out.append(self._event(ex, group, EventName.REBALANCE_STARTED, member))
        if sent_epoch == 0:  # a (re)joining member owns nothing (its TopicPartitions are empty)
            out += self._assigned(ex, group, member, ())
            out.append(self._event(ex, group, EventName.MEMBER_JOINED, member))
        if response.assignment is not None:
            names = self.topic_names
            assigned = tuple(
                f"{names.get(UUID(str(tp.topic_id)), str(tp.topic_id))}-{int(p)}"
                for tp in response.assignment.topic_partitions
                for p in tp.partitions
            )
            out += self._assigned(ex, group, member, assigned)
        return out

    def _assigned(
        self,
        ex: Exchange,
        group: _GroupView,
        member: _MemberView,
        assignment: tuple[str, ...] | None,
        member_key: str | None = None,
    ) -> list[RebalanceEvent]:
        """assignment_revoked / assignment_received: what a new assignment drops and adds (a
        member that leaves, or rejoins with epoch 0, drops everything)."""
        if assignment is None:
            return []
        now = frozenset(assignment)
        revoked, received = member.owned - now, now - member.owned
        member.owned = now
        out = []
        for name, partitions in (
            (EventName.ASSIGNMENT_REVOKED, revoked),
            (EventName.ASSIGNMENT_RECEIVED, received),
        ):
            if partitions:
                moved = tuple(sorted(partitions))
                out.append(self._event(ex, group, name, member, member_key=member_key, assignment=moved))
        return out

    def _group_type(
        self, ex: Exchange, group: _GroupView, member: _MemberView, seen: str
    ) -> list[RebalanceEvent]:
        """The group's type as this answer shows it; a change is a `group_converted`."""
        before = group.group_type
        group.group_type = seen
        if before is None or before == seen:
            return []
        # the new group numbers its epochs afresh (an offline migration) and has its own members
        group.generation_id = -1
        group.last_members = {}
        group.departed.clear()
        return [
            self._event(
                ex, group, EventName.GROUP_CONVERTED, member, is_leader=False, detail=f"{before} -> {seen}"
            )
        ]

    # -- helpers ---------------------------------------------------------------------------

    def _group(self, group_id: str) -> _GroupView:
        view = self._groups.get(group_id)
        if view is None:
            view = self._groups[group_id] = _GroupView()
        return view

    def _member(self, group_id: str, member_key: str) -> _MemberView:
        view = self._members.get((group_id, member_key))
        if view is None:
            view = self._members[(group_id, member_key)] = _MemberView()
        return view

    def _event(
        self,
        ex: Exchange,
        group: _GroupView,
        name: EventName,
        member: _MemberView,
        *,
        member_key: str | None = None,
        is_leader: bool | None = None,
        error_code: int = 0,
        assignment: tuple[str, ...] | None = None,
        detail: str | None = None,
    ) -> RebalanceEvent:
        seq = group.seq
        group.seq += 1
        return RebalanceEvent(
            session_id=self.session_id,
            scenario=self.scenario,
            run=self.run,
            group_id=ex.request.group_id,
            seq=seq,
            ts_ms=ex.ts_ms,
            event=name.value,
            generation_id=group.generation_id,
            member_key=member_key or ex.member_key,
            member_id=member.member_id,
            group_instance_id=member.group_instance_id,
            protocol_name=member.protocol_name,
            is_leader=member.is_leader if is_leader is None else is_leader,
            skip_assignment=member.skip_assignment if name == EventName.MEMBER_JOINED else None,
            join_api_version=member.join_api_version,
            error_code=error_code,
            assignment=assignment,
            client_software=self.client_software.get(member_key or ex.member_key),
            detail=detail,
            protocol=member.protocol,
            group_type=group.group_type,
            member_epoch=member.member_epoch,
        )
