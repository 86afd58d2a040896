"""Real clients of every kind join static through the recording proxy in front of a real broker.

The capture must show each client's JoinGroup version and its group.instance.id: librdkafka and
aiokafka send JoinGroup v5, kafka-python 3.x v7, Java kafka-clients 3.9 v9 (design section 6).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo.clients import ClientKind, ConsumerSpec, start_consumer
from harness.admin import create_topic
from harness.lines import KAFKA_39
from proxy.capture.reader import exchanges, read_capture
from proxy.wire import ApiKey
from tests.support.consumers import static_member_of
from tests.support.proxy import ProxyProcess
from tests.test_capture_tshark import TSHARK, tshark_fields

EXPECTED_JOIN_VERSION = {
    ClientKind.CONFLUENT: 5,
    ClientKind.AIOKAFKA: 5,
    ClientKind.KAFKA_PYTHON: 7,
    ClientKind.JAVA: 9,
}


@pytest.fixture(scope="module")
def recorded(broker_factory, tmp_path_factory) -> Iterator[tuple[Path, dict[ClientKind, ConsumerSpec]]]:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    path = tmp_path_factory.mktemp("proxy") / "clients.pcapng"
    proxy = ProxyProcess("--upstream", broker.bootstrap, "--record", str(path))
    specs: dict[ClientKind, ConsumerSpec] = {}
    consumers = []
    try:
        for kind in EXPECTED_JOIN_VERSION:
            topic = f"px-{kind.value}-{os.getpid()}"
            create_topic(broker.bootstrap, topic, 2)
            spec = static_member_of(kind, proxy.bootstrap, topic, kind.value)
            specs[kind] = spec
            consumers.append(start_consumer(spec))
        for consumer in consumers:
            assigned = consumer.wait_for(lambda e: e.event == "assigned" and bool(e.partitions), 120_000)
            assert len(assigned.partitions) == 2, consumer.describe()
    finally:
        for consumer in consumers:
            consumer.stop()
        log = proxy.stop().stderr
    assert "Traceback" not in log, log
    # Clients reached the coordinator through the per-broker listener the metadata named.
    assert "is reachable through 127.0.0.1:" in log, log
    yield path, specs


@pytest.mark.integration
@pytest.mark.timeout(400)
def test_each_client_kind_joins_through_the_proxy(recorded) -> None:
    path, specs = recorded
    capture = read_capture(path)
    assert capture.damage is None
    joins = {}
    for exchange in exchanges(capture):
        if exchange.request.api_key == ApiKey.JOIN_GROUP and exchange.response is not None:
            request, response = exchange.decode()
            joins.setdefault(exchange.request.client_id, []).append(
                (exchange.request.api_version, request, response)
            )
    for kind, spec in specs.items():
        assert spec.client_id in joins, f"no JoinGroup from {kind.value}: {sorted(joins)}"
        versions = {version for version, _, _ in joins[spec.client_id]}
        assert versions == {EXPECTED_JOIN_VERSION[kind]}, (kind, versions)
        assert {request.group_instance_id for _, request, _ in joins[spec.client_id]} == {
            spec.group_instance_id
        }
        assert any(int(response.error_code) == 0 for _, _, response in joins[spec.client_id])
    assert len(capture.connections) >= 2 * len(specs)  # bootstrap + broker connection per client


@pytest.mark.integration
@pytest.mark.skipif(TSHARK is None, reason="tshark is not installed")
def test_tshark_reads_the_real_capture(recorded) -> None:
    path, _ = recorded
    versions = {
        row[0]
        for row in tshark_fields(
            path,
            "kafka.api_key == 11",
            "kafka.api_version",
        )
    }
    assert {"5", "7", "9"} <= versions
