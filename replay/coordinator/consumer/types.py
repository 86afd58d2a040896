"""The consumer-group coordinator's values: its settings, the Kafka build it behaves as, and the
protocol-neutral requests, answers and events it exchanges (`wire.py` maps them to kio)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer import assignors
from replay.coordinator.consumer.group import ConsumerGroupMember, MigrationPolicy


class ConsumerGroupBehaviour(enum.Enum):
    """Which Kafka build's consumer-group rules apply; each difference is a named property below,
    found by running tests/test_consumer_group_differential.py against both brokers and read in
    the sources jars (org.apache.kafka:kafka-group-coordinator:4.0.1 and :4.3.1)."""

    KAFKA_4_0 = "4.0"
    KAFKA_4_3 = "4.3"

    @property
    def initial_epoch(self) -> int:
        """A new group's group epoch and target assignment epoch: 4.3's ModernGroup starts at 1
        (TargetAssignmentMetadata.INITIAL = epoch 1), 4.0's at 0; the first join answers 2 or 1."""
        return 1 if self is ConsumerGroupBehaviour.KAFKA_4_3 else 0

    @property
    def moves_new_group_off_epoch_zero(self) -> bool:
        """4.0's consumerGroupHeartbeat bumps a group still at epoch 0 on any heartbeat ("ensure
        that it moves away from epoch 0"), so even a regex-only first member gets epoch 1 at once;
        4.3 starts groups at 1 and has no such rule."""
        return self is ConsumerGroupBehaviour.KAFKA_4_0

    @property
    def epoch_zero_rejoins(self) -> bool:
        """throwIfConsumerGroupMemberEpochIsInvalid: 4.3 lets a known member rejoin with epoch 0
        (KIP-848's fenced-member recovery); 4.0 treats 0 like any smaller epoch (FENCED_MEMBER_EPOCH
        unless 0 is its previous epoch and it owns a subset of its assignment)."""
        return self is ConsumerGroupBehaviour.KAFKA_4_3

    @property
    def batches_target_assignments(self) -> bool:
        """4.3 computes a new target at most once per group.consumer.assignment.interval.ms
        (canComputeNextTargetAssignment); 4.0 computes it on every group epoch bump."""
        return self is ConsumerGroupBehaviour.KAFKA_4_3

    @property
    def describe_includes_pending_revocation(self) -> bool:
        """ConsumerGroupDescribe's member assignment: 4.3 adds what the member must still revoke
        (asConsumerGroupDescribeMember), 4.0 shows only its assigned partitions."""
        return self is ConsumerGroupBehaviour.KAFKA_4_3


@dataclass(frozen=True, slots=True)
class ConsumerGroupConfig:
    """Broker settings (GroupCoordinatorConfig defaults of Kafka 4.3.1)."""

    behaviour: ConsumerGroupBehaviour = ConsumerGroupBehaviour.KAFKA_4_3
    session_timeout_ms: int = 45_000  # group.consumer.session.timeout.ms
    heartbeat_interval_ms: int = 5_000  # group.consumer.heartbeat.interval.ms
    max_size: int = 2**31 - 1  # group.consumer.max.size
    assignors: tuple[str, ...] = assignors.ASSIGNORS  # group.consumer.assignors; first is the default
    assignment_interval_ms: int = 1_000  # group.consumer.assignment.interval.ms
    regex_refresh_interval_ms: int = 600_000  # group.consumer.regex.refresh.interval.ms
    # group.consumer.migration.policy. Kafka's default is BIDIRECTIONAL; the reference keeps
    # DISABLED as its default (what it answered before the migration was modelled).
    migration_policy: MigrationPolicy = MigrationPolicy.DISABLED
    classic_max_size: int = 2**31 - 1  # group.max.size (validateOnlineDowngrade*)


@dataclass(frozen=True, slots=True)
class TopicImage:
    """What the coordinator knows of a topic from the metadata image."""

    name: str
    topic_id: UUID
    partitions: int


class HeartbeatRequest(NamedTuple):
    """ConsumerGroupHeartbeatRequest, protocol-neutral (None = the field's null / -1 sentinel).
    A NamedTuple: one is built per request from kio (wire.py)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: tuple[str, ...] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[UUID, frozenset[int]] | None = None  # topicPartitions
    api_version: int = 1
    client_id: str = ""
    client_host: str = ""


class HeartbeatResponse(NamedTuple):
    """ConsumerGroupHeartbeatResponse, protocol-neutral. A NamedTuple: after each group epoch
    bump every member's next answer is a new one (steady.py)."""

    error_code: int = 0
    error_message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    heartbeat_interval_ms: int = 0
    assignment: Mapping[UUID, frozenset[int]] | None = None


@dataclass(frozen=True, slots=True)
class DescribedMember:
    member_id: str
    instance_id: str | None
    rack_id: str | None
    member_epoch: int
    client_id: str
    client_host: str
    subscribed_topic_names: tuple[str, ...]
    subscribed_topic_regex: str | None
    assignment: Mapping[UUID, frozenset[int]]
    target_assignment: Mapping[UUID, frozenset[int]]
    classic: bool = False  # uses the classic protocol (member_type 0, KIP-1099)


@dataclass(frozen=True, slots=True)
class DescribedGroup:
    """ConsumerGroupDescribeResponse.DescribedGroup (GroupMetadataManager.consumerGroupDescribe)."""

    group_id: str
    error_code: int
    error_message: str | None = None
    group_state: str = ""
    group_epoch: int = 0
    assignment_epoch: int = 0
    assignor_name: str = ""
    members: tuple[DescribedMember, ...] = ()


@dataclass(frozen=True, slots=True)
class ConsumerGroupEvent:
    """Something a replay's event table may want: joined, left, fenced (with why), epoch bumps."""

    ts_ms: int
    group_id: str
    kind: str  # member_joined | member_left | member_fenced | member_expired | target_assigned |
    # group_upgraded | group_downgraded (the online migration)
    member_id: str | None = None
    epoch: int = 0
    detail: str = ""


class HeartbeatError(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def updated_member(member: ConsumerGroupMember, request: HeartbeatRequest) -> ConsumerGroupMember:
    """ConsumerGroupMember.Builder.maybeUpdate*: a field the request leaves null (or -1) keeps
    its value. A heartbeat that changes nothing (a plain one, or a static member's, which names
    its instance id every time) returns the member itself."""
    if (
        (request.instance_id is None or request.instance_id == member.instance_id)
        and (request.rack_id is None or request.rack_id == member.rack_id)
        and request.rebalance_timeout_ms in (-1, member.rebalance_timeout_ms)
        and (request.server_assignor is None or request.server_assignor == member.server_assignor)
        and (
            request.subscribed_topic_names is None
            or frozenset(request.subscribed_topic_names) == member.subscribed_topic_names
        )
        and (
            request.subscribed_topic_regex is None
            or request.subscribed_topic_regex == member.subscribed_topic_regex
        )
        and request.client_id == member.client_id
        and request.client_host == member.client_host
        and member.classic is None
    ):
        return member
    return member._replace(
        classic=None,  # setClassicMemberMetadata(null): the member now uses the consumer protocol
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=request.server_assignor
        if request.server_assignor is not None
        else member.server_assignor,
        subscribed_topic_names=(
            frozenset(request.subscribed_topic_names)
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            request.subscribed_topic_regex
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=request.client_id,
        client_host=request.client_host,
    )


__all__ = [
    "ConsumerGroupBehaviour",
    "ConsumerGroupConfig",
    "ConsumerGroupEvent",
    "DescribedGroup",
    "DescribedMember",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "TopicImage",
    "updated_member",
]
