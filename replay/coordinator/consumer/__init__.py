"""KIP-848 consumer groups in the reference coordinator (issue 13): ConsumerGroupHeartbeat and
ConsumerGroupDescribe, sans-IO, in virtual time. Kafka 4.3.1's group-coordinator is the spec."""

from replay.coordinator.consumer.assignors import ASSIGNORS, MemberSpec, PartitionAssignorError, assign
from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator
from replay.coordinator.consumer.group import (
    ConsumerGroup,
    ConsumerGroupMember,
    ConsumerGroupState,
    MemberState,
)
from replay.coordinator.consumer.types import (
    ConsumerGroupBehaviour,
    ConsumerGroupConfig,
    ConsumerGroupEvent,
    DescribedGroup,
    DescribedMember,
    HeartbeatRequest,
    HeartbeatResponse,
    TopicImage,
)

__all__ = [
    "ASSIGNORS",
    "ConsumerGroup",
    "ConsumerGroupBehaviour",
    "ConsumerGroupConfig",
    "ConsumerGroupCoordinator",
    "ConsumerGroupEvent",
    "ConsumerGroupMember",
    "ConsumerGroupState",
    "DescribedGroup",
    "DescribedMember",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "MemberSpec",
    "MemberState",
    "PartitionAssignorError",
    "TopicImage",
    "assign",
]
