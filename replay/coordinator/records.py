"""What the coordinator writes to its log: Kafka's __consumer_offsets records, as values.

Kafka's group coordinator keeps its state in the __consumer_offsets partition it leads and
rebuilds it from there when it becomes that partition's leader (a broker restart, a leader
moving). The records are GroupCoordinatorRecordHelpers' (group-coordinator/.../
GroupCoordinatorRecordHelpers.java; GroupMetadataManager.scala `groupMetadataValue` /
`offsetCommitValue` on the Scala coordinator):
- `GroupMetadataRecord`: GroupMetadataKey/GroupMetadataValue (GroupMetadataValue.json v0-4:
  protocolType, generation, protocol, leader, currentStateTimestamp, members with memberId,
  groupInstanceId, clientId, clientHost, rebalanceTimeout, sessionTimeout, subscription,
  assignment), written per completed generation (newGroupMetadataRecord), and a tombstone
  (value None) when the group is deleted (newGroupMetadataTombstoneRecord);
- `OffsetCommitRecord`: OffsetCommitKey/OffsetCommitValue (offset, leaderEpoch, metadata,
  commitTimestamp), per committed partition (newOffsetCommitRecord), a tombstone when the offset
  is deleted or expires (newOffsetCommitTombstoneRecord);
- `CoordinatorEpochRecord`: this coordinator's own, not Kafka's. Kafka's member ids end in a
  random UUID, so a restarted broker never issues one twice; ours are counters (reproducible
  runs), so each start writes its epoch and the ids it issues carry it.

With `CoordinatorConfig.write_records` the coordinator emits each record as an `Append` output,
before the responses it comes with (a Kafka coordinator answers once the records are written);
the shell appends them to its log and replays them on start (`replay.coordinator.persist`).
`encode_record`/`decode_record` map a record to and from a JSON-able dict (Kafka's field names)
and are pure: the shell owns the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    """Who a classic member is, fixed for its life: its group.instance.id and its client's id and
    host (the `val`s of Scala's MemberMetadata; ClassicGroup.replaceStaticMember hands them to
    the replacement). The live member (`replay.coordinator.group.Member`) and its log record
    (`MemberMetadata`) hold this one value. Not in it: the member id, which a static replacement
    changes, and the timeouts, which every JoinGroup updates (GroupMetadata.updateMember) and
    every heartbeat reads."""

    group_instance_id: str | None
    client_id: str
    client_host: str


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """GroupMetadataValue.MemberMetadata."""

    member_id: str
    identity: MemberIdentity
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadataValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp_ms: int
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class GroupMetadataRecord:
    """A classic group as of its last completed generation; `value` None is the tombstone."""

    group_id: str
    value: GroupMetadataValue | None

    @property
    def key(self) -> tuple[str, ...]:
        return ("group", self.group_id)


@dataclass(frozen=True, slots=True)
class OffsetCommitValue:
    offset: int
    leader_epoch: int
    metadata: str | None
    commit_ts_ms: int


@dataclass(frozen=True, slots=True)
class OffsetCommitRecord:
    """One committed offset; `value` None is the tombstone."""

    group_id: str
    topic: str
    partition: int
    value: OffsetCommitValue | None

    @property
    def key(self) -> tuple[str, ...]:
        return ("offset", self.group_id, self.topic, str(self.partition))


@dataclass(frozen=True, slots=True)
class CoordinatorEpochRecord:
    """How many times this coordinator's state was loaded before (0 on the first start)."""

    epoch: int

    @property
    def key(self) -> tuple[str, ...]:
        return ("epoch",)


Record = GroupMetadataRecord | OffsetCommitRecord | CoordinatorEpochRecord


@dataclass(frozen=True, slots=True)
class Append:
    """Append `record` to the coordinator's log (an output, like `Respond`)."""

    record: Record


class RecordError(ValueError):
    """A dict that is not a record this coordinator writes (a damaged log)."""


# --- to and from JSON-able dicts (GroupMetadataValue.json / OffsetCommitValue.json names) -------


