"""The generic version converter over kio entities: every group API, every version pair."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from proxy.wire import (
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_schema,
    response_schema,
    supports,
)
from proxy.wire.apis import GROUP_API_KEYS, api_name
from proxy.wire.convert import ConversionError, convert
from tests.support.group_entities import join_request, join_response, ms

VERSIONS = {key: [v for v in range(0, 20) if supports(key, v)] for key in sorted(GROUP_API_KEYS)}
# Responses whose older versions leave out what the newer ones name (keys, members): they only
# round-trip when the request is passed along, tested by example below.
NEEDS_REQUEST = {(13, "response"), (10, "response"), (9, "response")}


def _encode(entity: object, kind: str) -> bytes:
    if kind == "request":
        return encode_request(entity, correlation_id=7, client_id="c")
    return encode_response(entity, correlation_id=7)


def _decode(data: bytes, kind: str, api_key: int, api_version: int) -> object:
    if kind == "request":
        return decode_request(data[4:])[1]
    return decode_response(data[4:], api_key, api_version)[1]


CASES = [(key, kind) for key in VERSIONS for kind in ("request", "response")]


@pytest.mark.parametrize(("api_key", "kind"), CASES, ids=[f"{api_name(k)}-{kind}" for k, kind in CASES])
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(data=st.data())
def test_convert_between_any_two_versions(api_key: int, kind: str, data: st.DataObject) -> None:
    versions = VERSIONS[api_key]
    source_version = data.draw(st.sampled_from(versions), label="source_version")
    target_version = data.draw(st.sampled_from(versions), label="target_version")
    schema = request_schema if kind == "request" else response_schema
    entity = data.draw(st.from_type(schema(api_key, source_version)), label="entity")
    try:
        _decode(_encode(entity, kind), kind, api_key, source_version)
    except Exception:  # hypothesis drew values kio cannot carry in the source version itself
        # (e.g. a retention_time near timedelta.max encodes but overflows on decode)
        assume(False)

    result = convert(entity, target_version)

    # The result is the target version's class and kio encodes and decodes it unchanged.
    assert type(result.entity) is schema(api_key, target_version)
    encoded = _encode(result.entity, kind)
    assert _decode(encoded, kind, api_key, target_version) == result.entity
    # Every loss names a field path (in the target's layout where an adapter regrouped the fields).
    known = set(type(entity).__dataclass_fields__) | set(type(result.entity).__dataclass_fields__)
    for loss in result.dropped_fields:
        assert loss.path.split(".")[0].split("[")[0] in known
    # Nothing reported lost means nothing was: converting back gives the original.
    if result.lossless and (api_key, kind) not in NEEDS_REQUEST:
        back = convert(result.entity, source_version)
        if api_key == 11 and kind == "response" and entity.protocol_name is None and target_version < 7:
            assert back.entity.protocol_name == ""  # Kafka sends null as "" below v7
        else:
            assert back.entity == entity


def test_group_instance_id_below_v5_is_reported_only_when_set() -> None:
    static = convert(join_request(group_instance_id="consumer-1"), 4)
    assert [(loss.path, loss.value) for loss in static.dropped_fields] == [
        ("group_instance_id", "consumer-1")
    ]
    dynamic = convert(join_request(), 4)
    assert dynamic.dropped_fields == ()
    assert type(dynamic.entity).__version__ == 4
    assert dynamic.entity.rebalance_timeout == ms(300000)


def test_reason_below_v8_and_nested_protocols_follow_the_target_classes() -> None:
    result = convert(join_request(reason="rebalance needed"), 7)
    assert [loss.path for loss in result.dropped_fields] == ["reason"]
    assert type(result.entity.protocols[0]).__version__ == 7


def test_join_group_v0_rebalance_timeout_is_the_session_timeout() -> None:
    down = convert(join_request(rebalance_timeout_ms=45000), 0)
    assert down.dropped_fields == ()
    up = convert(down.entity, 5)
    assert up.entity.rebalance_timeout == ms(45000)
    lossy = convert(join_request(), 0)
    assert [loss.path for loss in lossy.dropped_fields] == ["rebalance_timeout"]


def test_join_group_response_member_instance_ids_are_nested_losses() -> None:
    response = join_response(
        generation_id=3, skip_assignment=True, members=(("m-1", "a", b""), ("m-2", None, b""))
    )
    result = convert(response, 4)
    assert {loss.path for loss in result.dropped_fields} == {
        "members[0].group_instance_id",
        "skip_assignment",
        "protocol_type",
    }
    assert result.entity.generation_id == 3


def test_leave_group_single_member_round_trips_and_batches_do_not_fit_v2() -> None:
    from kio.schema.leave_group.v0.request import LeaveGroupRequest as LeaveV0
    from kio.schema.leave_group.v4.request import LeaveGroupRequest, MemberIdentity

    up = convert(LeaveV0(group_id="g", member_id="m-1"), 4)
    assert up.dropped_fields == ()
    assert [m.member_id for m in up.entity.members] == ["m-1"]
    assert convert(up.entity, 0).entity == LeaveV0(group_id="g", member_id="m-1")

    batch = LeaveGroupRequest(
        group_id="g",
        members=(
            MemberIdentity(member_id="", group_instance_id="a"),
            MemberIdentity(member_id="", group_instance_id="b"),
        ),
    )
    lossy = convert(batch, 2)
    assert {loss.path for loss in lossy.dropped_fields} == {"members", "members[0].group_instance_id"}


def test_leave_group_response_names_the_request_members_going_up() -> None:
    from kio.schema.leave_group.v0.response import LeaveGroupResponse as LeaveRespV0
    from kio.schema.leave_group.v4.request import LeaveGroupRequest, MemberIdentity

    request = LeaveGroupRequest(
        group_id="g", members=(MemberIdentity(member_id="m-1", group_instance_id=None),)
    )
    up = convert(LeaveRespV0(error_code=ErrorCode.unknown_member_id), 4, request=request)
    assert [(m.member_id, m.error_code) for m in up.entity.members] == [("m-1", ErrorCode.unknown_member_id)]
    down = convert(up.entity, 0)
    assert down.entity.error_code == ErrorCode.unknown_member_id


def test_find_coordinator_response_keys_come_from_the_request() -> None:
    from kio.schema.find_coordinator.v1.response import FindCoordinatorResponse
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest

    old = FindCoordinatorResponse(
        throttle_time=ms(0), error_code=ErrorCode.none, error_message=None, node_id=1, host="h", port=9092
    )
    request = FindCoordinatorRequest(key_type=0, coordinator_keys=("g",))
    up = convert(old, 4, request=request)
    assert [(c.key, c.host, c.port) for c in up.entity.coordinators] == [("g", "h", 9092)]
    assert convert(up.entity, 1).entity == old
    assert convert(request, 1).entity.key == "g"


def test_offset_fetch_single_group_round_trips() -> None:
    from kio.schema.offset_fetch.v7.request import OffsetFetchRequest, OffsetFetchRequestTopic

    request = OffsetFetchRequest(
        group_id="g",
        topics=(OffsetFetchRequestTopic(name="t", partition_indexes=(0, 1)),),
        require_stable=True,
    )
    up = convert(request, 9)
    assert up.dropped_fields == ()
    assert up.entity.groups[0].group_id == "g"
    assert convert(up.entity, 7).entity == request


def test_not_an_entity_or_unknown_version_is_a_conversion_error() -> None:
    with pytest.raises(ConversionError):
        convert(object(), 1)
    with pytest.raises(ConversionError):
        convert(join_request(), 99)
