"""JoinGroup requests and responses for the tests, spelled once.

The tests of the codec, the proxy session, the rewrite policies and the observer all need a
JoinGroup of some version with a few fields of their own; each names only those and the rest
take the values below. Built with proxy.wire.entities.build_tree, so a field the version lacks
(v5 has no `reason`) is left out and the nested protocols and members are that version's classes.
"""

from __future__ import annotations

import datetime
from typing import Any

from kio.static.primitive import i32Timedelta

from proxy.wire import ApiKey, ErrorCode, request_schema, response_schema
from proxy.wire.entities import build_tree


def ms(value_ms: int) -> i32Timedelta:
    """A kio duration field (session_timeout, throttle_time, ...) from milliseconds."""
    return i32Timedelta.parse(datetime.timedelta(milliseconds=value_ms))


def join_request(
    api_version: int = 9,
    *,
    group_id: str = "g",
    session_timeout_ms: int = 45_000,
    rebalance_timeout_ms: int = 300_000,
    member_id: str = "",
    group_instance_id: str | None = None,
    metadata: bytes = b"",
    reason: str | None = None,
) -> Any:
    """A JoinGroupRequest of `api_version` for one `range` protocol with `metadata`."""
    return build_tree(
        request_schema(ApiKey.JOIN_GROUP, api_version),
        {
            "group_id": group_id,
            "session_timeout": ms(session_timeout_ms),
            "rebalance_timeout": ms(rebalance_timeout_ms),
            "member_id": member_id,
            "group_instance_id": group_instance_id,
            "protocol_type": "consumer",
            "protocols": ({"name": "range", "metadata": metadata},),
            "reason": reason,
        },
    )


def join_response(
    api_version: int = 9,
    *,
    member_id: str = "m-1",
    generation_id: int = 1,
    leader: str = "m-1",
    members: tuple[tuple[str, str | None, bytes], ...] = (),
    skip_assignment: bool = False,
    error_code: ErrorCode = ErrorCode.none,
    protocol_type: str | None = "consumer",
    protocol_name: str | None = "range",
) -> Any:
    """A JoinGroupResponse of `api_version`; `members` as (member_id, group_instance_id, metadata)."""
    return build_tree(
        response_schema(ApiKey.JOIN_GROUP, api_version),
        {
            "throttle_time": ms(0),
            "error_code": error_code,
            "generation_id": generation_id,
            "protocol_type": protocol_type,
            "protocol_name": protocol_name,
            "leader": leader,
            "skip_assignment": skip_assignment,
            "member_id": member_id,
            "members": tuple(
                {"member_id": m, "group_instance_id": i, "metadata": data} for m, i, data in members
            ),
        },
    )
