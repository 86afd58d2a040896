"""A recorded member's seat in a run: which state machine plays it and with what settings.

Each recorded member (`plan.MemberScript`, named by its `member_key`) is played by one sans-IO
member at a time: `ClassicMember` (JoinGroup/SyncGroup/Heartbeat) or, when a scenario says
`protocol: consumer` for it (from the start, or after its bounce), `ConsumerMember`
(ConsumerGroupHeartbeat, KIP-848). A member that switches protocol keeps its identity
(member_key, client id, group.instance.id), its subscription (the topics of its recorded
JoinGroup), its rebalance timeout (max.poll.interval.ms) and its recorded sessions; its
incarnation count carries over, so answers to the member it replaced are ignored.

A recorded member that itself spoke the consumer protocol (a capture of a KIP-848 group, or of a
migration: members restarted with `group.protocol=consumer`) starts with the protocol of its
first recorded session (`new_seat`) and takes each later session's protocol at that recorded
restart (`to_recorded_protocol`), unless the scenario set its protocol; its consumer-protocol
processes are `replay.consumer_replay.RecordedConsumerMember`s (recorded member ids and times).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from proxy.membership import render_instance_id
from proxy.wire import CodecError
from proxy.wire.consumer_protocol import decode_subscription
from replay.consumer_member import CONSUMER_HEARTBEAT, NEWEST_CONSUMER_HEARTBEAT, ConsumerMember
from replay.consumer_replay import RecordedConsumerMember, recorded_ids
from replay.member import JOIN, ClassicMember, GroupMember, JoinSettings, MemberState, companion_versions
from replay.migration import GroupProtocol
from replay.plan import MemberScript, Session
from replay.scenario import MemberSettings, Membership, VersionRule


@dataclass(slots=True, eq=False)
class Seat:
    """A recorded member's place in a run: its script, its state machine, its current connection."""

    script: MemberScript
    member: GroupMember  # ClassicMember or ConsumerMember
    topics: dict[str, int]  # partition count per topic the member's client knows
    connection_id: int = 0
    server_assignor: str | None = None  # what it asks for once it speaks the consumer protocol
    assignors: tuple[str, ...] | None = None  # a classic member's strategy (None: as recorded)
    assignor_user_data: bytes | None = None  # a custom classic assignor's assignment userData
    protocol_set: bool = False  # the scenario chose its protocol (recorded restarts keep it)

    @property
    def protocol(self) -> GroupProtocol:
        return GroupProtocol.CONSUMER if isinstance(self.member, ConsumerMember) else GroupProtocol.CLASSIC


def new_member(script: MemberScript, topics: dict[str, int]) -> ClassicMember:
    versions = companion_versions(script.api_versions.get(JOIN, int(type(script.join_template).__version__)))
    versions.update(script.api_versions)
    return ClassicMember(
        script.member_key,
        script.client_id,
        JoinSettings.from_request(script.join_template),
        instance_id=script.group_instance_id,
        api_versions=versions,
        heartbeat_interval_ms=script.heartbeat_interval_ms,
        topics=topics,
        heartbeat_times_ms=script.heartbeat_times_ms,
        client_software=script.client_software,
    )


def subscription(script: MemberScript) -> tuple[str, ...]:
    """The topics the recorded member subscribed to (its first protocol's subscription)."""
    topics: set[str] = set()
    for protocol in script.join_template.protocols:
        try:
            topics.update(decode_subscription(bytes(protocol.metadata)).topics)
        except CodecError:
            continue
        break
    return tuple(sorted(topics))


def new_consumer_member(script: MemberScript, instance_id: str | None, incarnation: int) -> ConsumerMember:
    """The member's consumer-protocol process: as recorded (`RecordedConsumerMember`: its
    heartbeat's rebalance timeout, server assignor, API version, member ids and times) when the
    recording has it speaking ConsumerGroupHeartbeat, else synthesized from its JoinGroup."""
    join = JoinSettings.from_request(script.join_template)
    template = script.heartbeat_template
    if template is None:
        return ConsumerMember(
            script.member_key,
            script.client_id,
            script.group_id,
            subscription(script),
            instance_id=instance_id,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            api_versions={CONSUMER_HEARTBEAT: NEWEST_CONSUMER_HEARTBEAT},
            incarnation=incarnation,
            client_software=script.client_software,
        )
    rebalance_timeout_ms = int(template.rebalance_timeout.total_seconds() * 1000)
    return RecordedConsumerMember(
        script.member_key,
        script.client_id,
        script.group_id,
        tuple(template.subscribed_topic_names or ()) or subscription(script),
        instance_id=instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms > 0 else join.rebalance_timeout_ms,
        server_assignor=template.server_assignor,
        api_versions={
            CONSUMER_HEARTBEAT: script.api_versions.get(CONSUMER_HEARTBEAT, NEWEST_CONSUMER_HEARTBEAT)
        },
        incarnation=incarnation,
        client_software=script.client_software,
        recorded_ids=recorded_ids(script),
        heartbeat_times_ms=script.consumer_heartbeat_times_ms,
    )


