"""Real clients through an online migration: a classic confluent-kafka consumer (range) is joined
by a `group.protocol=consumer` one (the group is upgraded and the two share the topic), then the
consumer-protocol member leaves (the group is downgraded and the classic member takes every
partition back) - on `coordinator serve --consumer-group-migration-policy bidirectional` and on a
real Kafka 4.3.1 broker started with the same policy; both settle the same way."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from harness.admin import create_topic
from harness.lines import KAFKA_4X
from replay.coordinator.consumer.group import MigrationPolicy
from tests.support.serve import served
from tests.test_consumer_group_migration_differential import policy_broker_config
from tests.test_consumer_group_serve import TOPIC_PARTITIONS, _held

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def serve_bidirectional() -> Iterator[str]:
    with served(
        f"orders:{TOPIC_PARTITIONS}",
        "--consumer-group-migration-policy",
        "bidirectional",
        "--group-initial-rebalance-delay-ms",
        "0",
        group_settings=(),
    ) as bootstrap:
        yield bootstrap


def _member(bootstrap: str, group: str, name: str, protocol: str) -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "group.protocol": protocol,
        "enable.auto.commit": False,
    }
    if protocol == "classic":
        config |= {
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
            "partition.assignment.strategy": "range",
        }
    consumer = Consumer(config)
    consumer.subscribe(["orders"])
    return consumer


def _rolling_migration(bootstrap: str) -> list[list[list[int]]]:
    group = f"migration-{__import__('time').time_ns()}"
    classic = _member(bootstrap, group, "classic", "classic")
    try:
        steps = [_held([classic], 60, want=list(range(TOPIC_PARTITIONS)))]
        modern = _member(bootstrap, group, "modern", "consumer")
        try:
            split = _held([classic, modern], 90)
            steps.append([[len(h)] for h in split])  # who holds what may differ; how much may not
        finally:
            modern.close()  # ConsumerGroupHeartbeat epoch -1: the downgrade
        steps.append(_held([classic], 90, want=list(range(TOPIC_PARTITIONS))))
        return steps
    finally:
        classic.close()


def test_real_clients_upgrade_and_downgrade_like_kafka(serve_bidirectional: str, broker_factory) -> None:
    # the differential's bidirectional broker (its module runs just before this one)
    broker = broker_factory(KAFKA_4X, extra_config=policy_broker_config(MigrationPolicy.BIDIRECTIONAL))
    existing = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics
    if "orders" not in existing:
        create_topic(broker.bootstrap, "orders", TOPIC_PARTITIONS)
    kafka = _rolling_migration(broker.bootstrap)
    reference = _rolling_migration(serve_bidirectional)
    assert kafka == reference == [[[0, 1, 2, 3]], [[2], [2]], [[0, 1, 2, 3]]]
