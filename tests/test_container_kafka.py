"""The container provider: a locally built Apache Kafka image run by testcontainers."""

from __future__ import annotations

import resource

import pytest

from demo.clients import ClientKind, ConsumerSpec, start_consumer
from harness.container.engine import containers_conf_text, ping
from harness.lines import KAFKA_39


def test_containers_conf_uses_the_hard_nofile_limit_and_runc() -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    text = containers_conf_text()
    if hard != resource.RLIM_INFINITY:
        assert f'"nofile={hard}:{hard}"' in text
    assert 'runtime = "runc"' in text


def test_ping_reports_why_an_engine_is_unreachable(tmp_path) -> None:
    error = ping(f"unix://{tmp_path}/absent.sock", timeout_ms=200)
    assert error is not None and "FileNotFoundError" in error
    assert ping("tcp://127.0.0.1:1") is not None


@pytest.mark.integration
@pytest.mark.container
@pytest.mark.timeout(600)
def test_java_static_member_joins_through_the_mapped_port(kafka_container, make_topic) -> None:
    """A subprocess client (not in the test's process) reaches the container's advertised address."""
    assert kafka_container.kafka_version == KAFKA_39
    topic = make_topic(kafka_container.bootstrap, partitions=2, prefix="ctr")
    spec = ConsumerSpec(
        ClientKind.JAVA, kafka_container.bootstrap, f"g-{topic}", (topic,), group_instance_id="ctr-java"
    )
    with start_consumer(spec) as consumer:
        assigned = consumer.wait_for(lambda e: e.event == "assigned" and bool(e.partitions), 90_000)
    assert assigned.partitions == (f"{topic}-0", f"{topic}-1")
    assert assigned.member_id and assigned.member_id.startswith("ctr-java")