def new_seat(script: MemberScript, topics: dict[str, int]) -> Seat:
    """A recorded member's seat, playing the protocol of its first recorded session."""
    seat = Seat(script, new_member(script, topics), topics)
    switch_protocol(seat, script.sessions[0].protocol)
    return seat


def to_recorded_protocol(seat: Seat, now_ms: int) -> None:
    """At a recorded restart (the process is stopped): the protocol of the recorded session that
    starts then, unless the scenario chose the member's protocol."""
    if seat.protocol_set or seat.member.state not in (MemberState.UNJOINED, MemberState.FATAL):
        return
    session: Session | None = None
    for recorded in seat.script.sessions:
        if recorded.start_ms > now_ms:
            break
        session = recorded
    if session is not None:
        switch_protocol(seat, session.protocol)


def switch_protocol(seat: Seat, protocol: GroupProtocol) -> None:
    """The member's next process speaks `protocol` (it is not running: before its first start or
    while bounced). Identity, subscription, timing and incarnation carry over."""
    member = seat.member
    assert member.state in (MemberState.UNJOINED, MemberState.FATAL), member.state
    if protocol is seat.protocol:
        return
    if protocol is GroupProtocol.CONSUMER:
        consumer = new_consumer_member(seat.script, member.instance_id, member.incarnation)
        consumer.server_assignor = seat.server_assignor or consumer.server_assignor
        seat.member = consumer
        return
    classic = new_member(seat.script, seat.topics)
    classic.instance_id = member.instance_id
    classic.incarnation = member.incarnation
    seat.member = classic
    _use_assignors(seat, classic)


def _use_assignors(seat: Seat, member: ClassicMember) -> None:
    """The seat's classic assignors: the recorded subscription under each name (ClassicMember
    writes a sticky assignor's own metadata), COOPERATIVE when every one is cooperative-sticky
    (ConsumerCoordinator's protocol choice); and a custom assignor's userData."""
    member.assignment_user_data = seat.assignor_user_data
    if seat.assignors is None:
        return
    recorded = dict(member.join_settings.protocols)
    first = next(iter(recorded.values()), b"")
    protocols = tuple((name, recorded.get(name, first)) for name in seat.assignors)
    member.join_settings = replace(member.join_settings, protocols=protocols)
    member.cooperative = all(name == "cooperative-sticky" for name in seat.assignors)


def apply_settings(seat: Seat, settings: MemberSettings, broker_caps: tuple[VersionRule, ...]) -> None:
    if settings.assignors is not None or settings.assignor_user_data is not None:
        seat.assignors = settings.assignors or seat.assignors
        seat.assignor_user_data = settings.assignor_user_data or seat.assignor_user_data
        if isinstance(seat.member, ClassicMember):
            _use_assignors(seat, seat.member)
    if settings.server_assignor is not None:
        seat.server_assignor = settings.server_assignor
        if isinstance(seat.member, ConsumerMember):
            seat.member.server_assignor = settings.server_assignor
    if settings.protocol is not None:
        seat.protocol_set = True
        switch_protocol(seat, settings.protocol)
    _apply_membership(seat, settings)
    _apply_versions(seat.member.api_versions, settings.api_versions, broker_caps)


def _apply_membership(seat: Seat, settings: MemberSettings) -> None:
    script, member = seat.script, seat.member
    match settings.membership:
        case Membership.STATIC:
            template = settings.instance_id or script.group_instance_id or "{client_id}-{ordinal}"
            member.instance_id = instance_id(template, script)
        case Membership.DYNAMIC:
            member.instance_id = None
        case Membership.AS_RECORDED:
            member.instance_id = script.group_instance_id
        case None:
            if settings.instance_id is not None:
                member.instance_id = instance_id(settings.instance_id, script)


def _apply_versions(
    versions: dict[int, int], rules: tuple[VersionRule, ...], broker_caps: tuple[VersionRule, ...]
) -> None:
    for rule in rules:
        if rule.api_key == JOIN and JOIN in versions:
            versions[JOIN] = rule.apply(versions[JOIN])
            if rule.exact:  # companions follow an exact JoinGroup version
                versions.update(companion_versions(versions[JOIN]))
        elif rule.api_key in versions:
            versions[rule.api_key] = rule.apply(versions[rule.api_key])
    for rule in broker_caps:
        if rule.api_key in versions:
            versions[rule.api_key] = min(versions[rule.api_key], rule.api_version)


def instance_id(template: str, script: MemberScript) -> str:
    return render_instance_id(
        template, client_id=script.client_id, ordinal=script.ordinal, member_key=script.member_key
    )


def closes_with_leave(member: GroupMember, recorded_left: bool) -> bool:
    """Whether the member's clean close() tells the coordinator: a classic member as recorded (a
    static Java consumer sends no LeaveGroup); a consumer-protocol one always (AbstractMembership-
    Manager.leaveGroup: epoch -1, a static member -2, which keeps its partitions)."""
    return recorded_left or isinstance(member, ConsumerMember)


__all__ = [
    "Seat",
    "apply_settings",
    "closes_with_leave",
    "instance_id",
    "new_consumer_member",
    "new_member",
    "new_seat",
    "subscription",
    "switch_protocol",
    "to_recorded_protocol",
]
