"""`group-replay coordinator serve` answers KIP-848 consumer-protocol clients: real confluent-kafka
consumers with `group.protocol=consumer` form a group, split the topic, and the survivor takes
everything when one leaves; a classic client asking for the same group id is refused
(INCONSISTENT_GROUP_PROTOCOL: the online migration is not modelled yet); ListGroups and
ConsumerGroupDescribe (through confluent-kafka's AdminClient) show the consumer group.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

TOPIC_PARTITIONS = 4


@pytest.fixture(scope="module")
def serve() -> Iterator[str]:
    process = subprocess.Popen(
        [sys.executable, "-m", "group_replay", "coordinator", "serve", "--port", "0",
         "--topics", f"orders:{TOPIC_PARTITIONS}"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        raise RuntimeError(f"coordinator did not start: {process.stderr.read() if process.stderr else ''}")
    try:
        yield f"127.0.0.1:{json.loads(line)['port']}"
    finally:
        process.terminate()
        process.wait(timeout=10)
        assert process.stderr is not None
        stderr = process.stderr.read()
        assert "Traceback" not in stderr, stderr[-3000:]


def _consumer(bootstrap: str, group: str, name: str, protocol: str = "consumer") -> Consumer:
    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "client.id": name,
        "group.protocol": protocol,
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 500,
    }
    if protocol == "classic":
        config |= {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500}
    consumer = Consumer(config)
    consumer.subscribe(["orders"])
    return consumer


def _held(consumers: list[Consumer], timeout_s: float, want: list[int] | None = None) -> list[list[int]]:
    """Poll until the consumers together hold every partition, each one something."""
    deadline = time.monotonic() + timeout_s
    held: list[list[int]] = []
    while time.monotonic() < deadline:
        for consumer in consumers:
            consumer.poll(0.1)
        held = [sorted(p.partition for p in c.assignment()) for c in consumers]
        complete = sorted(p for h in held for p in h) == list(range(TOPIC_PARTITIONS))
        if complete and all(held) and (want is None or held == [want]):
            return held
    raise AssertionError(f"not settled after {timeout_s} s: {held}")


def test_consumer_protocol_clients_form_split_and_take_over(serve: str) -> None:
    group = f"kip848-serve-{time.time_ns()}"
    a = _consumer(serve, group, "a")
    b = _consumer(serve, group, "b")
    try:
        held = _held([a, b], 60)
        assert len(held[0]) == len(held[1]) == TOPIC_PARTITIONS // 2  # uniform: balanced, disjoint
        admin = AdminClient({"bootstrap.servers": serve})
        listed = admin.list_consumer_groups().result(timeout=30)
        assert group in {g.group_id for g in listed.valid}
        described = admin.describe_consumer_groups([group])[group].result(timeout=30)
        assert described.state == ConsumerGroupState.STABLE and len(described.members) == 2

        classic = _consumer(serve, group, "classic", protocol="classic")
        try:
            deadline = time.monotonic() + 30
            refused = None
            while refused is None and time.monotonic() < deadline:
                message = classic.poll(0.2)
                a.poll(0)
                b.poll(0)
                if message is not None and message.error() is not None:
                    refused = message.error()
            assert refused is not None and refused.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL, refused
        finally:
            with contextlib.suppress(KafkaException):  # its group refused it: closing may complain
                classic.close()
    finally:
        b.close()  # leaves with member epoch -1
    assert _held([a], 60, want=list(range(TOPIC_PARTITIONS))) == [list(range(TOPIC_PARTITIONS))]
    a.close()
