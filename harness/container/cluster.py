"""A KRaft cluster of N Apache Kafka containers (the container provider of `start --brokers N`).

Each node runs in its own container from the locally built image (harness.container.image) and
is broker and controller, as in the process provider's `harness.cluster.start_cluster`, with the
same replication settings (`CLUSTER_SETTINGS`: a group survives one node stopping). The nodes
reach each other on the engine's bridge network by container address: the controller quorum
(`controller.quorum.voters` = id@address:9093) and an INTERNAL listener for replication (:9094);
clients reach every node on its PLAINTEXT listener's mapped port on 127.0.0.1, which is what each
node advertises. The containers start first and wait for their start script (the harness's
image does), so every address is known before any node's configuration is written.

The CONTROLLER listener binds the container's own address, the one the voters list names. A
controller advertises its CONTROLLER listener as `listeners` gives it when `advertised.listeners`
does not name it (3.9's KafkaConfig.effectiveAdvertisedControllerListeners), a wildcard host
becoming the local hostname (ListenerInfo.withWildcardHostnamesResolved): the container id, which
no other container resolves. The quorum leader sends those endpoints to its followers
(BeginQuorumEpoch, Vote and Fetch responses) and a follower fetches from them
(KafkaRaftClient.maybeSendFetchOrFetchSnapshot -> FollowerState.leaderNode; KAFKA-20380), while
Vote requests go to the voters list. So a follower whose connection to the leader dropped (a
request timeout under load) got UnknownHostException until it stood for election itself; with one
node killed, the leader needs that follower to commit anything (fencing the dead broker, moving
its partitions' leaders), so every dropped connection stalled the quorum for an election.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness import paths
from harness.broker import BrokerState
from harness.cluster import CLUSTER_SETTINGS, ClusterState, NodeCluster
from harness.container.kafka import (
    BROKER_PORT,
    CONTROLLER_PORT,
    DEFAULT_READY_TIMEOUT_MS,
    ApacheKafkaContainer,
)
from harness.launch import BrokerError, cluster_id
from harness.maven import ProgressCallback

INTERNAL_PORT = 9094


class ClusterNodeContainer(ApacheKafkaContainer):
    """One node of a container cluster: its id, the quorum's voters and its own address."""

    def __init__(self, image: str, kafka_version: str, node_id: int, **kwargs: object) -> None:
        super().__init__(image, kafka_version, **kwargs)  # type: ignore[arg-type]
        self.node_id = node_id
        self.voters = ""
        self.settings: dict[str, str] = {}

    @property
    def address(self) -> str:
        """The container's address on the engine's network (other nodes connect to it)."""
        wrapped = self.get_wrapped_container()
        wrapped.reload()
        network = wrapped.attrs.get("NetworkSettings") or {}
        found = network.get("IPAddress") or next(
            (n.get("IPAddress") for n in (network.get("Networks") or {}).values() if n.get("IPAddress")), None
        )
        if not found:
            raise BrokerError(f"container of node {self.node_id} has no network address: {network}")
        return str(found)

    def listener_settings(self) -> dict[str, str]:
        own = self.address
        return {
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://0.0.0.0:{BROKER_PORT},INTERNAL://0.0.0.0:{INTERNAL_PORT},"
            f"CONTROLLER://{own}:{CONTROLLER_PORT}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap},INTERNAL://{own}:{INTERNAL_PORT}",
            "inter.broker.listener.name": "INTERNAL",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
            **self.settings,
        }


@dataclass(eq=False)
class ContainerCluster(NodeCluster[ClusterNodeContainer]):
    """Running node containers (ids 1..N); `bootstrap` lists every running node's mapped port."""

    nodes: list[ClusterNodeContainer]

    def is_up(self, node: ClusterNodeContainer) -> bool:
        wrapped = node.get_wrapped_container()
        try:
            wrapped.reload()
        except Exception:  # removed
            return False
        return bool(wrapped.status == "running")

    def kill(self, node_id: int) -> None:
        """SIGKILL the node's container (a crash: no controlled shutdown)."""
        self.node(node_id).get_wrapped_container().kill()

    def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()


