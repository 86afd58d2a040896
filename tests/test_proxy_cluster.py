"""The proxy in front of a 3-node KRaft cluster: every broker reachable through it, and a group
that follows its coordinator when the coordinator's broker is killed (issue 12).

Two real consumers (confluent-kafka, through `demo.clients`) consume through the recording
proxy; the test kills the node that coordinates their group (SIGKILL, no controlled shutdown),
produces more through the proxy, and waits for the consumers to receive it. The capture must show
FindCoordinator answering first the killed node, then another one, with group requests going to
the new coordinator afterwards.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from demo.clients import ClientError, ClientKind, ConsumerSpec, start_consumer
from proxy.capture.reader import exchanges, read_capture
from proxy.capture.writer import CaptureWriter
from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
from proxy.wire import ApiKey, CodecError

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Create the topic on the cluster. Right after a node restart (the previous test's kill),
    librdkafka can drop a broker handle that metadata briefly left out while the request was in
    flight (_DESTROY_BROKER) or answer a retriable error: try again then (an already created
    topic counts as done)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    new = NewTopic(topic, num_partitions=partitions, replication_factor=3)
    for attempt in range(3):
        try:
            admin.create_topics([new])[topic].result(60)
            return
        except KafkaException as exc:
            error = exc.args[0]
            if attempt and error.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                return
            if attempt == 2 or not (error.retriable() or error.code() == KafkaError._DESTROY_BROKER):
                raise
        time.sleep(2)


def _coordinator(bootstrap: str, group: str) -> int:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    description = admin.describe_consumer_groups([group], request_timeout=30)[group].result(60)
    return int(description.coordinator.id)


def _produce(producer: Any, topic: str, count: int) -> None:
    """Produce `count` records and wait until every one is delivered (a record that timed out
    leaves the queue too, so an empty queue alone proves nothing: its delivery report says)."""
    failed: list[str] = []

    def delivered(error: Any, _message: Any) -> None:
        if error is not None:
            failed.append(str(error))

    for i in range(count):
        producer.produce(topic, value=b"v" * 100, key=str(i).encode(), on_delivery=delivered)
    assert producer.flush(150) == 0
    assert not failed, f"{len(failed)} of {count} records not delivered: {failed[:3]}"


def _found_coordinators(path: Path, group: str) -> list[int]:
    """Node ids FindCoordinator named for `group`, in order, as the broker answered (upstream leg)."""
    found: list[int] = []
    for exchange in exchanges(read_capture(path), "upstream"):
        if exchange.request.api_key != ApiKey.FIND_COORDINATOR or exchange.response is None:
            continue
        try:
            request, response = exchange.decode()
        except CodecError:
            continue
        if hasattr(response, "coordinators"):  # v4+: batched
            found += [
                int(c.node_id) for c in response.coordinators if c.key == group and int(c.error_code) == 0
            ]
        elif request.key == group and int(response.error_code) == 0:
            found.append(int(response.node_id))
    return found


def test_group_follows_its_coordinator_when_its_broker_is_killed(kafka_cluster, tmp_path: Path) -> None:
    from confluent_kafka import Producer

    cluster = kafka_cluster
    topic, group = f"failover-{os.getpid()}", f"failover-{os.getpid()}"
    _create_topic(cluster.bootstrap, topic, 3)
    upstream = cluster.node(1).bootstrap
    path = tmp_path / "cluster.pcapng"
    proxy = BackgroundProxy(
        ProxyConfig(upstream=parse_hostport(upstream)), CaptureWriter(path, upstream=upstream)
    )
    killed: int | None = None
    try:
        specs = [
            ConsumerSpec(ClientKind.CONFLUENT, proxy.bootstrap, group, (topic,), client_id=f"fo-{n}")
            for n in range(2)
        ]
        with start_consumer(specs[0]) as first, start_consumer(specs[1]) as second:
            for consumer in (first, second):
                consumer.wait_assigned(timeout_ms=120_000)
            # One producer for before and after the kill, as a running application has: it knows
            # every node's proxy listener from its metadata. A new one bootstrapping through the
            # proxy after the kill reaches only `upstream`, node 1: when node 1 was the coordinator
            # it never got metadata, its records expired after message.timeout.ms (120 s of the
            # test) and the consumers' "records" came from re-reading uncommitted ones.
            producer = Producer(
                {"bootstrap.servers": proxy.bootstrap, "linger.ms": 5, "message.timeout.ms": 120_000}
            )
            _produce(producer, topic, 30)
            for consumer in (first, second):
                consumer.wait_for(lambda e: e.event == "records", timeout_ms=120_000)
            killed = _coordinator(cluster.bootstrap, group)
            marks = [len(first.snapshot()), len(second.snapshot())]
            cluster.kill(killed)
            # More data through the proxy: partitions the killed node led move to other leaders.
            _produce(producer, topic, 60)
            received = 0
            for consumer, mark in ((first, marks[0]), (second, marks[1])):
                try:
                    consumer.wait_for(lambda e: e.event == "records", timeout_ms=150_000, after=mark)
                    received += 1
                except ClientError:  # one member may own no partition after a rebalance
                    continue
            assert received >= 1, first.describe() + "\n" + second.describe()
            now = _coordinator(cluster.bootstrap, group)
            assert now != killed
            assert first.process.poll() is None and second.process.poll() is None
    finally:
        proxy.stop()
        if killed is not None:
            cluster.restart(killed)  # the session's cluster is whole again for later tests
    found = _found_coordinators(path, group)
    assert killed in found, found
    after = found[found.index(killed) :]
    assert any(node != killed for node in after), f"FindCoordinator never moved: {found}"
    # The clients stayed on the proxy: every connection's client leg is the proxy's, and the
    # proxy opened connections to more than the bootstrap broker.
    upstreams = {c.upstream for c in read_capture(path).connections.values()}
    assert len(upstreams) >= 2 and all(parse_hostport(u)[0] == "127.0.0.1" for u in upstreams if u)


def test_a_sasl_ssl_cluster_through_the_proxy(kafka_cluster, _secure_setup, tmp_path: Path) -> None:
    """The issue's production setup: three brokers with SASL_SSL listeners, the proxy with TLS on
    both legs in front of one of them, a group of real clients logging in with SCRAM-SHA-512 and
    moving data; every broker is reached through the proxy and the capture holds no secret."""
    from tests.conftest import SASL_USERS
    from tests.test_proxy_record_scope import MESSAGES, produce_and_consume
    from tests.test_proxy_sasl import _proxy, _secrets_absent

    ca = _secure_setup.ca
    proxy_cert = ca.issue("proxy-cluster", tmp_path)
    topic = f"cluster-sasl-{os.getpid()}"
    _create_topic(kafka_cluster.bootstrap, topic, 3)
    path = tmp_path / "cluster-sasl.pcapng"
    proxy = _proxy(
        kafka_cluster.node(1).listener_bootstrap("SASL_SSL"), path,
        "--client-tls-cert", str(proxy_cert.cert), "--client-tls-key", str(proxy_cert.key),
        "--upstream-tls-ca", str(ca.cert),
    )  # fmt: skip
    user, password = SASL_USERS[1]
    settings = {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": str(ca.cert),
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
    }
    try:
        seen = produce_and_consume(proxy.bootstrap, topic, f"cluster-sasl-{os.getpid()}", settings)
    finally:
        output = proxy.stop().printed
    assert seen == MESSAGES
    capture = read_capture(path)
    assert capture.damage is None
    upstream_ports = {parse_hostport(c.upstream)[1] for c in capture.connections.values() if c.upstream}
    node_ports = {parse_hostport(b.listener_bootstrap("SASL_SSL"))[1] for b in kafka_cluster.nodes}
    assert upstream_ports <= node_ports and len(upstream_ports) >= 2, (upstream_ports, node_ports)
    _secrets_absent(path, output)