def encode_record(record: Record) -> dict[str, Any]:
    match record:
        case GroupMetadataRecord(group_id, value):
            return {"type": "group_metadata", "group": group_id, "value": _group_value(value)}
        case OffsetCommitRecord(group_id, topic, partition, value):
            encoded = None
            if value is not None:
                encoded = {
                    "offset": value.offset,
                    "leaderEpoch": value.leader_epoch,
                    "metadata": value.metadata,
                    "commitTimestamp": value.commit_ts_ms,
                }
            return {
                "type": "offset_commit",
                "group": group_id,
                "topic": topic,
                "partition": partition,
                "value": encoded,
            }
        case CoordinatorEpochRecord(epoch):
            return {"type": "coordinator_epoch", "epoch": epoch}


def _group_value(value: GroupMetadataValue | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {
        "protocolType": value.protocol_type,
        "generation": value.generation,
        "protocol": value.protocol,
        "leader": value.leader,
        "currentStateTimestamp": value.current_state_timestamp_ms,
        "members": [
            {
                "memberId": m.member_id,
                "groupInstanceId": m.identity.group_instance_id,
                "clientId": m.identity.client_id,
                "clientHost": m.identity.client_host,
                "rebalanceTimeout": m.rebalance_timeout_ms,
                "sessionTimeout": m.session_timeout_ms,
                "subscription": m.subscription.hex(),
                "assignment": m.assignment.hex(),
            }
            for m in value.members
        ],
    }


def decode_record(data: Any) -> Record:
    """The record `data` encodes; RecordError names the first field that is wrong."""
    if not isinstance(data, dict):
        raise RecordError("a record is a JSON object")
    kind = data.get("type")
    match kind:
        case "group_metadata":
            value = data.get("value")
            return GroupMetadataRecord(
                _text(data, "group"), None if value is None else _decode_group_value(_object(value, "value"))
            )
        case "offset_commit":
            value = data.get("value")
            offset = None
            if value is not None:
                v = _object(value, "value")
                offset = OffsetCommitValue(
                    _int(v, "offset"),
                    _int(v, "leaderEpoch"),
                    _text(v, "metadata", nullable=True),
                    _int(v, "commitTimestamp"),
                )
            group, topic = _text(data, "group"), _text(data, "topic")
            return OffsetCommitRecord(group, topic, _int(data, "partition"), offset)
        case "coordinator_epoch":
            return CoordinatorEpochRecord(_int(data, "epoch"))
        case _:
            raise RecordError(f"type: unknown record type {kind!r}")


def _decode_group_value(v: dict[str, Any]) -> GroupMetadataValue:
    members = v.get("members")
    if not isinstance(members, list):
        raise RecordError("value.members: not a list")
    return GroupMetadataValue(
        protocol_type=_text(v, "protocolType"),
        generation=_int(v, "generation"),
        protocol=_text(v, "protocol", nullable=True),
        leader=_text(v, "leader", nullable=True),
        current_state_timestamp_ms=_int(v, "currentStateTimestamp"),
        members=tuple(_decode_member(_object(m, "value.members[]")) for m in members),
    )


def _decode_member(m: dict[str, Any]) -> MemberMetadata:
    identity = MemberIdentity(
        _text(m, "groupInstanceId", nullable=True), _text(m, "clientId"), _text(m, "clientHost")
    )
    return MemberMetadata(
        member_id=_text(m, "memberId"),
        identity=identity,
        rebalance_timeout_ms=_int(m, "rebalanceTimeout"),
        session_timeout_ms=_int(m, "sessionTimeout"),
        subscription=_bytes(m, "subscription"),
        assignment=_bytes(m, "assignment"),
    )


def _object(value: Any, name: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise RecordError(f"{name}: not an object")
    return value


def _text(data: dict[str, Any], name: str, nullable: bool = False) -> Any:
    value = data.get(name)
    if isinstance(value, str) or (nullable and value is None):
        return value
    raise RecordError(f"{name}: expected a string, got {value!r}")


def _int(data: dict[str, Any], name: str) -> int:
    value = data.get(name)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise RecordError(f"{name}: expected an integer, got {value!r}")


def _bytes(data: dict[str, Any], name: str) -> bytes:
    try:
        return bytes.fromhex(_text(data, name))
    except ValueError:
        raise RecordError(f"{name}: not hex bytes") from None


__all__ = [
    "Append",
    "CoordinatorEpochRecord",
    "GroupMetadataRecord",
    "GroupMetadataValue",
    "MemberIdentity",
    "MemberMetadata",
    "OffsetCommitRecord",
    "OffsetCommitValue",
    "Record",
    "RecordError",
    "decode_record",
    "encode_record",
]
