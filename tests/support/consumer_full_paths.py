"""classic_members' remembered steps computed anew every time: the full path its fast paths
are checked against (tests/test_consumer_group_migration.py, tests/test_replay_round_trip.py)."""

from __future__ import annotations

from typing import Any
from unittest import mock

from proxy.wire.consumer_protocol import decode_subscription
from replay.coordinator.consumer import classic_members
from replay.coordinator.consumer.group import ClassicMemberMetadata


def _full_rebuilt(member: Any, *fields: Any) -> Any:
    """ConsumerGroupMember.Builder(member)...build() as a new record every time."""
    instance_id, rebalance_timeout_ms, topics, client_id, client_host, session_timeout_ms, protocols = fields
    return member._replace(
        instance_id=instance_id if instance_id is not None else member.instance_id,
        rebalance_timeout_ms=rebalance_timeout_ms
        if rebalance_timeout_ms != -1
        else member.rebalance_timeout_ms,
        subscribed_topic_names=frozenset(topics),
        subscribed_topic_regex=None,
        client_id=client_id,
        client_host=client_host,
        classic=ClassicMemberMetadata(session_timeout_ms, protocols),
    )


def _full_bumped_metadata(coordinator: Any, group: Any, updated: Any, changed: bool) -> Any:
    metadata_hash = coordinator._metadata_hash(coordinator._subscribed_names(group, updated))
    return metadata_hash if changed or metadata_hash != group.metadata_hash else None


def classic_members_full_paths() -> list[Any]:
    """What each remembered step of classic_members stands for, computed anew every time."""
    path = "replay.coordinator.consumer.classic_members."
    timer = classic_members.classic_timer

    def subscription(metadata: bytes) -> Any:
        decoded = decode_subscription(metadata)
        return decoded, frozenset(decoded.topics)

    return [
        mock.patch(path + "rebuilt", _full_rebuilt),
        mock.patch(path + "subscription_of", subscription),
        mock.patch(path + "bumped_metadata", _full_bumped_metadata),
        mock.patch(path + "subscribed_ids", lambda c, g, names: c.topic_ids(names)),
        mock.patch(path + "owned_partitions", classic_members.topic_partitions),
        mock.patch(
            path + "sync_ok_answer",
            lambda c, m, v, t, n: classic_members.sync_ok_response(
                v, classic_members.assignment_bytes(c, m), t, n
            ),
        ),
        mock.patch(path + "classic_timer", lambda c, *key: (c.classic_timers.clear(), timer(c, *key))[1]),
        *classic_cycle_full_paths(),
    ]


def classic_cycle_full_paths() -> list[Any]:
    """classic_cycle's fast paths off: every classic Heartbeat, JoinGroup and SyncGroup of a
    member in a consumer group through the service's full sequence."""
    path = "replay.coordinator.consumer.classic_cycle."
    return [
        mock.patch(path + "behind", return_value=False),
        *(mock.patch(path + name, return_value=None) for name in ("rejoin", "sync")),
    ]


def live_timers(sim: Any) -> list[tuple[str, int | None]]:
    """Every live timer's key and deadline."""
    timers = sim.coordinator.timers
    return sorted((key, timers.deadline(key)) for key in timers._live)


def consumer_group_outcome(sim: Any, group_id: str = "g") -> list[Any]:
    """What a run of a consumer group left: the events (classic and consumer), the live timers,
    the group's epochs, metadata hash and target, and its members."""
    consumer_groups = sim.coordinator.consumer.coordinator
    group = consumer_groups.groups.get(group_id)
    outcome: list[Any] = [(sim.kinds(), live_timers(sim)), list(consumer_groups.events)]
    if group is not None:
        outcome.append((group.group_epoch, group.assignment_epoch, group.metadata_hash, group.target))
        outcome.append(sorted(group.members.items()))
    return outcome
