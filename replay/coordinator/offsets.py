"""Committed offsets, kept apart from group membership as Kafka's OffsetMetadataManager keeps them.

GroupCoordinator.scala handleCommitOffsets / validateOffsetCommit / doCommitOffsets /
handleFetchOffsets and GroupMetadata.removeExpiredOffsets; OffsetMetadataManager.java
commitOffset, fetchOffsets/fetchAllOffsets, cleanupExpiredOffsets. Offsets live here, per group
id; the membership checks a commit needs come from the classic group manager.
"""

from __future__ import annotations

from typing import Any

from proxy.wire.apis import ApiKey
from proxy.wire.errors import ErrorCode as E
from replay.coordinator import parse as P
from replay.coordinator import responses as R
from replay.coordinator.classic import ClassicGroupManager
from replay.coordinator.codes import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    GROUP_ID_NOT_FOUND,
    GROUP_SUBSCRIBED_TO_TOPIC,
    ILLEGAL_GENERATION,
    INVALID_GROUP_ID,
    NON_EMPTY_GROUP,
    NONE,
    REBALANCE_IN_PROGRESS,
    UNKNOWN_MEMBER_ID,
)
from replay.coordinator.consumer.service import ConsumerGroupService
from replay.coordinator.group import ClassicGroup
from replay.coordinator.persist import store_offset
from replay.coordinator.records import OffsetCommitValue
from replay.coordinator.runtime import UNKNOWN_MEMBER
from replay.coordinator.types import GroupState, KafkaBehaviour, RequestContext

TopicPartition = tuple[str, int]


# A committed offset is what its OffsetCommitValue record holds (offset, leader epoch, metadata,
# commit timestamp).
CommittedOffset = OffsetCommitValue


