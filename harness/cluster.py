"""Several KRaft nodes on 127.0.0.1 as one Kafka cluster, and their state for detached runs.

Each node is a `harness.broker.Broker` started from a `harness.launch` plan; this module adds
the shared controller quorum and cluster id, the replicated internal topics, node restarts and
the cluster's state file (`group-replay broker start --brokers N`).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import time
from abc import abstractmethod
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from harness import paths
from harness.broker import (
    DEFAULT_READY_TIMEOUT_MS,
    DEFAULT_STOP_TIMEOUT_MS,
    PORT_ATTEMPTS,
    Broker,
    BrokerState,
    pid_alive,
    port_clash,
    read_states,
    run_format,
    spawn,
    track,
    wait_ready,
)
from harness.launch import BrokerError, BrokerSpec, LaunchPlan, cluster_id, plan_broker
from harness.lines import Mode
from harness.maven import ProgressCallback
from harness.owned import StopsOnExit

# A 3-node cluster that keeps its groups when one node stops: the offsets topic (whose partition
# leader is the group coordinator) is replicated to every node, one in-sync replica suffices.
CLUSTER_SETTINGS: dict[str, str] = {
    "offsets.topic.replication.factor": "3",
    "transaction.state.log.replication.factor": "3",
    "default.replication.factor": "3",
    "min.insync.replicas": "1",
    "offsets.topic.num.partitions": "1",
    "unclean.leader.election.enable": "true",
}


class _Node(Protocol):
    @property
    def bootstrap(self) -> str: ...

    @property
    def kafka_version(self) -> str: ...


_N = TypeVar("_N", bound=_Node)


class NodeCluster(StopsOnExit, Generic[_N]):
    """Nodes with ids 1..N, `nodes[id - 1]`, all of one Kafka version: the process cluster's
    brokers (`Cluster`) or the container cluster's containers (`ContainerCluster`)."""

    nodes: list[_N]

    @abstractmethod
    def is_up(self, node: _N) -> bool: ...

    def node(self, node_id: int) -> _N:
        return self.nodes[node_id - 1]

    @property
    def bootstrap(self) -> str:
        """Every running node's PLAINTEXT address, comma-separated (a client's bootstrap list)."""
        return ",".join(node.bootstrap for node in self.nodes if self.is_up(node))

    @property
    def kafka_version(self) -> str:
        return self.nodes[0].kafka_version


# mypy checks a type argument against a protocol bound without applying descriptors, so it
# does not see Broker's PartView attributes (bootstrap, kafka_version) as the str they read.
@dataclass(eq=False)
class Cluster(NodeCluster[Broker]):  # type: ignore[type-var]
    """Running KRaft nodes (broker+controller each, node ids 1..N, one controller quorum)."""

    nodes: list[Broker]

    def is_up(self, node: Broker) -> bool:
        return node.is_running()

    def listener_bootstrap(self, name: str) -> str:
        """Every running node's `name` listener (SSL, SASL_SSL, ...), comma-separated."""
        return ",".join(b.listener_bootstrap(name) for b in self.nodes if b.is_running())

    def node_for_port(self, port: int) -> Broker:
        for broker in self.nodes:
            if broker.plan.port == port:
                return broker
        raise KeyError(f"no node listens on port {port}")

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: no controlled shutdown); its data stays for `restart`."""
        process = self.node(node_id).process
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()

    def restart(self, node_id: int, ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS) -> Broker:
        """Start a stopped or killed node again on its ports and data; returns once it answers."""
        broker = self.node(node_id)
        broker.start_again(ready_timeout_ms)
        return broker

    def stop(self) -> None:
        """SIGTERM every node at once, then wait for each (as `stop_detached_cluster`): one at a
        time, the last node's controlled shutdown waited for a controller quorum that had already
        gone, until the stop timeout's SIGKILL (20 s)."""
        for broker in self.nodes:
            if broker.is_running():
                with contextlib.suppress(ProcessLookupError):
                    broker.process.send_signal(signal.SIGTERM)
        for broker in self.nodes:
            broker.stop()


def start_cluster(
    spec: BrokerSpec,
    size: int = 3,
    *,
    ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS,
    progress: ProgressCallback | None = None,
    detach: bool = False,
    work_root: Path | None = None,
) -> Cluster:
    """Start `size` KRaft nodes that form one cluster; returns when every node answers ApiVersions.

    `detach=True` leaves the nodes running after this interpreter exits (`group-replay broker start
    --brokers N`); `work_root` puts node i's config, data and log in `work_root/node-i` (default: a
    fresh temp dir per node).

    Each node is broker and controller (`process.roles=broker,controller`), all are voters of one
    quorum (`controller.quorum.voters`), formatted with one cluster id. Replication settings are
    `CLUSTER_SETTINGS` (for size >= 3), so a group survives one node stopping: its coordinator
    moves to the new leader of the offsets topic's partition.
    """
    if size < 1:
        raise ValueError("a cluster has at least one node")
    node_spec = replace(spec, extra_config={**(CLUSTER_SETTINGS if size >= 3 else {}), **spec.extra_config})
    for attempt in range(PORT_ATTEMPTS):
        plans = _node_plans(node_spec, size, progress, work_root)
        cluster = _start_nodes(plans, detach, ready_timeout_ms, retry_on_clash=attempt < PORT_ATTEMPTS - 1)
        if cluster is not None:
            return cluster
    raise AssertionError("unreachable")


