"""Build kio group requests for any api_version from one set of keyword arguments.

Fields a version lacks are dropped (JoinGroup v0 has no rebalance timeout, v5 adds the group
instance id, ...), so tests, the driver and the benchmark describe a request once.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from typing import Any

from kio.static.primitive import i32Timedelta, i64Timedelta

from proxy.wire.codec import request_schema
from proxy.wire.entities import build, nested_of


def _nested(api_key: int, api_version: int, name: str) -> type[Any]:
    return nested_of(request_schema(api_key, api_version), name)


_build = build


@lru_cache(maxsize=1024)
def duration(ms: int) -> Any:
    return i32Timedelta.parse(datetime.timedelta(milliseconds=ms))


def join_group(
    api_version: int,
    group_id: str,
    member_id: str = "",
    *,
    group_instance_id: str | None = None,
    session_timeout_ms: int = 10_000,
    rebalance_timeout_ms: int = 30_000,
    protocol_type: str = "consumer",
    protocols: tuple[tuple[str, bytes], ...] = (("range", b""),),
    reason: str | None = None,
) -> Any:
    protocol_cls = _nested(11, api_version, "JoinGroupRequestProtocol")
    return _build(
        request_schema(11, api_version),
        {
            "group_id": group_id,
            "session_timeout": duration(session_timeout_ms),
            "rebalance_timeout": duration(rebalance_timeout_ms),
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "protocol_type": protocol_type,
            "protocols": tuple(protocol_cls(name=n, metadata=m) for n, m in protocols),
            "reason": reason,
        },
    )


def sync_group(
    api_version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    *,
    group_instance_id: str | None = None,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
    assignments: dict[str, bytes] | None = None,
) -> Any:
    assignment_cls = _nested(14, api_version, "SyncGroupRequestAssignment")
    return _build(
        request_schema(14, api_version),
        {
            "group_id": group_id,
            "generation_id": generation_id,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "assignments": tuple(
                assignment_cls(member_id=m, assignment=a) for m, a in (assignments or {}).items()
            ),
        },
    )


def heartbeat(
    api_version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    *,
    group_instance_id: str | None = None,
) -> Any:
    return _build(
        request_schema(12, api_version),
        {
            "group_id": group_id,
            "generation_id": generation_id,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
        },
    )


def leave_group(api_version: int, group_id: str, members: list[tuple[str, str | None]]) -> Any:
    """LeaveGroup; v0-2 take exactly one (member_id, None)."""
    schema = request_schema(13, api_version)
    if api_version <= 2:
        if len(members) != 1:
            raise ValueError("LeaveGroup v0-2 removes exactly one member")
        return _build(schema, {"group_id": group_id, "member_id": members[0][0]})
    identity_cls = _nested(13, api_version, "MemberIdentity")
    return _build(
        schema,
        {
            "group_id": group_id,
            "members": tuple(
                _build(identity_cls, {"member_id": m, "group_instance_id": i, "reason": None})
                for m, i in members
            ),
        },
    )


def offset_commit(
    api_version: int,
    group_id: str,
    generation_id: int,
    member_id: str,
    offsets: dict[tuple[str, int], int],
    *,
    group_instance_id: str | None = None,
) -> Any:
    topic_cls = _nested(8, api_version, "OffsetCommitRequestTopic")
    partition_cls = _nested(8, api_version, "OffsetCommitRequestPartition")
    by_topic: dict[str, list[tuple[int, int]]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append((partition, offset))
    topics = tuple(
        topic_cls(
            name=topic,
            partitions=tuple(
                _build(
                    partition_cls,
                    {
                        "partition_index": p,
                        "committed_offset": o,
                        "committed_leader_epoch": -1,
                        "commit_timestamp": -1,
                        "committed_metadata": "",
                    },
                )
                for p, o in parts
            ),
        )
        for topic, parts in by_topic.items()
    )
    return _build(
        request_schema(8, api_version),
        {
            "group_id": group_id,
            "generation_id_or_member_epoch": generation_id,
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            # OffsetCommitRequest.DEFAULT_RETENTION_TIME (v2-4): the broker's retention.
            "retention_time": i64Timedelta.parse(datetime.timedelta(milliseconds=-1)),
            "topics": topics,
        },
    )
