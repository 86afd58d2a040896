"""The consumer group protocol (KIP-848) on the wire: ConsumerGroupHeartbeat (68) and
ConsumerGroupDescribe (69) decoded by proxy.wire, recorded by the proxy, told apart from the
classic protocol by `capture show`.

The live test records real confluent-kafka consumers (`group.protocol=consumer`) through the
recording proxy in front of a real Kafka 4.3.1 broker.
"""

from __future__ import annotations

import datetime
import io
import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.consumer_group_heartbeat.v1 import request as heartbeat_request
from kio.schema.consumer_group_heartbeat.v1 import response as heartbeat_response
from kio.static.primitive import i32, i32Timedelta
from rich.console import Console

from harness.broker import Broker
from harness.lines import KAFKA_4X
from proxy.capture.cli import main as capture_main
from proxy.capture.cli import rpc_rows, show
from proxy.capture.reader import exchanges, read_capture
from proxy.wire import (
    GROUP_API_KEYS,
    ApiKey,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    group_protocol,
    request_fields,
    response_fields,
)
from proxy.wire.errors import ErrorCode
from tests.support.consumers import settled
from tests.support.proxy import ProxyProcess

TOPIC_ID = uuid.UUID(int=0xABC)


def _heartbeat(member_epoch: int) -> heartbeat_request.ConsumerGroupHeartbeatRequest:
    return heartbeat_request.ConsumerGroupHeartbeatRequest(
        group_id="g",
        member_id="m-1",
        member_epoch=i32(member_epoch),
        instance_id="pod-0",
        rack_id=None,
        rebalance_timeout=i32Timedelta.parse(datetime.timedelta(milliseconds=300_000)),
        subscribed_topic_names=("orders",),
        subscribed_topic_regex=None,
        server_assignor="range",
        topic_partitions=(heartbeat_request.TopicPartitions(topic_id=TOPIC_ID, partitions=(i32(0), i32(2))),),
    )


def test_consumer_group_apis_are_group_apis_of_the_consumer_protocol() -> None:
    assert {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE} <= GROUP_API_KEYS
    assert group_protocol(ApiKey.CONSUMER_GROUP_HEARTBEAT) == "consumer"
    assert group_protocol(ApiKey.JOIN_GROUP) == "classic"
    assert group_protocol(ApiKey.OFFSET_COMMIT) is None  # both protocols commit offsets


def test_heartbeat_fields_through_the_codec() -> None:
    wire = encode_request(_heartbeat(3), correlation_id=5, client_id="c")
    header, request = decode_request(wire[4:])
    fields = request_fields(header.api_key, request)
    assert (fields.group_id, fields.member_id, fields.group_instance_id) == ("g", "m-1", "pod-0")
    assert (fields.member_epoch, fields.generation_id, fields.protocol) == (3, None, "consumer")
    assert fields.protocol_name == "range" and fields.assignment == ((str(TOPIC_ID), (0, 2)),)

    answer = heartbeat_response.ConsumerGroupHeartbeatResponse(
        throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
        error_code=ErrorCode.fenced_member_epoch,
        error_message="fenced",
        member_id="m-1",
        member_epoch=i32(4),
        heartbeat_interval=i32Timedelta.parse(datetime.timedelta(milliseconds=5000)),
        assignment=heartbeat_response.Assignment(
            topic_partitions=(heartbeat_response.TopicPartitions(topic_id=TOPIC_ID, partitions=(i32(1),)),)
        ),
    )
    _, decoded = decode_response(encode_response(answer, 5)[4:], ApiKey.CONSUMER_GROUP_HEARTBEAT, 1)
    got = response_fields(ApiKey.CONSUMER_GROUP_HEARTBEAT, decoded)
    assert (got.error_code, got.member_epoch, got.assignment) == (
        ErrorCode.fenced_member_epoch,
        4,
        ((str(TOPIC_ID), (1,)),),
    )


