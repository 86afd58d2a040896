"""The container provider for clusters: `group-replay broker start --brokers 3 --provider
container` runs three Apache Kafka containers (the locally built image, testcontainers on podman)
as one KRaft quorum, reached by real clients on 127.0.0.1's mapped ports; one node killed, the
others keep the data and elect new leaders; `stop` removes the containers."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.lines import KAFKA_39
from harness.maven import missing_tools
from tests.support.detached import stopped_even_if_killed

pytestmark = [
    pytest.mark.integration,
    pytest.mark.container,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(missing_tools() is not None, reason=f"cannot build the image: {missing_tools()}"),
]


def _cli(run_dir: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "group_replay", "broker", *args, "--state-dir", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def _existing(ids: list[str]) -> list[str]:
    """Those of `ids` the engine still has (running or exited)."""
    listed = subprocess.run(["podman", "ps", "-a", "-q", "--no-trunc"], capture_output=True, text=True)
    return [found for found in ids if found in listed.stdout.split()]


def _values(bootstrap: str, topic: str, wanted: int) -> set[bytes]:
    from confluent_kafka import Consumer

    settings = {"bootstrap.servers": bootstrap, "group.id": "ctr-cluster", "auto.offset.reset": "earliest"}
    consumer = Consumer(settings)
    consumer.subscribe([topic])
    values: set[bytes] = set()
    deadline = time.monotonic() + 120
    while len(values) < wanted and time.monotonic() < deadline:
        message = consumer.poll(1)
        if message is not None and message.error() is None:
            values.add(message.value())
    consumer.close()
    return values


def _produce(bootstrap: str, topic: str, prefix: str) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(30):
        producer.produce(topic, value=f"{prefix} {i}".encode(), partition=i % 3)
    assert producer.flush(60) == 0


def _leaders(bootstrap: str, topic: str) -> dict[int, int]:
    """Partition -> leader as one broker of `bootstrap` sees it (whichever librdkafka asks)."""
    from confluent_kafka.admin import AdminClient

    found = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=30)
    return {p.id: p.leader for p in found.topics[topic].partitions.values()}


# Kafka's raft logs each follower transition with the leader endpoints it will fetch from
# (QuorumState: "Completed transition to FollowerState(... leaderEndpoints=Endpoints(endpoints={
# ListenerName(CONTROLLER)=host/<unresolved>:port})").
_FOLLOWER_OF = re.compile(r"Completed transition to FollowerState\(.*?ListenerName\(CONTROLLER\)=([^/]+)/")
_QUORUM_EVENT = re.compile(r"Completed transition to \w+|Fencing broker|Becoming the active|Error connecting")


def _log(container: str) -> str:
    found = subprocess.run(["podman", "logs", container], capture_output=True, text=True)
    return found.stdout + found.stderr


def _address(container: str) -> str:
    inspected = subprocess.run(["podman", "inspect", "-f", "{{.NetworkSettings.IPAddress}}", container],
                               capture_output=True, text=True)  # fmt: skip
    return inspected.stdout.strip()


def _quorum_events(containers: list[str]) -> str:
    """The raft and fencing lines of each node's log: why leaders did not move, if they did not."""
    return "\n".join(
        f"node {index}: {line[:240]}"
        for index, container in enumerate(containers, 1)
        for line in [line for line in _log(container).splitlines() if _QUORUM_EVENT.search(line)][-12:]
    )


def test_a_container_cluster_from_the_command_line_survives_a_node_kill(tmp_path: Path) -> None:
    """As a user runs it, without DOCKER_HOST: the command starts its own podman service, which
    ends with the command while the containers keep running."""
    from confluent_kafka.admin import AdminClient

    from harness.admin import create_topic
    from harness.broker import pid_alive
    from harness.container.engine import EngineUnavailable, start_engine

    try:
        start_engine().stop()
    except EngineUnavailable as exc:
        pytest.skip(f"no container engine: {exc}")
    run_dir = tmp_path / "run"
    env = {key: value for key, value in os.environ.items() if key != "DOCKER_HOST"}
    with stopped_even_if_killed(run_dir):
        started = _cli(run_dir, "start", "--brokers", "3", "--provider", "container", "--version", KAFKA_39,
                       "--progress", "off", env=env)  # fmt: skip
        assert started.returncode == 0, started.stderr
        bootstrap = started.stdout.strip().splitlines()[-1]
        [state] = json.loads(_cli(run_dir, "status", "--format", "json", env=env).stdout)
        containers = state["containers"]
        assert len(containers) == 3 and _existing(containers) == containers
        metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=60)
        assert sorted(metadata.brokers) == [1, 2, 3]
        assert {f"{b.host}:{b.port}" for b in metadata.brokers.values()} == set(bootstrap.split(","))
        create_topic(bootstrap, "replicated", 3, replication=3)
        _produce(bootstrap, "replicated", "before")
        # Followers fetch from the endpoints the quorum leader advertises, which must be the
        # address the voters list names (not the container id as hostname, which no other
        # container resolves: a follower that lost its connection could not open another).
        fetched_from = {host for c in containers for host in _FOLLOWER_OF.findall(_log(c))}
        assert fetched_from and fetched_from <= {_address(c) for c in containers}, fetched_from

        killed = _cli(run_dir, "stop", "--node", "1", env=env)
        assert killed.returncode == 0 and "killed node 1" in killed.stdout, killed.stderr
        assert not pid_alive(state["nodes"][0]["pid"])
        survivors = ",".join(bootstrap.split(",")[1:])
        # The killed node's partitions get new leaders once the controller fences it
        # (broker.session.timeout.ms) and commits the change. Each broker applies the metadata log
        # on its own (the controller's node first, the follower once it has fetched the record),
        # so two answers in a row may come from a survivor that has and one that has not yet: the
        # assertion is on the answer that ended the wait, not on a new one (which failed CI, as
        # could an answer without the partitions, which `set() <= {2, 3}` took for done).
        deadline = time.monotonic() + 120
        seen = _leaders(survivors, "replicated")
        while not (len(seen) == 3 and set(seen.values()) <= {2, 3}) and time.monotonic() < deadline:
            time.sleep(1)
            seen = _leaders(survivors, "replicated")
        assert len(seen) == 3 and set(seen.values()) <= {2, 3}, f"{seen}\n{_quorum_events(containers[1:])}"
        _produce(survivors, "replicated", "after")
        assert len(_values(survivors, "replicated", 60)) == 60  # nothing written before the kill lost

        stopped = _cli(run_dir, "stop", env=env)
        assert stopped.returncode == 0 and "cluster of 3 nodes" in stopped.stdout, stopped.stderr
    assert _existing(containers) == []
    assert not any(pid_alive(node["pid"]) for node in state["nodes"])
