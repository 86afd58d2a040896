"""kio entities <-> the consumer group coordinator's own request and response types.

ConsumerGroupHeartbeat v0-v1 and ConsumerGroupDescribe v0-v1 (all Kafka 4.3.1 serves,
ConsumerGroupHeartbeatRequest.json / ConsumerGroupDescribeResponse.json); field names from kio.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kio.index import load_request_schema, load_response_schema
from kio.static.primitive import i8, i32, i32Timedelta

from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer.steady import steady
from replay.coordinator.consumer.types import DescribedGroup, HeartbeatRequest, HeartbeatResponse
from replay.coordinator.responses import slot_filler

if TYPE_CHECKING:
    from replay.coordinator.consumer.coordinator import ConsumerGroupCoordinator

CONSUMER_GROUP_HEARTBEAT = 68
CONSUMER_GROUP_DESCRIBE = 69
SUPPORTED_VERSIONS = {CONSUMER_GROUP_HEARTBEAT: (0, 1), CONSUMER_GROUP_DESCRIBE: (0, 1)}


@lru_cache(maxsize=256)
def _ms(duration: Any) -> int:
    """Cached: a request carries one of a few durations (-1 on every plain heartbeat)."""
    return int(duration.days * 86_400_000 + duration.seconds * 1000 + duration.microseconds // 1000)


@lru_cache(maxsize=256)
def _td(ms: int) -> i32Timedelta:
    """Cached: a few durations (heartbeat interval, 0, -1) are in every message."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


@lru_cache(maxsize=8)
def _heartbeat_request_schema(api_version: int) -> tuple[Any, Any]:
    schema: Any = load_request_schema(CONSUMER_GROUP_HEARTBEAT, api_version)
    return schema, __import__(schema.__module__, fromlist=["TopicPartitions"])


@lru_cache(maxsize=8)
def _heartbeat_response_schema(api_version: int) -> tuple[Any, Any]:
    schema: Any = load_response_schema(CONSUMER_GROUP_HEARTBEAT, api_version)
    return schema, __import__(schema.__module__, fromlist=["Assignment", "TopicPartitions"])


_ERRORS = {int(code): code for code in ErrorCode}  # ErrorCode(value) is an EnumType call


def _uuid(value: Any) -> UUID:
    return value if type(value) is UUID else UUID(str(value))


def heartbeat_from_kio(
    entity: Any, api_version: int, client_id: str = "", client_host: str = ""
) -> HeartbeatRequest:
    owned = None
    if entity.topic_partitions is not None:
        owned = {
            _uuid(tp.topic_id): frozenset(int(p) for p in tp.partitions) for tp in entity.topic_partitions
        }
    return HeartbeatRequest(
        group_id=str(entity.group_id),
        member_id=str(entity.member_id),
        member_epoch=int(entity.member_epoch),
        instance_id=entity.instance_id,
        rack_id=entity.rack_id,
        rebalance_timeout_ms=_ms(entity.rebalance_timeout),
        subscribed_topic_names=(
            None
            if entity.subscribed_topic_names is None
            else tuple(str(n) for n in entity.subscribed_topic_names)
        ),
        subscribed_topic_regex=getattr(entity, "subscribed_topic_regex", None),
        server_assignor=entity.server_assignor,
        owned=owned,
        api_version=api_version,
        client_id=client_id,
        client_host=client_host,
    )


def heartbeat_to_kio(request: HeartbeatRequest, api_version: int = 1) -> Any:
    """A kio ConsumerGroupHeartbeatRequest (tests and replay drive real brokers with it)."""
    schema, module = _heartbeat_request_schema(api_version)
    fields: dict[str, Any] = {
        "group_id": request.group_id,
        "member_id": request.member_id,
        "member_epoch": i32(request.member_epoch),
        "instance_id": request.instance_id,
        "rack_id": request.rack_id,
        "rebalance_timeout": _td(request.rebalance_timeout_ms),
        "subscribed_topic_names": request.subscribed_topic_names,
        "server_assignor": request.server_assignor,
        "topic_partitions": (
            None
            if request.owned is None
            else tuple(
                module.TopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in sorted(parts)))
                for topic_id, parts in sorted(request.owned.items())
            )
        ),
    }
    if api_version >= 1:
        fields["subscribed_topic_regex"] = request.subscribed_topic_regex
    return schema(**fields)


def _topic_partitions(module: Any, partitions: Mapping[UUID, frozenset[int]]) -> tuple[Any, ...]:
    return tuple(
        module.TopicPartitions(topic_id=topic_id, partitions=tuple(i32(p) for p in sorted(parts)))
        for topic_id, parts in sorted(partitions.items())
        if parts
    )


@lru_cache(maxsize=8)
def _heartbeat_response_filler(api_version: int) -> tuple[Any, Any]:
    schema, module = _heartbeat_response_schema(api_version)
    return slot_filler(schema), module


_ZERO = _td(0)


