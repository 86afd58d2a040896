"""Writing the coordinator's state as records, and loading it back from them.

Writing follows where Kafka writes (GroupCoordinatorRecordHelpers.newGroupMetadataRecord and its
callers): the leader's SyncGroup (GroupCoordinator.doSyncGroup `storeGroup` / GroupMetadataManager.
classicGroupSyncToClassicGroup), a join phase that leaves the group Empty (onCompleteJoin /
completeClassicGroupJoin), a static member replaced in a Stable group (updateStaticMemberAndRebalance),
each offset commit (OffsetMetadataManager.commitOffset) and the tombstones of deletions and expiry.

Loading follows GroupMetadataManager.replay(GroupMetadataKey, GroupMetadataValue) and
OffsetMetadataManager.replay (new coordinator; GroupMetadataManager.scala loadGroupsAndOffsets and
GroupMetadata.loadGroup on the Scala one): a group comes back as of its last record, Stable with
its members or Empty without, whatever it was doing when the log stopped; every member gets a
fresh session timeout (GroupMetadataManager.onLoaded -> rescheduleClassicGroupMemberHeartbeat,
GroupCoordinator.onGroupLoaded -> completeAndScheduleNextHeartbeatExpiration), so a member that
does not come back expires as it would on a restarted broker. Offsets of a group without metadata
make a "simple" Empty group without protocol type (getOrMaybeCreateClassicGroup).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from replay.coordinator.group import ClassicGroup, Member
from replay.coordinator.records import (
    Append,
    CoordinatorEpochRecord,
    GroupMetadataRecord,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitRecord,
    OffsetCommitValue,
    Record,
)
from replay.coordinator.types import CoordinatorConfig, GroupState, Output

TopicPartition = tuple[str, int]


def group_metadata_record(group: ClassicGroup) -> GroupMetadataRecord:
    """newGroupMetadataRecord: the group with each member's subscription (its metadata for the
    selected protocol) and assignment."""
    protocol = group.protocol_name
    members = tuple(
        MemberMetadata(
            member_id=m.member_id,
            identity=m.identity,
            rebalance_timeout_ms=m.rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            subscription=m.metadata(protocol) if protocol is not None else b"",
            assignment=m.assignment,
        )
        for m in group.members.values()
    )
    value = GroupMetadataValue(
        protocol_type=group.protocol_type or "",
        generation=group.generation_id,
        protocol=protocol,
        leader=group.leader_id,
        current_state_timestamp_ms=group.state_timestamp_ms,
        members=members,
    )
    return GroupMetadataRecord(group.group_id, value)


class Writer(Protocol):
    """What writes records: the coordinator runtime (its config and its outputs)."""

    config: CoordinatorConfig
    _out: list[Output]


def store_group(runtime: Writer, group: ClassicGroup) -> None:
    """Append the group's record, when the coordinator writes records (`write_records`: a
    record per generation copies every member, which only a shell that keeps a log pays for)."""
    if runtime.config.write_records:
        runtime._out.append(Append(group_metadata_record(group)))


def store_offset(runtime: Writer, group_id: str, tp: TopicPartition, value: OffsetCommitValue | None) -> None:
    """Append an offset's record (None: its tombstone), when the coordinator writes records."""
    if runtime.config.write_records:
        runtime._out.append(Append(OffsetCommitRecord(group_id, tp[0], tp[1], value)))


@dataclass(frozen=True, slots=True)
class LoadedState:
    """What `load` found: groups (classic, with their member counts), offsets, and the epoch the
    coordinator now runs in."""

    groups: dict[str, int]
    offsets: int
    epoch: int


def loaded_group(value: GroupMetadataValue, group: ClassicGroup) -> None:
    """GroupMetadataManager.replay: fill a new Empty `group` from `value` (Stable when it has
    members; a member's rebalance timeout of -1 means its session timeout)."""
    group.generation_id = value.generation
    group.protocol_name = value.protocol
    if value.current_state_timestamp_ms != -1:
        group.state_timestamp_ms = value.current_state_timestamp_ms
    for m in value.members:
        rebalance_timeout_ms = m.rebalance_timeout_ms
        if rebalance_timeout_ms == -1:  # written before GroupMetadataValue v1
            rebalance_timeout_ms = m.session_timeout_ms
        member = Member(
            member_id=m.member_id,
            identity=m.identity,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=m.session_timeout_ms,
            protocol_type=value.protocol_type,
            protocols=((value.protocol or "", m.subscription),),
            assignment=m.assignment,
        )
        group.add(member, None)
    group.protocol_type = value.protocol_type or None  # after `add`, which sets it from a member
    group.leader_id = value.leader if value.members else None
    if value.members:
        group.state = GroupState.STABLE
        group.generation_metadata = tuple(m.subscription for m in value.members)


Offsets = dict[str, dict[TopicPartition, OffsetCommitValue]]


def replay_records(records: Iterable[Record]) -> tuple[dict[str, GroupMetadataValue], Offsets, int | None]:
    """The last value of every key (tombstones remove): group values, offsets by group, and the
    last epoch written (None when none was)."""
    groups: dict[str, GroupMetadataValue] = {}
    offsets: Offsets = {}
    epoch: int | None = None
    for record in records:
        match record:
            case GroupMetadataRecord(group_id, group_value):
                groups.pop(group_id, None)  # a tombstone removes; a value replaces (groups.put)
                if group_value is not None:
                    groups[group_id] = group_value
            case OffsetCommitRecord(group_id, topic, partition, offset_value):
                stored = offsets.setdefault(group_id, {})
                if offset_value is not None:
                    stored[(topic, partition)] = offset_value
                else:
                    stored.pop((topic, partition), None)
                if not stored:
                    del offsets[group_id]
            case CoordinatorEpochRecord(value):
                epoch = value
    return groups, offsets, epoch


__all__ = [
    "LoadedState",
    "Writer",
    "group_metadata_record",
    "loaded_group",
    "replay_records",
    "store_group",
    "store_offset",
]
