"""Classic group and member state: GroupMetadata.scala / MemberMetadata.scala (and their Java
twins ClassicGroup.java / ClassicGroupMember.java in the new coordinator).

Kafka keeps members in a HashMap whose order depends on the member ids; `members` here keeps
insertion order, and where Kafka walks its map (a new leader after the leader leaves,
`members.keys.headOption`; the first member awaiting join; the member list the leader gets) the
group walks `ordered_member_ids()`: the order of the map of the coordinator it imitates
(`replay.coordinator.hashorder`), insertion order when `member_map` is None.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from proxy.wire.codec import CodecError
from proxy.wire.consumer_protocol import decode_subscription_topics
from replay.coordinator.hashorder import MemberMapKind, hash_order
from replay.coordinator.records import MemberIdentity
from replay.coordinator.types import (
    VALID_PREVIOUS_STATES,
    GroupState,
    IllegalStateTransition,
    RequestContext,
)

Protocols = tuple[tuple[str, bytes], ...]


@dataclass(slots=True)
class Member:
    """MemberMetadata.scala. `identity` is what never changes (its group.instance.id, client id
    and host: the value its log record holds too); `awaiting_join`/`awaiting_sync` hold the parked
    request's context (Kafka's awaitingJoinCallback/awaitingSyncCallback)."""

    member_id: str
    identity: MemberIdentity
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    join_api_version: int = -1
    assignment: bytes = b""
    awaiting_join: RequestContext | None = None
    awaiting_sync: RequestContext | None = None
    is_new: bool = False
    # The `heartbeat-{group}-{member}` timer key and its expiry action, made once per member id.
    heartbeat_timer: tuple[str, Callable[[int], None]] | None = None

    @property
    def is_static(self) -> bool:
        return self.identity.group_instance_id is not None

    def has_satisfied_heartbeat(self) -> bool:
        """MemberMetadata.hasSatisfiedHeartbeat at the moment a heartbeat deadline fires.

        Every reschedule resets `heartbeatSatisfied` to false, so at expiry it is false: a new
        member expires; a member parked in JoinGroup or SyncGroup survives."""
        if self.is_new:
            return False
        return self.awaiting_join is not None or self.awaiting_sync is not None

    def metadata(self, protocol: str) -> bytes:
        protocols = self.protocols
        if protocols and protocols[0][0] == protocol:
            return protocols[0][1]  # the common case: the member's first (often only) protocol
        for name, metadata in protocols:
            if name == protocol:
                return metadata
        raise ValueError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: Protocols) -> bool:
        return self.protocols == protocols

    def vote(self, candidates: set[str]) -> str:
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError("member does not support any of the candidate protocols")


@dataclass(slots=True)
class ClassicGroup:
    """GroupMetadata.scala. Every mutation of membership goes through add/remove/replace so the
    counters (awaiting join, protocol support) stay exact."""

    group_id: str
    state: GroupState = GroupState.EMPTY
    previous_state: GroupState | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)
    pending_members: set[str] = field(default_factory=set)
    pending_sync_members: set[str] = field(default_factory=set)
    num_awaiting_join: int = 0
    supported_protocols: dict[str, int] = field(default_factory=dict)
    new_member_added: bool = False
    # select_protocol is O(members); its answer only changes when some member's protocol names
    # do, so it is cached per `protocol_epoch` (a static member rejoining a 1,000-member group
    # with the same protocols must not recount every vote).
    protocol_epoch: int = 0
    _selected: tuple[int, str] | None = None
    # currentStateTimestamp: when the group entered its state (offset expiry counts from it).
    state_timestamp_ms: int = 0
    # The protocol metadata of the members when the current generation started, from which
    # Kafka's initNextGeneration computes `subscribedTopics` (decoded here only when asked).
    generation_metadata: tuple[bytes, ...] | None = None
    _subscribed: tuple[tuple[bytes, ...], frozenset[str] | None] | None = None
    # Which map Kafka keeps the members in (None: insertion order) and the most members it has
    # held (its table never shrinks).
    member_map: MemberMapKind | None = None
    peak_members: int = 0

    # --- state -------------------------------------------------------------------------------
    def is_in(self, state: GroupState) -> bool:
        return self.state is state

    def transition_to(self, target: GroupState, now_ms: int = 0) -> GroupState:
        """GroupMetadata.transitionTo / assertValidTransition; returns the previous state."""
        if self.state not in VALID_PREVIOUS_STATES[target]:
            allowed = sorted(s.value for s in VALID_PREVIOUS_STATES[target])
            raise IllegalStateTransition(
                f"group {self.group_id} should be in one of {allowed}"
                f" before moving to {target.value}, but it is {self.state.value}"
            )
        previous = self.state
        self.previous_state = previous
        self.state = target
        self.state_timestamp_ms = now_ms
        return previous

    def can_rebalance(self) -> bool:
        return self.state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]

    # --- membership --------------------------------------------------------------------------
    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def ordered_member_ids(self) -> list[str]:
        """The member ids in the order Kafka's members map iterates them."""
        if self.member_map is None:
            return list(self.members)
        return hash_order(self.member_map, self.members, self.peak_members)

    def is_pending_member(self, member_id: str) -> bool:
        return member_id in self.pending_members

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self.static_members.get(group_instance_id)

    def add(self, member: Member, awaiting_join: RequestContext | None) -> None:
        group_instance_id = member.identity.group_instance_id
        if group_instance_id is not None:
            if group_instance_id in self.static_members:
                raise AssertionError(
                    f"static member {group_instance_id} cannot be added twice to {self.group_id}"
                )
            self.static_members[group_instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        self.members[member.member_id] = member
        self.peak_members = max(self.peak_members, len(self.members))
        self._count_protocols(member.protocols, +1)
        member.awaiting_join = awaiting_join
        if awaiting_join is not None:
            self.num_awaiting_join += 1
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._count_protocols(member.protocols, -1)
            if member.awaiting_join is not None:
                self.num_awaiting_join -= 1
            group_instance_id = member.identity.group_instance_id
            if group_instance_id is not None:
                self.static_members.pop(group_instance_id, None)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.ordered_member_ids()), None)
        self.pending_members.discard(member_id)
        self.pending_sync_members.discard(member_id)
        return member

    def replace_static_member(self, group_instance_id: str, old_member_id: str, new_member_id: str) -> Member:
        """GroupMetadata.replaceStaticMember without the callbacks (the caller fences those)."""
        member = self.members.pop(old_member_id)
        member.member_id = new_member_id
        member.heartbeat_timer = None
        self.members[new_member_id] = member
        if self.leader_id == old_member_id:
            self.leader_id = new_member_id
        self.static_members[group_instance_id] = new_member_id
        return member

    def update_member(
        self,
        member: Member,
        protocols: Protocols,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        awaiting_join: RequestContext | None,
    ) -> None:
        """GroupMetadata.updateMember."""
        if [name for name, _ in member.protocols] != [name for name, _ in protocols]:
            self._count_protocols(member.protocols, -1)
            self._count_protocols(protocols, +1)
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if awaiting_join is not None and member.awaiting_join is None:
            self.num_awaiting_join += 1
        elif awaiting_join is None and member.awaiting_join is not None:
            self.num_awaiting_join -= 1
        member.awaiting_join = awaiting_join

    def take_join(self, member: Member) -> RequestContext | None:
        """Unpark a member's JoinGroup (the first half of maybeInvokeJoinCallback)."""
        parked = member.awaiting_join
        if parked is not None:
            member.awaiting_join = None
            self.num_awaiting_join -= 1
        return parked

    @staticmethod
    def take_sync(member: Member) -> RequestContext | None:
        parked = member.awaiting_sync
        member.awaiting_sync = None
        return parked

    def has_all_members_joined(self) -> bool:
        return len(self.members) == self.num_awaiting_join and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """GroupMetadata.maybeElectNewJoinedLeader."""
        if self.leader_id is None:
            return False
        leader = self.members[self.leader_id]
        if leader.awaiting_join is not None:
            return True
        for member_id in self.ordered_member_ids():
            if self.members[member_id].awaiting_join is not None:
                self.leader_id = member_id
                return True
        return False

    # --- protocols ---------------------------------------------------------------------------
    def _count_protocols(self, protocols: Protocols, delta: int) -> None:
        self.protocol_epoch += 1
        counts = self.supported_protocols
        for name, _ in protocols:
            count = counts.get(name, 0) + delta
            if count:
                counts[name] = count
            else:
                # Kafka keeps zero counts in its map; dropping them changes no answer and keeps a
                # group whose members keep inventing protocol names from growing.
                del counts[name]

    def supports_protocols(self, protocol_type: str, protocol_names: set[str]) -> bool:
        """GroupMetadata.supportsProtocols."""
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(protocol_names)
        if self.protocol_type != protocol_type:
            return False
        size = len(self.members)
        counts = self.supported_protocols
        for name in protocol_names:  # noqa: SIM110 - a loop, not any(genexpr): measured, once per JoinGroup
            if counts.get(name, 0) == size:
                return True
        return False

    def select_protocol(self) -> str:
        """GroupMetadata.selectProtocol: each member votes for its first candidate; most votes
        wins. Kafka breaks ties by HashMap order; here the earliest vote wins."""
        if not self.members:
            raise AssertionError("cannot select a protocol for an empty group")
        cached = self._selected
        if cached is not None and cached[0] == self.protocol_epoch:
            return cached[1]
        size = len(self.members)
        candidates = {name for name, count in self.supported_protocols.items() if count == size}
        votes: dict[str, int] = {}
        for member in self.members.values():
            choice = member.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        best = max(votes.values())
        selected = next(name for name, count in votes.items() if count == best)
        self._selected = (self.protocol_epoch, selected)
        return selected

    def subscribed_topics(self) -> frozenset[str] | None:
        """GroupMetadata.computeSubscribedTopics as of the current generation: the union of the
        members' consumer protocol subscriptions (parsed as their v0 prefix), empty for an empty
        consumer group, None when unknown (not a consumer group, no generation, or a subscription
        that does not parse)."""
        if self.protocol_type != "consumer":
            return None
        if self.state is GroupState.EMPTY and not self.members:
            return frozenset()
        metadata = self.generation_metadata
        if metadata is None:
            return None
        cached = self._subscribed
        if cached is not None and cached[0] is metadata:
            return cached[1]
        topics: frozenset[str] | None
        try:
            topics = frozenset(t for blob in metadata for t in decode_subscription_topics(blob))
        except CodecError:
            topics = None
        self._subscribed = (metadata, topics)
        return topics

    def is_subscribed_to_topic(self, topic: str) -> bool:
        """GroupMetadata.isSubscribedToTopic: unknown subscriptions count as subscribed."""
        topics = self.subscribed_topics()
        return topics is None or topic in topics

    def current_member_metadata(self) -> list[tuple[str, str | None, bytes]]:
        """GroupMetadata.currentMemberMetadata: what the leader's JoinGroup response lists."""
        if self.state in (GroupState.DEAD, GroupState.PREPARING_REBALANCE) or self.protocol_name is None:
            raise AssertionError(f"cannot list member metadata of group {self.group_id} in {self.state}")
        name = self.protocol_name
        members = (self.members[member_id] for member_id in self.ordered_member_ids())
        return [(m.member_id, m.identity.group_instance_id, m.metadata(name)) for m in members]