def heartbeat_response_to_kio(response: HeartbeatResponse, api_version: int) -> Any:
    """The kio answer, filled slot by slot (responses.slot_filler: most heartbeats of a rolling
    upgrade move the member to a new epoch, so their answer is new)."""
    fill, module = _heartbeat_response_filler(api_version)
    assignment = (
        None
        if response.assignment is None
        else module.Assignment(topic_partitions=_topic_partitions(module, response.assignment))
    )
    code = _ERRORS.get(response.error_code)  # (ErrorCode.none is falsy: no `or` here)
    return fill(
        {
            "throttle_time": _ZERO,
            "error_code": ErrorCode(response.error_code) if code is None else code,
            "error_message": response.error_message,
            "member_id": response.member_id,
            "member_epoch": response.member_epoch,  # an i32 is an int at run time; i32() is slow
            "heartbeat_interval": _td(response.heartbeat_interval_ms),
            "assignment": assignment,
        }
    )


def steady_from_kio(
    coordinator: ConsumerGroupCoordinator, now_ms: int, entity: Any, client_id: str, client_host: str
) -> HeartbeatResponse | None:
    """ConsumerGroupCoordinator.heartbeat's first steps on a kio request: the timers due fire,
    then `steady.steady` is asked with the request's own fields, so a heartbeat that changes
    nothing is answered before `heartbeat_from_kio` converts the partitions it owns. None: the
    full path's turn (`steady` changed nothing)."""
    heap = coordinator.timers.heap
    if heap and heap[0][0] <= now_ms:
        coordinator.advance(now_ms)
    return steady(
        coordinator,
        now_ms,
        entity.group_id,
        entity.member_id,
        entity.member_epoch,
        entity.instance_id,
        entity.rack_id,
        _ms(entity.rebalance_timeout),
        entity.subscribed_topic_names is not None
        or getattr(entity, "subscribed_topic_regex", None) is not None,
        entity.server_assignor,
        client_id,
        client_host,
    )


def wire_answer(
    coordinator: ConsumerGroupCoordinator, group_id: str, answer: HeartbeatResponse, api_version: int
) -> Any:
    """The kio answer to a steady heartbeat: `steady` gives a member the same answer object
    until its epoch moves, so the kio entity built for it is kept beside it and given again."""
    group = coordinator.groups[group_id]
    member_id = answer.member_id or ""
    cached = group.wire_answers.get(member_id)
    if cached is not None and cached[0] is answer and cached[1] == api_version:
        return cached[2]
    response = heartbeat_response_to_kio(answer, api_version)
    group.wire_answers[member_id] = (answer, api_version, response)
    return response


def heartbeat_response_from_kio(entity: Any) -> HeartbeatResponse:
    assignment = None
    if entity.assignment is not None:
        assignment = {
            UUID(str(tp.topic_id)): frozenset(int(p) for p in tp.partitions)
            for tp in entity.assignment.topic_partitions
        }
    return HeartbeatResponse(
        error_code=int(entity.error_code),
        error_message=entity.error_message,
        member_id=entity.member_id,
        member_epoch=int(entity.member_epoch),
        heartbeat_interval_ms=_ms(entity.heartbeat_interval),
        assignment=assignment,
    )


def describe_response_to_kio(
    groups: list[DescribedGroup], api_version: int, topic_names: Mapping[UUID, str]
) -> Any:
    """ConsumerGroupDescribeResponse; `topic_names` resolves topic ids for the assignments."""
    schema: Any = load_response_schema(CONSUMER_GROUP_DESCRIBE, api_version)
    module = __import__(
        schema.__module__, fromlist=["DescribedGroup", "Member", "Assignment", "TopicPartitions"]
    )

    def partitions(assigned: Mapping[UUID, frozenset[int]]) -> Any:
        return module.Assignment(
            topic_partitions=tuple(
                module.TopicPartitions(
                    topic_id=topic_id,
                    topic_name=topic_names.get(topic_id, ""),
                    partitions=tuple(i32(p) for p in sorted(parts)),
                )
                for topic_id, parts in sorted(assigned.items())
                if parts
            )
        )

    described = []
    for group in groups:
        members = []
        for m in group.members:
            values: dict[str, Any] = {
                "member_id": m.member_id,
                "instance_id": m.instance_id,
                "rack_id": m.rack_id,
                "member_epoch": i32(m.member_epoch),
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": m.subscribed_topic_names,
                "subscribed_topic_regex": m.subscribed_topic_regex,
                "assignment": partitions(m.assignment),
                "target_assignment": partitions(m.target_assignment),
            }
            if api_version >= 1:
                values["member_type"] = i8(
                    0 if m.classic else 1
                )  # KIP-1099: 1 = consumer protocol, 0 = classic
            members.append(module.Member(**values))
        described.append(
            module.DescribedGroup(
                error_code=ErrorCode(group.error_code),
                error_message=group.error_message,
                group_id=group.group_id,
                group_state=group.group_state,
                group_epoch=i32(group.group_epoch),
                assignment_epoch=i32(group.assignment_epoch),
                assignor_name=group.assignor_name,
                members=tuple(members),
                authorized_operations=i32(-(2**31)),
            )
        )
    return schema(throttle_time=_td(0), groups=tuple(described))


__all__ = [
    "CONSUMER_GROUP_DESCRIBE",
    "CONSUMER_GROUP_HEARTBEAT",
    "SUPPORTED_VERSIONS",
    "describe_response_to_kio",
    "heartbeat_from_kio",
    "heartbeat_response_from_kio",
    "heartbeat_response_to_kio",
    "heartbeat_to_kio",
    "steady_from_kio",
    "wire_answer",
]