class OffsetMetadataManager:
    def __init__(self, groups: ClassicGroupManager) -> None:
        self.groups = groups
        self.offsets: dict[str, dict[TopicPartition, CommittedOffset]] = {}
        self.consumer_groups: ConsumerGroupService | None = None  # KIP-848 groups (set by the coordinator)

    def of(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        """The committed offsets of a group (empty when it has none)."""
        return self.offsets.get(group_id, {})

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id))

    # --- OffsetCommit ------------------------------------------------------------------------
    def commit_offset(self, ctx: RequestContext, request: P.OffsetCommit, group: ClassicGroup | None) -> None:  # noqa: C901 - Kafka's OffsetMetadataManager commit validation, one branch per check
        """GroupCoordinator.handleCommitOffsets / validateOffsetCommit / doCommitOffsets."""
        manager = self.groups
        api_version = ctx.api_version
        group_id, generation_id, member_id, group_instance_id, by_id, topics = request
        code = NONE
        consumer_group = self.consumer_groups is not None and self.consumer_groups.is_consumer_group(group_id)
        if consumer_group:  # ConsumerGroup.validateOffsetCommit: the member epoch, not a generation
            assert self.consumer_groups is not None
            code = self.consumer_groups.validate_offset_commit(
                group_id, member_id, group_instance_id, generation_id, api_version
            )
        elif group is None:
            if generation_id < 0:
                group = manager._create_group(group_id)
            elif api_version >= 9 and manager.config.kafka_behaviour is KafkaBehaviour.NEW_COORDINATOR:
                # OffsetMetadataManager.validateOffsetCommit: v9+ says GROUP_ID_NOT_FOUND.
                code = GROUP_ID_NOT_FOUND
            else:
                code = ILLEGAL_GENERATION
        if group is not None and code == NONE:
            code = self._validate_offset_commit(group, generation_id, member_id, group_instance_id)
            if code == NONE:
                match group.state:
                    case GroupState.STABLE | GroupState.PREPARING_REBALANCE:
                        member = group.members[member_id]
                        manager._schedule_heartbeat(group, member, member.session_timeout_ms)
                    case GroupState.COMPLETING_REBALANCE:
                        code = REBALANCE_IN_PROGRESS
                    case _:
                        pass
            elif code == FENCED_INSTANCE_ID:
                manager._fenced(group, member_id, group_instance_id, "offset-commit")
        topic_cls = R.nested(ApiKey.OFFSET_COMMIT, api_version, "OffsetCommitResponseTopic")
        partition_cls = R.nested(ApiKey.OFFSET_COMMIT, api_version, "OffsetCommitResponsePartition")
        keep = code == NONE and (group is not None or consumer_group)
        stored = self.offsets.setdefault(group_id, {}) if keep else None
        now_ms = manager._now_ms
        answered = []
        err = R.error(code)
        for name, partitions in topics:
            if stored is not None:
                for p in partitions:
                    tp = (str(name), p.partition)
                    stored[tp] = committed = CommittedOffset(p.offset, p.leader_epoch, p.metadata, now_ms)
                    store_offset(manager, group_id, tp, committed)  # newOffsetCommitRecord
            entries = tuple(partition_cls(partition_index=p.partition, error_code=err) for p in partitions)
            if by_id:
                answered.append(topic_cls(topic_id=name, partitions=entries))
            else:
                answered.append(topic_cls(name=name, partitions=entries))
        if stored is not None and not stored:
            del self.offsets[group_id]
        manager._respond(ctx, R.make(ApiKey.OFFSET_COMMIT, api_version, topics=tuple(answered)))

    def _validate_offset_commit(
        self, group: ClassicGroup, generation_id: int, member_id: str, group_instance_id: str | None
    ) -> E:
        """ClassicGroup.validateOffsetCommit (non-transactional)."""
        if group.is_in(GroupState.DEAD):
            return COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and group.is_in(GroupState.EMPTY):
            return NONE
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER or group_instance_id is not None:
            code = self.groups._validate_member(group, member_id, group_instance_id)
            if code == NONE and generation_id != group.generation_id:
                code = ILLEGAL_GENERATION
            return code
        if not group.is_in(GroupState.EMPTY):
            return UNKNOWN_MEMBER_ID
        return NONE

    # --- OffsetFetch -------------------------------------------------------------------------
    def fetch_offsets(self, ctx: RequestContext, request: P.OffsetFetch, group: ClassicGroup | None) -> None:
        """GroupCoordinator.handleFetchOffsets: committed offsets regardless of the group state
        (-1 when none); v8+ batches groups."""
        api_version = ctx.api_version
        none = R.error(NONE)
        if request.batched:
            group_cls = R.nested(ApiKey.OFFSET_FETCH, api_version, "OffsetFetchResponseGroup")
            groups = tuple(
                group_cls(
                    group_id=g.group_id,
                    topics=self._fetch_topics(
                        api_version, g, "OffsetFetchResponseTopics", "OffsetFetchResponsePartitions"
                    ),
                    error_code=none,
                )
                for g in request.groups
            )
            self.groups._respond(ctx, R.make(ApiKey.OFFSET_FETCH, api_version, groups=groups))
            return
        topics = self._fetch_topics(
            api_version, request.groups[0], "OffsetFetchResponseTopic", "OffsetFetchResponsePartition"
        )
        self.groups._respond(ctx, R.make(ApiKey.OFFSET_FETCH, api_version, topics=topics, error_code=none))

    def _fetch_topics(
        self, api_version: int, requested: P.FetchedGroup, topic_name: str, partition_name: str
    ) -> tuple[Any, ...]:
        topic_cls = R.nested(ApiKey.OFFSET_FETCH, api_version, topic_name)
        partition_cls = R.nested(ApiKey.OFFSET_FETCH, api_version, partition_name)
        offsets = self.of(requested.group_id)
        wanted: list[tuple[str, list[int]]] | tuple[tuple[str, tuple[int, ...]], ...]
        if requested.topics is None:
            by_topic: dict[str, list[int]] = {}
            for topic, partition in sorted(offsets):
                by_topic.setdefault(topic, []).append(partition)
            wanted = list(by_topic.items())
        else:
            wanted = requested.topics
        none = R.error(NONE)
        out = []
        for topic, partitions in wanted:
            entries = []
            for partition in partitions:
                committed = offsets.get((topic, partition))
                entries.append(
                    R.build(
                        partition_cls,
                        {
                            "partition_index": partition,
                            "committed_offset": committed.offset if committed else -1,
                            "committed_leader_epoch": committed.leader_epoch if committed else -1,
                            "metadata": committed.metadata if committed else "",
                            "error_code": none,
                        },
                    )
                )
            out.append(topic_cls(name=topic, partitions=tuple(entries)))
        return tuple(out)

    # --- OffsetDelete ------------------------------------------------------------------------
    def delete_offsets(
        self, ctx: RequestContext, request: P.OffsetDelete, group: ClassicGroup | None
    ) -> None:
        """GroupCoordinator.handleDeleteOffsets (OffsetMetadataManager.deleteOffsets +
        ClassicGroup.validateOffsetDelete): an Empty group loses the offsets asked; a live
        consumer group those of topics no member subscribes to (GROUP_SUBSCRIBED_TO_TOPIC for
        the others); any other live group answers NON_EMPTY_GROUP. Scala's coordinator then runs
        cleanupGroupMetadata on the group, which removes an Empty group left without offsets."""
        manager = self.groups
        api_version = ctx.api_version
        group_error = NONE
        partition_errors: list[tuple[str, int, E]] = []
        if not request.group_id:
            group_error = INVALID_GROUP_ID
        elif group is None or group.is_in(GroupState.DEAD):
            group_error = GROUP_ID_NOT_FOUND
        elif group.is_in(GroupState.EMPTY) or group.protocol_type == "consumer":
            empty = group.is_in(GroupState.EMPTY)
            deleted: list[TopicPartition] = []
            for topic, partitions in request.topics:
                subscribed = not empty and group.is_subscribed_to_topic(topic)
                code = GROUP_SUBSCRIBED_TO_TOPIC if subscribed else NONE
                for partition in partitions:
                    partition_errors.append((topic, partition, code))
                    if not subscribed:
                        deleted.append((topic, partition))
            self.remove(group.group_id, deleted)
            if (
                manager.config.kafka_behaviour is KafkaBehaviour.SCALA_3_9
                and group.is_in(GroupState.EMPTY)
                and not self.has_offsets(group.group_id)
            ):
                manager._delete_group(group, "OffsetDelete removed its last offsets")
        else:
            group_error = NON_EMPTY_GROUP
        topic_cls = R.nested(ApiKey.OFFSET_DELETE, api_version, "OffsetDeleteResponseTopic")
        partition_cls = R.nested(ApiKey.OFFSET_DELETE, api_version, "OffsetDeleteResponsePartition")
        by_topic: dict[str, list[Any]] = {}
        for topic, partition, code in partition_errors:
            by_topic.setdefault(topic, []).append(
                partition_cls(partition_index=partition, error_code=R.error(code))
            )
        topics = tuple(topic_cls(name=t, partitions=tuple(ps)) for t, ps in by_topic.items())
        manager._respond(
            ctx, R.make(ApiKey.OFFSET_DELETE, api_version, error_code=R.error(group_error), topics=topics)
        )

    # --- expiry ------------------------------------------------------------------------------
    def remove_expired_offsets(self, group: ClassicGroup, now_ms: int, retention_ms: int) -> int:
        """GroupMetadata.removeExpiredOffsets / ClassicGroup.offsetExpirationCondition: an Empty
        group's offsets expire `retention_ms` after it became Empty; a group without a protocol
        type (offsets committed by a standalone consumer) expires each offset `retention_ms` after
        its commit. (Kafka also expires a Stable consumer group's offsets of topics no member
        subscribes to; this coordinator does not parse subscriptions and keeps those.)"""
        offsets = self.offsets.get(group.group_id)
        if not offsets:
            return 0
        if group.protocol_type is None:
            expired = [tp for tp, o in offsets.items() if now_ms - o.commit_ts_ms >= retention_ms]
        elif group.state is GroupState.EMPTY and now_ms - group.state_timestamp_ms >= retention_ms:
            expired = list(offsets)
        else:
            return 0
        self.remove(group.group_id, expired)
        return len(expired)

    def remove(self, group_id: str, partitions: list[TopicPartition]) -> None:
        """Drop these offsets of a group, writing their tombstones (newOffsetCommitTombstoneRecord)."""
        offsets = self.offsets.get(group_id)
        if offsets is None:
            return
        for tp in partitions:
            if offsets.pop(tp, None) is not None:
                store_offset(self.groups, group_id, tp, None)
        if not offsets:
            del self.offsets[group_id]

    def delete_group(self, group_id: str) -> None:
        self.remove(group_id, list(self.of(group_id)))
