"""`group-replay coordinator serve` answers KIP-848 consumer-protocol clients: real confluent-kafka
consumers and Java kafka-clients 4.3.1 consumers (tests/java/ConsumerProtocolMember.java) with
`group.protocol=consumer` form a group, split the topic, and the survivor takes
everything when one leaves; a classic client asking for the same group id is refused
(INCONSISTENT_GROUP_PROTOCOL: serve's default migration policy is `disabled`; the online
migration is in tests/test_consumer_group_migration*.py); ListGroups and
ConsumerGroupDescribe (through confluent-kafka's AdminClient) show the consumer group, and
DeleteGroups refuses it while it has members and deletes it once empty.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupState, KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from demo.clients import compile_cached, java_client_command
from harness.admin import create_topic
from harness.class_archive import start_jvm
from proxy.wire.errors import ErrorCode
from tests.support.consumers import settled
from tests.support.migration_story import MEMBER_TRAINING
from tests.support.serve import served

TOPIC_PARTITIONS = 4


@pytest.fixture(scope="module")
def serve() -> Iterator[str]:
    with served(f"orders:{TOPIC_PARTITIONS}", group_settings=()) as bootstrap:
        yield bootstrap


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
    return settled(consumers, TOPIC_PARTITIONS, timeout_s, want)


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
        with pytest.raises(KafkaException) as refused_delete:  # ConsumerGroup.validateDeleteGroup
            admin.delete_consumer_groups([group])[group].result(timeout=30)
        assert refused_delete.value.args[0].code() == KafkaError.NON_EMPTY_GROUP

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
    admin = AdminClient({"bootstrap.servers": serve})
    admin.delete_consumer_groups([group])[group].result(timeout=30)  # Empty now: deleted
    assert group not in {g.group_id for g in admin.list_consumer_groups().result(timeout=30).valid}


def test_hostile_heartbeats_get_kafka_errors_and_serve_keeps_serving(serve: str) -> None:
    """Issue 13 bad input, through the server: each answer is Kafka's error code, and a normal
    member of another group still joins and gets the topic afterwards."""
    from replay.coordinator.consumer import HeartbeatRequest
    from replay.coordinator.consumer.wire import heartbeat_response_from_kio, heartbeat_to_kio
    from tests.test_consumer_group_differential import KafkaConnection

    def join(group: str, member: str, **fields: object) -> HeartbeatRequest:
        values: dict[str, object] = {
            "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ("orders",), "owned": {}
        } | fields  # fmt: skip
        return HeartbeatRequest(group, member, int(values.pop("member_epoch", 0)), **values)  # type: ignore[arg-type]

    hostile = f"hostile-{time.time_ns()}"
    cases = [
        (join(hostile, "m1", member_epoch=-7), ErrorCode.invalid_request),
        (join("", "m1"), ErrorCode.invalid_request),
        (join(hostile, "m1", owned={uuid.uuid4(): frozenset({1})}), ErrorCode.invalid_request),
        (join(hostile, "m1", server_assignor="cooperative-sticky"), ErrorCode.unsupported_assignor),
        (
            join(hostile, "m1", subscribed_topic_names=None, subscribed_topic_regex="("),
            ErrorCode.invalid_regular_expression,
        ),
        (join(hostile, "m1", subscribed_topic_names=tuple(f"nope-{i}" for i in range(5000))), ErrorCode.none),
        (join(hostile, "m2", instance_id="pod-x"), ErrorCode.none),
        (join(hostile, "m3", instance_id="pod-x"), ErrorCode.unreleased_instance_id),
        (join(hostile, "m2", member_epoch=99, instance_id="pod-x"), ErrorCode.fenced_member_epoch),
        (join(hostile, "m9", member_epoch=3), ErrorCode.unknown_member_id),
    ]
    connection = KafkaConnection(serve)
    try:
        for request, expected in cases:
            answer = heartbeat_response_from_kio(connection.call(heartbeat_to_kio(request)))
            assert answer.error_code == expected, (request, answer)
        calm = heartbeat_response_from_kio(
            connection.call(heartbeat_to_kio(join(f"calm-{time.time_ns()}", "c1")))
        )
        assert calm.error_code == 0 and calm.member_epoch == 2
        assert calm.assignment is not None and sorted(p for ps in calm.assignment.values() for p in ps) == [
            0,
            1,
            2,
            3,
        ]
    finally:
        connection.close()


class JavaMember:
    """tests/java/ConsumerProtocolMember.java (kafka-clients 4.3.1, group.protocol=consumer) as a
    subprocess; `held` follows its incremental onPartitionsAssigned/onPartitionsRevoked calls."""

    def __init__(self, classes: Path, bootstrap: str, group: str, name: str) -> None:
        self.process = start_jvm(
            java_client_command("ConsumerProtocolMember", classes, "4.3.1", bootstrap, group, "orders", name),
            train_args=MEMBER_TRAINING,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        self.held: set[int] = set()
        self.closed = threading.Event()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = json.loads(line)
            match event["event"]:
                case "assigned":
                    self.held |= set(event["partitions"])
                case "revoked":
                    self.held -= set(event["partitions"])
                case "closed":
                    self.closed.set()

    def stop(self) -> None:
        """Closing stdin makes it close the consumer (a leave heartbeat with epoch -1)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=60)
        finally:
            if self.process.poll() is None:
                self.process.kill()