def test_describe_names_its_group() -> None:
    wire = encode_request(
        ConsumerGroupDescribeRequest(group_ids=("a", "b"), include_authorized_operations=False), 1, None
    )
    header, request = decode_request(wire[4:])
    assert request_fields(header.api_key, request).group_id == "a"


@pytest.mark.integration
def test_real_consumer_protocol_clients_recorded_through_the_proxy(
    broker_factory, make_topic, tmp_path: Path, capsys
) -> None:
    broker: Broker = broker_factory(KAFKA_4X)
    topic = make_topic(broker.bootstrap, partitions=4, prefix="kip848")
    record = tmp_path / "consumer.pcapng"
    proxy = ProxyProcess("--upstream", broker.bootstrap, "--record", str(record))
    group = f"g-{topic}"
    consumers = []
    try:
        for number in range(2):
            consumer = Consumer(
                {
                    "bootstrap.servers": proxy.bootstrap,
                    "group.id": group,
                    "group.protocol": "consumer",
                    "client.id": f"kip848-{number}",
                }
            )
            consumer.subscribe([topic])
            consumers.append(consumer)
        held = settled(consumers, 4)
    finally:
        for consumer in consumers:
            consumer.close()
        err = proxy.stop().stderr
    assert "Traceback" not in err, err

    capture = read_capture(str(record))
    # rpc_rows without group_only has one row per exchange, in exchanges' order: each row's answer
    # time (the proxy's clock when the answer came from the broker, before the client saw it).
    paired = [
        (row, exchange.response.ts_ns if exchange.response is not None else None)
        for row, exchange in zip(rpc_rows(capture), exchanges(capture), strict=True)
        if row["api_key"] == ApiKey.CONSUMER_GROUP_HEARTBEAT and row["group_id"] == group
    ]
    beats = [row for row, _ in paired]
    assert beats and all(r["protocol"] == "consumer" and "decode_error" not in r for r in beats)
    members = {r["member_id"] for r in beats}
    assert len(members) == 2  # librdkafka names its member itself (KIP-848: client-generated ids)
    joins = [
        r for r in beats if r["answered"] and r["error_code"] == 0 and r["member_epoch"] and r["assignment"]
    ]
    assert joins, "no heartbeat answer carried an assignment"
    # Closing consumers leave with member epoch -1 (ConsumerGroupHeartbeatRequest.json).
    leaves = [r for r in beats if r["member_epoch"] == -1]
    assert len({r["member_id"] for r in leaves}) == 2
    first_leave_ns = min(r["ts_ns"] for r in leaves)
    # What the broker gave each member while both were in the group, by the last assignment answered
    # before the first member left: together the whole topic, once, as the consumers held it. Every
    # answer that shaped `held` came through the proxy before the test closed a consumer. A later
    # answer may already give the remaining member the leaver's partitions: its next heartbeat (the
    # periodic one, or the one acknowledging its last assignment) can reach the broker after the
    # first leave, and did (docs/ci.md), and the broker answers it with the new assignment
    # (GroupMetadataManager.consumerGroupHeartbeat: "the member's assignment has been updated").
    last: dict[str, list[str]] = {}
    for row, answered_ns in paired:
        before_leave = answered_ns is not None and answered_ns < first_leave_ns
        given = row["error_code"] == 0 and row["assignment"] is not None and row["member_epoch"] > 0
        if before_leave and given:
            last[row["member_id"]] = sorted(row["assignment"])
    # topic ids resolved to the topic's name through the Metadata answers the capture holds
    assert sorted(last.values()) == sorted([f"{topic}-{p}" for p in h] for h in held)

    console = Console(width=400, record=True, file=io.StringIO())
    assert show(str(record), console=console) == 0
    table = console.export_text()
    assert "ConsumerGroupHeartbeat" in table and "epoch" in table
    assert capture_main(["show", str(record), "--format", "jsonl"]) == 0
    exported = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {r["protocol"] for r in exported if r["group_id"] == group} >= {"consumer"}
