"""What a group-API request or response says about its group and member, across versions.

The field names come from Kafka's message JSON (through kio); older versions lack some fields
(`group_instance_id` appears in JoinGroup v5, batched OffsetFetch groups in v8, batched
FindCoordinator keys in v4), so every accessor tolerates their absence.

The consumer group protocol (KIP-848) speaks of a member epoch where the classic protocol has a
generation, and names the static identity `instance_id` (ConsumerGroupHeartbeatRequest.json);
`protocol` tells the two apart: "consumer" for ConsumerGroupHeartbeat/ConsumerGroupDescribe,
"classic" for JoinGroup/SyncGroup/Heartbeat/LeaveGroup/DescribeGroups, None for the APIs both use
(OffsetCommit/OffsetFetch carry a generation or a member epoch in the same field).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from proxy.wire.apis import CONSUMER_PROTOCOL_API_KEYS, ApiKey

_CLASSIC_ONLY = frozenset(
    {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.HEARTBEAT, ApiKey.LEAVE_GROUP, ApiKey.DESCRIBE_GROUPS}
)

# (topic id as text, partitions): topic ids are UUIDs on the consumer protocol (names need Metadata)
TopicPartitions = tuple[tuple[str, tuple[int, ...]], ...]


@dataclass(frozen=True, slots=True)
class GroupFields:
    """The group fields one decoded frame carries, None where the API (or its version) has
    none: what the capture's annotation, the observer and the proxy's rewrites read."""

    group_id: str | None = None
    member_id: str | None = None
    group_instance_id: str | None = None
    generation_id: int | None = None
    error_code: int | None = None
    protocol_name: str | None = None
    member_epoch: int | None = None
    protocol: str | None = None  # "classic" | "consumer" | None (an API both protocols use)
    assignment: TopicPartitions | None = None  # ConsumerGroupHeartbeat: owned (request) / target (response)


def group_protocol(api_key: int) -> str | None:
    """ "consumer" for the KIP-848 APIs, "classic" for the classic group APIs, else None."""
    if api_key in CONSUMER_PROTOCOL_API_KEYS:
        return "consumer"
    if api_key in _CLASSIC_ONLY:
        return "classic"
    return None


def _topic_partitions(items: Any) -> TopicPartitions | None:
    if items is None:
        return None
    return tuple((str(item.topic_id), tuple(int(p) for p in item.partitions)) for item in items)


def _first(items: Any) -> Any:
    return items[0] if items else None


def _error(entity: Any) -> int | None:
    code = getattr(entity, "error_code", None)
    return None if code is None else int(code.value if hasattr(code, "value") else code)


def request_group_id(api_key: int, entity: Any) -> str | None:
    """The group a group-API request is about (the first one when it names several)."""
    group_id = getattr(entity, "group_id", None)
    if group_id is not None:
        return str(group_id)
    match api_key:
        case ApiKey.OFFSET_FETCH:
            group = _first(getattr(entity, "groups", ()))
            return None if group is None else str(group.group_id)
        case ApiKey.FIND_COORDINATOR:
            if int(getattr(entity, "key_type", 0)) != 0:
                return None  # a transaction coordinator lookup
            key = getattr(entity, "key", None)
            if key is None:
                key = _first(getattr(entity, "coordinator_keys", ()))
            return None if key is None else str(key)
        case ApiKey.DESCRIBE_GROUPS:
            group = _first(getattr(entity, "groups", ()))
            return None if group is None else str(group)
        case ApiKey.CONSUMER_GROUP_DESCRIBE:
            group = _first(getattr(entity, "group_ids", ()))
            return None if group is None else str(group)
    return None


def request_fields(api_key: int, entity: Any) -> GroupFields:
    member_id = getattr(entity, "member_id", None)
    instance_id = getattr(entity, "group_instance_id", None)
    if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        return GroupFields(
            group_id=request_group_id(api_key, entity),
            member_id=None if member_id is None else str(member_id),
            group_instance_id=None if entity.instance_id is None else str(entity.instance_id),
            member_epoch=int(entity.member_epoch),
            protocol="consumer",
            protocol_name=None if entity.server_assignor is None else str(entity.server_assignor),
            assignment=_topic_partitions(entity.topic_partitions),
        )
    if api_key == ApiKey.LEAVE_GROUP and member_id is None:
        member = _first(getattr(entity, "members", ()))
        if member is not None:
            member_id = member.member_id
            instance_id = member.group_instance_id
    generation = getattr(entity, "generation_id", None)
    if generation is None:
        generation = getattr(entity, "generation_id_or_member_epoch", None)
    protocol = getattr(entity, "protocol_name", None)
    return GroupFields(
        group_id=request_group_id(api_key, entity),
        member_id=None if member_id is None else str(member_id),
        group_instance_id=None if instance_id is None else str(instance_id),
        generation_id=None if generation is None else int(generation),
        protocol_name=None if protocol is None else str(protocol),
        protocol=group_protocol(api_key),
    )


def response_fields(api_key: int, entity: Any) -> GroupFields:
    error = _error(entity)
    if error is None:
        match api_key:
            case ApiKey.FIND_COORDINATOR:
                error = _error(_first(getattr(entity, "coordinators", ())))
            case ApiKey.DESCRIBE_GROUPS | ApiKey.CONSUMER_GROUP_DESCRIBE:
                error = _error(_first(getattr(entity, "groups", ())))
            case ApiKey.OFFSET_FETCH:
                error = _error(_first(getattr(entity, "groups", ())))
    member_id = getattr(entity, "member_id", None)
    if api_key == ApiKey.CONSUMER_GROUP_HEARTBEAT:
        assignment = entity.assignment
        return GroupFields(
            member_id=None if member_id is None else str(member_id),
            member_epoch=int(entity.member_epoch),
            error_code=error,
            protocol="consumer",
            assignment=None if assignment is None else _topic_partitions(assignment.topic_partitions),
        )
    generation = getattr(entity, "generation_id", None)
    protocol = getattr(entity, "protocol_name", None)
    return GroupFields(
        member_id=None if member_id is None else str(member_id),
        generation_id=None if generation is None else int(generation),
        error_code=error,
        protocol_name=None if protocol is None else str(protocol),
        protocol=group_protocol(api_key),
    )