def _start_nodes(
    plans: list[LaunchPlan], detach: bool, ready_timeout_ms: int, *, retry_on_clash: bool
) -> Cluster | None:
    """Format, spawn and wait for every node; None when a node could not bind a planned port
    (another process took it between the probe and the bind, as start_broker retries for one
    broker) and `retry_on_clash`: everything started is stopped and removed, plan again."""
    brokers: list[Broker] = []
    try:
        for plan in plans:
            plan.write_files()
            run_format(plan)
        for plan in plans:
            process = spawn(plan, detach)
            broker = Broker(plan=plan, process=process, owns_work_dir=not detach)
            if not detach:
                track(broker)
            brokers.append(broker)
        for broker in brokers:
            wait_ready(broker.plan, broker.process, ready_timeout_ms)
    except BaseException as error:
        clash = isinstance(error, BrokerError) and any(port_clash(plan) for plan in plans)
        for broker in brokers:
            broker.stop()
        for plan in plans:
            shutil.rmtree(plan.work_dir, ignore_errors=True)
        if clash and retry_on_clash:
            return None
        raise
    return Cluster(brokers)


def _node_plans(
    spec: BrokerSpec, size: int, progress: ProgressCallback | None, work_root: Path | None
) -> list[LaunchPlan]:
    """Each node's plan: fresh ports, one cluster id, every node a voter of one quorum."""
    plans = [
        plan_broker(
            spec,
            progress=progress,
            work_dir=None if work_root is None else work_root / f"node-{index + 1}",
        )
        for index in range(size)
    ]
    if plans[0].line.mode is not Mode.KRAFT:
        raise BrokerError(f"clusters are set up for KRaft lines (3.3+) only, not Kafka {spec.kafka_version}")
    voters = ",".join(f"{index + 1}@127.0.0.1:{plan.controller_port}" for index, plan in enumerate(plans))
    shared_id = cluster_id()
    return [
        replace(
            plan,
            cluster_id=shared_id,
            properties={**plan.properties, "node.id": str(index + 1), "controller.quorum.voters": voters},
        )
        for index, plan in enumerate(plans)
    ]


@dataclass(frozen=True)
class ClusterState:
    """A detached cluster (`group-replay broker start --brokers N`): its nodes and how to reach it.

    `id` is node 1's pid; `bootstrap` is the client listener of every node (`security` names its
    protocol); `directory` holds the nodes' work dirs, the certificates and `client_config`
    (Java client properties) / `librdkafka_config` (librdkafka properties) for that listener."""

    kafka_version: str
    id: int
    bootstrap: str
    security: str
    plaintext_bootstrap: str
    directory: str
    client_config: str
    librdkafka_config: str
    started_at_ms: int
    nodes: tuple[BrokerState, ...]
    containers: tuple[str, ...] = ()  # the container provider's nodes (removed by `stop`)

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data: dict[str, Any] = json.loads(text)
        nodes = tuple(BrokerState(**node) for node in data.pop("nodes"))
        containers = tuple(data.pop("containers", ()))
        return cls(**data, nodes=nodes, containers=containers)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


def cluster_state_path(kafka_version: str) -> Path:
    return paths.run_dir() / f"cluster-{kafka_version}.json"


def cluster_directory(kafka_version: str) -> Path:
    """Where a detached cluster of this version keeps its nodes, certificates and client configs."""
    return paths.run_dir() / f"cluster-{kafka_version}"


def write_cluster_state(state: ClusterState) -> Path:
    return paths.write_atomically(cluster_state_path(state.kafka_version), state.to_json())


def find_running_clusters(kafka_version: str | None = None) -> list[ClusterState]:
    """Clusters started detached whose nodes are (some of them) still alive."""
    states = read_states("cluster-*.json", ClusterState.from_json, kafka_version)
    return [state for state in states if any(pid_alive(node.pid) for node in state.nodes)]


def stop_detached_cluster(state: ClusterState, timeout_ms: int = DEFAULT_STOP_TIMEOUT_MS) -> bool:
    """SIGTERM every node at once (no node waits for a quorum that is going away), SIGKILL what is
    left after `timeout_ms`; removes the state file and the cluster's directory."""
    alive = [node.pid for node in state.nodes if pid_alive(node.pid)]
    for pid in alive:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_ms / 1000
    while any(pid_alive(pid) for pid in alive) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if state.containers:
        from harness.container.cluster import remove_containers

        remove_containers(state.containers)
    cluster_state_path(state.kafka_version).unlink(missing_ok=True)
    shutil.rmtree(state.directory, ignore_errors=True)
    return bool(alive)