def start_container_cluster(
    image: str,
    kafka_version: str,
    size: int = 3,
    new_coordinator: bool | None = None,
    extra_config: dict[str, str] | None = None,
    ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS,
) -> ContainerCluster:
    """Start `size` node containers from `image` as one KRaft cluster; returns when every node
    answers ApiVersions on its mapped port. The engine must be exported (harness.container.engine)."""
    if size < 1:
        raise ValueError("a cluster has at least one node")
    settings = ({**CLUSTER_SETTINGS} if size >= 3 else {}) | (extra_config or {})
    nodes = [
        ClusterNodeContainer(image, kafka_version, index + 1, new_coordinator=new_coordinator)
        for index in range(size)
    ]
    cluster = ContainerCluster(nodes)
    try:
        for node in nodes:
            super(ApacheKafkaContainer, node).start()  # waits for its start script
        voters = ",".join(f"{node.node_id}@{node.address}:{CONTROLLER_PORT}" for node in nodes)
        shared_id = cluster_id()
        for node in nodes:
            node.voters, node.settings = voters, settings
            node.begin(shared_id)
        for node in nodes:
            node.wait_ready(ready_timeout_ms)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def host_pid(node: ClusterNodeContainer) -> int:
    """The node's Kafka process as the host sees it (the container's first process execs java)."""
    wrapped = node.get_wrapped_container()
    wrapped.reload()
    return int(wrapped.attrs["State"]["Pid"])


def start_detached_container_cluster(
    kafka_version: str,
    size: int,
    new_coordinator: bool | None,
    settings: dict[str, str],
    directory: Path,
    progress: ProgressCallback | None = None,
) -> ClusterState:
    """`group-replay broker start --brokers N --provider container`: the cluster's containers keep
    running after this process (and the podman service it may start) exit; the state names the
    containers and each node's Kafka process by its host pid, so `status`, `stop --node N` (a
    SIGKILL of that process) and `stop` (SIGTERM, then the containers are removed) work as for
    the process provider. Raises BrokerError when no engine runs or the image cannot be built."""
    from harness.container.engine import EngineUnavailable, start_engine
    from harness.container.image import ImageBuildError, ensure_image

    try:
        engine = start_engine()
    except EngineUnavailable as exc:
        raise BrokerError(f"no container engine: {exc}") from None
    engine.export_env()
    try:
        image = ensure_image(kafka_version, progress)
        cluster = start_container_cluster(image, kafka_version, size, new_coordinator, settings)
    except ImageBuildError as exc:
        raise BrokerError(str(exc)) from None
    finally:
        engine.restore_env()
    directory.mkdir(parents=True, exist_ok=True)
    started_at_ms = int(time.time() * 1000)
    nodes = tuple(
        BrokerState(
            kafka_version=kafka_version,
            pid=host_pid(node),
            bootstrap=node.bootstrap,
            port=int(node.bootstrap.rsplit(":", 1)[1]),
            controller_port=CONTROLLER_PORT,
            data_dir=f"container {node.get_wrapped_container().id[:12]}",
            log_path=f"podman logs {node.get_wrapped_container().id[:12]}",
            new_coordinator=node.line.effective_new_coordinator(new_coordinator),
            started_at_ms=started_at_ms,
        )
        for node in cluster.nodes
    )
    return ClusterState(
        kafka_version=kafka_version,
        id=nodes[0].pid,
        bootstrap=cluster.bootstrap,
        security="plaintext",
        plaintext_bootstrap=cluster.bootstrap,
        directory=str(directory),
        client_config="",
        librdkafka_config="",
        started_at_ms=started_at_ms,
        nodes=nodes,
        containers=tuple(node.get_wrapped_container().id for node in cluster.nodes),
    )


def remove_containers(ids: tuple[str, ...]) -> None:
    """`podman rm -f` the stopped cluster's containers (no API service needed)."""
    podman = shutil.which("podman")
    if not ids or podman is None:
        return
    env = {**os.environ, "CONTAINERS_CONF": str(paths.cache_root() / "podman" / "containers.conf")}
    subprocess.run([podman, "rm", "-f", *ids], capture_output=True, timeout=120, env=env)


__all__ = [
    "ClusterNodeContainer",
    "ContainerCluster",
    "remove_containers",
    "start_container_cluster",
    "start_detached_container_cluster",
]