@pytest.fixture(scope="module")
def java_member_classes() -> Path:
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK on PATH")
    source = Path(__file__).parent / "java" / "ConsumerProtocolMember.java"
    return compile_cached("ConsumerProtocolMember", source.read_text(encoding="utf-8"), "4.3.1")


@pytest.mark.integration
def test_java_4_3_consumer_protocol_members_on_serve(serve: str, java_member_classes: Path) -> None:
    classes = java_member_classes
    group = f"kip848-java-{time.time_ns()}"
    a = JavaMember(classes, serve, group, "java-a")
    b = JavaMember(classes, serve, group, "java-b")
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if (
                a.held
                and b.held
                and not (a.held & b.held)
                and a.held | b.held == set(range(TOPIC_PARTITIONS))
            ):
                break
            time.sleep(0.2)
        assert a.held and b.held and sorted(a.held | b.held) == list(range(TOPIC_PARTITIONS)), (
            a.held,
            b.held,
        )
        assert not a.held & b.held
        b.stop()
        assert b.closed.is_set()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and a.held != set(range(TOPIC_PARTITIONS)):
            time.sleep(0.2)
        assert a.held == set(range(TOPIC_PARTITIONS))
    finally:
        a.stop()
        b.stop()


def _first_error(consumer: Consumer, others: list[Consumer], timeout_s: float) -> KafkaError | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = consumer.poll(0.2)
        for other in others:
            other.poll(0)
        if message is not None and message.error() is not None:
            return message.error()
    return None


def _protocol_clash(bootstrap: str) -> tuple[int, int]:
    """(ConsumerGroupHeartbeat epoch 0 on a live classic group, classic JoinGroup on a live
    consumer group): the error codes the coordinator at `bootstrap` answers."""
    from replay.coordinator.consumer import HeartbeatRequest
    from replay.coordinator.consumer.wire import heartbeat_response_from_kio, heartbeat_to_kio
    from tests.test_consumer_group_differential import KafkaConnection

    suffix = time.time_ns()
    classic_group, consumer_group = f"clash-classic-{suffix}", f"clash-consumer-{suffix}"
    classic = _consumer(bootstrap, classic_group, "classic-member", protocol="classic")
    modern = _consumer(bootstrap, consumer_group, "consumer-member")
    try:
        _held([classic], 60)
        _held([modern], 60)
        connection = KafkaConnection(bootstrap)
        try:
            request = HeartbeatRequest(
                classic_group,
                "intruder",
                0,
                rebalance_timeout_ms=30_000,
                subscribed_topic_names=("orders",),
                owned={},
            )
            upgrade = heartbeat_response_from_kio(connection.call(heartbeat_to_kio(request))).error_code
        finally:
            connection.close()
        intruder = _consumer(bootstrap, consumer_group, "classic-intruder", protocol="classic")
        try:
            refused = _first_error(intruder, [classic, modern], 30)
        finally:
            with contextlib.suppress(KafkaException):
                intruder.close()
        assert refused is not None
        return upgrade, refused.code()
    finally:
        classic.close()
        modern.close()


@pytest.mark.integration
@pytest.mark.slow
def test_protocol_clashes_answer_as_kafka_4_3_with_migration_disabled(serve: str, broker_factory) -> None:
    """The reference with its default policy answers as Kafka 4.3.1 does with
    group.consumer.migration.policy=disabled: a consumer-protocol join on a live classic group gets
    GROUP_ID_NOT_FOUND (validateOnlineUpgrade), a classic join on a consumer group gets
    INCONSISTENT_GROUP_PROTOCOL (throwIfClassicMemberCannotJoinConsumerGroup)."""
    broker = broker_factory("4.3.1", extra_config={"group.consumer.migration.policy": "disabled"})
    existing = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=30).topics
    if "orders" not in existing:  # the topic name serve has
        create_topic(broker.bootstrap, "orders", TOPIC_PARTITIONS)
    kafka = _protocol_clash(broker.bootstrap)
    reference = _protocol_clash(serve)
    assert kafka == reference == (ErrorCode.group_id_not_found, ErrorCode.inconsistent_group_protocol)


def test_serve_follows_kafka_4_0_rules_when_asked() -> None:
    """`--consumer-group-behaviour 4.0`: a new group's first member gets epoch 1 (4.0.1's groups
    start at 0), where 4.3's rules give 2."""
    from replay.coordinator.consumer import HeartbeatRequest
    from replay.coordinator.consumer.wire import heartbeat_response_from_kio, heartbeat_to_kio
    from tests.test_consumer_group_differential import KafkaConnection

    process = subprocess.Popen(
        [sys.executable, "-m", "group_replay", "coordinator", "serve", "--port", "0", "--topics", "orders:2",
         "--consumer-group-behaviour", "4.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        port = json.loads(process.stdout.readline())["port"]
        connection = KafkaConnection(f"127.0.0.1:{port}")
        try:
            request = HeartbeatRequest(
                "g40", "m1", 0, rebalance_timeout_ms=30_000, subscribed_topic_names=("orders",), owned={}
            )
            answer = heartbeat_response_from_kio(connection.call(heartbeat_to_kio(request)))
        finally:
            connection.close()
        assert (answer.error_code, answer.member_epoch) == (ErrorCode.none, 1)
    finally:
        process.terminate()
        process.wait(timeout=10)
