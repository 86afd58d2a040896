"""ZooKeeper-era brokers (2.4 - 3.2): ZooKeeper + broker from one Maven classpath, on Java 17."""

from __future__ import annotations

import pytest

from demo.clients import ClientKind, ConsumerSpec, start_consumer
from harness.broker import BrokerSpec, pid_alive, start_broker
from harness.lines import Mode, line_for
from harness.maven import missing_tools
from harness.probe import api_versions, split_bootstrap

pytestmark = [
    pytest.mark.integration,
    pytest.mark.timeout(300),
    pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}"),
]


def test_zookeeper_lines_have_only_the_classic_coordinator() -> None:
    assert line_for("2.8.2").mode is Mode.ZOOKEEPER
    with pytest.raises(ValueError, match="only the classic"):
        line_for("2.8.2").coordinator_key(True)


@pytest.mark.parametrize(("kafka_version", "join_group_max"), [("2.4.1", 6), ("2.8.2", 7)])
def test_zookeeper_broker_serves_a_static_member(
    broker_factory, make_topic, kafka_version, join_group_max
) -> None:
    """JoinGroup v6 (2.4) / v7 (2.5-3.1) brokers: a Java 2.4.1 static member joins and gets partitions."""
    broker = broker_factory(kafka_version)
    assert broker.new_coordinator is False
    assert api_versions(*split_bootstrap(broker.bootstrap))[11].max_version == join_group_max
    topic = make_topic(broker.bootstrap, partitions=2, prefix=f"zk{kafka_version}")
    spec = ConsumerSpec(
        ClientKind.JAVA,
        broker.bootstrap,
        f"g-{topic}",
        (topic,),
        group_instance_id="zk-java",
        java_client_version="2.4.1",
    )
    with start_consumer(spec) as consumer:
        assigned = consumer.wait_for(lambda e: e.event == "assigned" and bool(e.partitions), 90_000)
    assert assigned.partitions == (f"{topic}-0", f"{topic}-1")


def test_stop_ends_zookeeper_too() -> None:
    broker = start_broker(BrokerSpec("2.8.2"))
    assert broker.zookeeper is not None
    zookeeper_pid = broker.zookeeper.pid
    assert pid_alive(zookeeper_pid)
    broker.stop()
    assert not pid_alive(broker.pid)
    assert not pid_alive(zookeeper_pid)
    assert not broker.plan.work_dir.exists()
