"""Apache Kafka (KRaft, one node) in a container started by testcontainers-python.

The advertised listener must be the host's mapped port, known only after the container starts,
so the container waits for a start script that we write afterwards with `put_archive` (as
testcontainers' own KafkaContainer does; `exec` would leave podman exec sessions lingering).
Ready = the mapped port answers ApiVersions, the same check the process provider uses.
"""

from __future__ import annotations

import io
import tarfile

from testcontainers.core.container import DockerContainer

from harness.broker import TEST_SETTINGS, cluster_id
from harness.container.image import WAIT_FOR_START
from harness.lines import LogBinding, line_for
from harness.probe import NotAnswering, wait_answering

BROKER_PORT = 9092
CONTROLLER_PORT = 9093
DEFAULT_READY_TIMEOUT_MS = 120_000

_LOG4J1 = (
    "log4j.rootLogger=INFO, stdout\n"
    "log4j.appender.stdout=org.apache.log4j.ConsoleAppender\n"
    "log4j.appender.stdout.layout=org.apache.log4j.PatternLayout\n"
    "log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
)
_LOG4J2 = (
    "appender.console.type=Console\nappender.console.name=STDOUT\n"
    "appender.console.layout.type=PatternLayout\nappender.console.layout.pattern=[%d] %p %m (%c)%n\n"
    "rootLogger.level=INFO\nrootLogger.appenderRef.stdout.ref=STDOUT\n"
)


class ContainerBrokerError(RuntimeError):
    """The containerised broker did not become ready; includes the container's log tail."""


def _tar(files: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o755
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class ApacheKafkaContainer(DockerContainer):
    """`with ApacheKafkaContainer(image, "3.9.2") as kafka: kafka.bootstrap` -> "127.0.0.1:PORT"."""

    def __init__(
        self,
        image: str,
        kafka_version: str,
        new_coordinator: bool | None = None,
        heap_mb: int = 384,
        **kwargs: object,
    ) -> None:
        super().__init__(image, **kwargs)  # type: ignore[arg-type]
        self.kafka_version = kafka_version
        self.line = line_for(kafka_version)
        self.coordinator_settings = self.line.coordinator_key(new_coordinator)
        self.heap_mb = heap_mb
        self.with_exposed_ports(BROKER_PORT)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.get_exposed_port(BROKER_PORT)}"

    def listener_settings(self) -> dict[str, str]:
        """One node: clients on the mapped port, its controller inside the container only."""
        return {
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{CONTROLLER_PORT}",
            "listeners": f"PLAINTEXT://0.0.0.0:{BROKER_PORT},CONTROLLER://127.0.0.1:{CONTROLLER_PORT}",
            "advertised.listeners": f"PLAINTEXT://{self.bootstrap}",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }

    def _server_properties(self) -> str:
        settings = {
            "process.roles": "broker,controller",
            "controller.listener.names": "CONTROLLER",
            "log.dirs": "/var/lib/kafka/data",
            **self.listener_settings(),
            **TEST_SETTINGS,
            **self.coordinator_settings,
        }
        return "".join(f"{k}={v}\n" for k, v in settings.items())

    def _start_script(self, cluster: str | None = None) -> str:
        if self.line.log_binding is LogBinding.RELOAD4J:
            log_flag = "-Dlog4j.configuration=file:/tc/log4j.properties"
        else:
            log_flag = "-Dlog4j2.configurationFile=/tc/log4j2.properties"
        opts = f"-Xmx{self.heap_mb}m -Xms64m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 {log_flag}"
        cluster = cluster or cluster_id()
        return (
            "set -e\n"
            f"java {opts} -cp '/opt/kafka/libs/*' kafka.tools.StorageTool format "
            f"-t {cluster} -c /tc/server.properties --ignore-formatted\n"
            f"exec java {opts} -cp '/opt/kafka/libs/*' kafka.Kafka /tc/server.properties\n"
        )

    def start(self, ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS) -> ApacheKafkaContainer:
        super().start()
        self.begin()
        self.wait_ready(ready_timeout_ms)
        return self

    def begin(self, cluster: str | None = None) -> None:
        """Write the config and the start script the started container waits for (the mapped
        port, and for a cluster the other nodes' addresses, are known only now)."""
        wrapped = self.get_wrapped_container()
        config = {
            "tc/server.properties": self._server_properties(),
            "tc/log4j.properties": _LOG4J1,
            "tc/log4j2.properties": _LOG4J2,
        }
        wrapped.put_archive("/", _tar(config))
        wrapped.put_archive("/", _tar({WAIT_FOR_START.lstrip("/"): self._start_script(cluster)}))

    def logs_tail(self, lines: int = 40) -> str:
        try:
            stdout, stderr = self.get_logs()
        except Exception as exc:
            return f"(no logs: {exc})"
        text = (stdout or b"").decode(errors="replace") + (stderr or b"").decode(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, timeout_ms: int) -> None:
        host, port = "127.0.0.1", int(self.get_exposed_port(BROKER_PORT))

        def check_alive() -> None:
            wrapped = self.get_wrapped_container()
            wrapped.reload()
            if wrapped.status in ("exited", "dead"):
                raise ContainerBrokerError(f"container exited before Kafka was ready:\n{self.logs_tail()}")

        try:
            wait_answering(host, port, timeout_ms, check_alive, poll_s=0.3)
        except NotAnswering as exc:
            raise ContainerBrokerError(
                f"Kafka in container not ready on {host}:{port} within {timeout_ms} ms ({exc.last_error}):\n"
                f"{self.logs_tail()}"
            ) from None
