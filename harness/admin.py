"""Topic helpers over confluent-kafka's AdminClient (a real client, not our codec)."""

from __future__ import annotations

import time

DEFAULT_TIMEOUT_MS = 30_000


class AdminError(RuntimeError):
    """The broker refused or did not finish an admin request in time."""


def create_topic(
    bootstrap: str,
    topic: str,
    partitions: int = 1,
    *,
    config: dict[str, str] | None = None,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    settings: dict[str, str] | None = None,
    replication: int = 1,
) -> None:
    """Create `topic` (`replication` copies; -1: the cluster's default.replication.factor) and wait
    until its metadata shows every partition. `settings`: the client's own (security) settings.

    An existing topic with the same partition count is accepted, so session-scoped brokers can be
    shared by tests that pick the same name.
    """
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient
    from confluent_kafka.cimpl import NewTopic

    admin = AdminClient({**(settings or {}), "bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=replication, config=config or {})],
        request_timeout=timeout_ms / 1000,
    )
    try:
        futures[topic].result(timeout=timeout_ms / 1000)
    except KafkaException as exc:
        error = exc.args[0]
        if error.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise AdminError(f"create topic {topic!r} on {bootstrap}: {error}") from exc
    wait_for_partitions(bootstrap, topic, partitions, timeout_ms=timeout_ms, admin=admin)


def wait_for_partitions(
    bootstrap: str, topic: str, partitions: int, *, timeout_ms: int = DEFAULT_TIMEOUT_MS, admin: object = None
) -> None:
    """Poll metadata until `topic` has `partitions` partitions, each with a leader."""
    from confluent_kafka.admin import AdminClient

    client = admin if admin is not None else AdminClient({"bootstrap.servers": bootstrap})
    deadline = time.monotonic() + timeout_ms / 1000
    seen = "nothing"
    while time.monotonic() < deadline:
        metadata = client.list_topics(topic=topic, timeout=5)  # type: ignore[attr-defined]
        found = metadata.topics.get(topic)
        if found is not None and found.error is None:
            leaders = [p.leader for p in found.partitions.values()]
            seen = f"{len(leaders)} partitions, leaders {sorted(leaders)}"
            if len(leaders) == partitions and all(leader >= 0 for leader in leaders):
                return
            if len(leaders) > partitions:
                raise AdminError(
                    f"topic {topic!r} exists with {len(leaders)} partitions, wanted {partitions}"
                )
        time.sleep(0.2)
    raise AdminError(f"topic {topic!r} on {bootstrap} not ready within {timeout_ms} ms (saw {seen})")


def delete_topic(bootstrap: str, topic: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic], request_timeout=timeout_ms / 1000)[topic].result(timeout=timeout_ms / 1000)
