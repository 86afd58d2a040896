"""responses.slot_filler (kio entities built slot by slot) against the entities' own __init__
and proxy.wire's generic builder, for every JoinGroup and SyncGroup version kio knows."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from proxy.wire.codec import response_schema
from replay.coordinator import responses as R


@pytest.mark.parametrize("api_version", range(10))
@pytest.mark.parametrize("members", [(), (("m-1", "pod-1", b"\x00\x01"), ("m-2", None, b""))])
@pytest.mark.parametrize("protocol_name", ["range", None])
def test_join_group_answers_are_the_generic_builders(
    api_version: int, members: tuple, protocol_name: str | None
) -> None:
    built = R.join_group(
        api_version,
        27,
        member_id="m-1",
        generation_id=7,
        protocol_type="consumer",
        protocol_name=protocol_name,
        leader="m-2",
        skip_assignment=True,
        members=members,
    )
    member_cls = R.nested(11, api_version, "JoinGroupResponseMember")
    fields = R._fields(member_cls)
    expected = R.make(
        11,
        api_version,
        error_code=R.error(27),
        member_id="m-1",
        generation_id=7,
        protocol_type="consumer",
        protocol_name="" if protocol_name is None and api_version < 7 else protocol_name,
        leader="m-2",
        skip_assignment=True,
        members=tuple(
            member_cls(
                **{
                    "member_id": m,
                    "metadata": meta,
                    **({"group_instance_id": i} if "group_instance_id" in fields else {}),
                }
            )
            for m, i, meta in members
        ),
    )
    assert built == expected and type(built) is type(expected)
    assert repr(built) == repr(expected) and hash(built) == hash(expected)


@pytest.mark.parametrize("api_version", range(10))
@pytest.mark.parametrize("protocol_type", ["consumer", None])
@pytest.mark.parametrize("protocol_name", ["range", None])
def test_follower_join_answers_are_the_generic_builders(
    api_version: int, protocol_type: str | None, protocol_name: str | None
) -> None:
    built = R.join_follower(api_version, "m-1", 7, protocol_type, protocol_name)
    expected = R.join_group(
        api_version,
        0,
        member_id="m-1",
        generation_id=7,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
    )
    assert built == expected and type(built) is type(expected)
    assert repr(built) == repr(expected) and hash(built) == hash(expected)
    assert built is not R.join_follower(api_version, "m-1", 7, protocol_type, protocol_name)


@pytest.mark.parametrize("api_version", range(6))
def test_sync_group_answers_are_the_generic_builders(api_version: int) -> None:
    built = R.sync_group(
        api_version, 0, assignment=b"\x00\x03", protocol_type="consumer", protocol_name="range"
    )
    expected = R.make(
        14,
        api_version,
        error_code=R.error(0),
        assignment=b"\x00\x03",
        protocol_type="consumer",
        protocol_name="range",
    )
    assert built == expected and type(built) is type(expected)


def test_slot_filler_is_the_entity_init_and_leaves_post_init_classes_to_it() -> None:
    schema = response_schema(11, 9)
    values = {name: getattr(R.join_group(9, 0, member_id="m"), name) for name in schema.__slots__}
    assert R.slot_filler(schema)(values) == schema(**values)
    with pytest.raises(KeyError):  # every field must be given: no default is filled in
        R.slot_filler(schema)({k: v for k, v in values.items() if k != "leader"})

    @dataclass(frozen=True, slots=True)
    class Checked:
        size: int

        def __post_init__(self) -> None:
            if self.size < 0:
                raise ValueError("negative")

    with pytest.raises(ValueError):
        R.slot_filler(Checked)({"size": -1})


def test_respond_built_slot_by_slot_is_the_dataclass() -> None:
    from replay.coordinator.types import RequestContext, Respond, respond

    ctx = RequestContext(1, "client", "/10.0.0.1", 4, 9)
    answer = R.heartbeat(4, 27)
    built = respond(ctx, answer)
    assert built == Respond(ctx, answer) and type(built) is Respond
    assert repr(built) == repr(Respond(ctx, answer)) and hash(built) == hash(Respond(ctx, answer))
