"""What a harness broker runs: its settings, listeners, files and command lines, as pure data.

`plan_broker` fetches the jars (once) and lays out a `LaunchPlan`; `harness.broker` starts,
watches and stops the processes it describes. Kept apart so the CLI and tests can show a plan
without starting anything.
"""

from __future__ import annotations

import socket
import tempfile
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from harness.lines import DEFAULT_KAFKA_VERSION, KafkaLine, LogBinding, Mode, line_for
from harness.maven import ProgressCallback, broker_libs, java_path

DEFAULT_HEAP_MB = 384


# Settings that make a one-node broker quick and small for tests: one partition for the internal
# topics, no initial rebalance delay, short session timeouts allowed, small cleaner buffer.
TEST_SETTINGS: dict[str, str] = {
    "num.partitions": "1",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "transaction.state.log.num.partitions": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "num.network.threads": "2",
    "num.io.threads": "2",
    "background.threads": "2",
    "log.cleaner.dedupe.buffer.size": str(8 * 1024 * 1024),
    "auto.create.topics.enable": "true",
}


_LOG4J1 = """\
log4j.rootLogger=INFO, stdout
log4j.appender.stdout=org.apache.log4j.ConsoleAppender
log4j.appender.stdout.layout=org.apache.log4j.PatternLayout
log4j.appender.stdout.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.coordinator.group=DEBUG
log4j.logger.org.apache.kafka.coordinator.group=DEBUG
"""


_LOG4J2 = """\
appender.console.type=Console
appender.console.name=STDOUT
appender.console.layout.type=PatternLayout
appender.console.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
logger.groups.name=org.apache.kafka.coordinator.group
logger.groups.level=DEBUG
"""


class BrokerError(RuntimeError):
    """The broker could not start or stop; the message ends with the tail of its log."""


SECURITY_PROTOCOLS = ("SSL", "SASL_PLAINTEXT", "SASL_SSL")


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


@dataclass(frozen=True)
class SecureListener:
    """A listener beside the broker's PLAINTEXT one (which stays for readiness and inter-broker
    traffic), named after its security protocol: SSL, SASL_PLAINTEXT or SASL_SSL (KRaft lines).

    TLS: `keystore_pem` holds the broker's PKCS#8 key and certificate chain (Kafka's PEM key
    store), `truststore_pem` the CAs it trusts for client certificates, `client_auth` is
    `ssl.client.auth` (none | requested | required: mTLS). SASL: `mechanisms` among PLAIN and
    SCRAM-SHA-256/512; `users` are (name, password) pairs, written by the harness into the
    listener's PLAIN JAAS config (`user_NAME="..."`) and, for SCRAM, into the storage format
    (`kafka-storage format --add-scram`, Kafka 3.5+), so no admin step is needed after start.
    """

    protocol: str
    keystore_pem: str | None = None
    truststore_pem: str | None = None
    client_auth: str = "none"
    mechanisms: tuple[str, ...] = ()
    users: tuple[tuple[str, str], ...] = ()
    listener_name: str | None = None  # default: the protocol (two SSL listeners need two names)
    advertised_port: int | None = None  # advertise another port (a relay in front of the broker)

    @property
    def name(self) -> str:
        return self.listener_name or self.protocol

    def properties(self, port: int) -> dict[str, str]:
        """The listener-prefixed broker settings (`listener.name.<name>.`)."""
        if self.protocol not in SECURITY_PROTOCOLS:
            raise ValueError(f"security protocol {self.protocol!r}: one of {', '.join(SECURITY_PROTOCOLS)}")
        prefix = f"listener.name.{self.name.lower()}."
        settings: dict[str, str] = {}
        if "SSL" in self.protocol:
            if self.keystore_pem is None:
                raise ValueError(f"{self.protocol} listener needs keystore_pem")
            settings |= {
                f"{prefix}ssl.keystore.type": "PEM",
                f"{prefix}ssl.keystore.location": self.keystore_pem,
                f"{prefix}ssl.client.auth": self.client_auth,
                f"{prefix}ssl.endpoint.identification.algorithm": "",
            }
            if self.truststore_pem is not None:
                settings |= {
                    f"{prefix}ssl.truststore.type": "PEM",
                    f"{prefix}ssl.truststore.location": self.truststore_pem,
                }
        if "SASL" in self.protocol:
            unknown = [m for m in self.mechanisms if m not in SASL_MECHANISMS]
            if not self.mechanisms or unknown:
                raise ValueError(
                    f"SASL mechanisms {list(self.mechanisms)}: among {', '.join(SASL_MECHANISMS)}"
                )
            settings[f"{prefix}sasl.enabled.mechanisms"] = ",".join(self.mechanisms)
            for mechanism in self.mechanisms:
                if mechanism == "PLAIN":
                    users = " ".join(f'user_{name}="{password}"' for name, password in self.users)
                    module = "org.apache.kafka.common.security.plain.PlainLoginModule"
                else:
                    users, module = "", "org.apache.kafka.common.security.scram.ScramLoginModule"
                jaas = f"{module} required{' ' + users if users else ''};"
                settings[f"{prefix}{mechanism.lower()}.sasl.jaas.config"] = jaas
        return settings

    def scram_arguments(self) -> list[str]:
        """`StorageTool format` arguments that store this listener's SCRAM credentials."""
        arguments: list[str] = []
        for mechanism in self.mechanisms:
            if mechanism.startswith("SCRAM-"):
                for name, password in self.users:
                    arguments += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
        return arguments


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cluster_id() -> str:
    """A random KRaft cluster id. Like Kafka's own Uuid.randomUuid, never one starting with '-',
    which StorageTool's argument parser would take for an option."""
    while True:
        candidate = urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not candidate.startswith("-"):
            return candidate


class _InWorkDir:
    """A read-only attribute of a LaunchPlan: the file or directory `name` in its `work_dir`."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, plan: LaunchPlan, owner: type[LaunchPlan] | None = None) -> Path:
        return plan.work_dir / self.name


@dataclass(frozen=True)
class LaunchPlan:
    """Files and command lines for one broker; pure data so the CLI and tests can show it."""

    line: KafkaLine
    kafka_version: str
    libs: Path
    work_dir: Path
    port: int
    controller_port: int
    properties: dict[str, str]
    heap_mb: int
    new_coordinator: bool
    secure_listeners: tuple[SecureListener, ...] = ()
    secure_ports: tuple[int, ...] = ()  # one per secure listener, in order
    cluster_id: str | None = None  # shared by the nodes of a cluster (None: a fresh one at format)

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def listener_bootstrap(self, name: str) -> str:
        """host:port of the listener named `name` ("PLAINTEXT", "SSL", "SASL_SSL", ...)."""
        if name == "PLAINTEXT":
            return self.bootstrap
        for listener, port in zip(self.secure_listeners, self.secure_ports, strict=True):
            if listener.name == name:
                return f"127.0.0.1:{port}"
        raise KeyError(f"no {name} listener on this broker")

    # The work directory's files (ZooKeeper's two on ZooKeeper-mode lines only).
    data_dir = _InWorkDir("data")
    log_path = _InWorkDir("broker.log")
    config_path = _InWorkDir("server.properties")
    zookeeper_config_path = _InWorkDir("zookeeper.properties")
    zookeeper_log_path = _InWorkDir("zookeeper.log")

    def jvm_options(self) -> list[str]:
        match self.line.log_binding:
            case LogBinding.RELOAD4J:
                log_flag = f"-Dlog4j.configuration=file:{self.work_dir / 'log4j.properties'}"
            case LogBinding.LOG4J2:
                log_flag = f"-Dlog4j2.configurationFile={self.work_dir / 'log4j2.properties'}"
        return [
            f"-Xmx{self.heap_mb}m",
            "-Xms64m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",  # C1 only: faster start, less CPU on a shared 2-core box
            "-Djava.awt.headless=true",
            f"-Dkafka.logs.dir={self.work_dir / 'logs'}",
            log_flag,
        ]

    def java_command(self, main_class: str, *args: str) -> list[str]:
        java = java_path()
        if java is None:
            raise BrokerError("java not found on PATH (or JAVA_HOME): install a JDK 17")
        return [java, *self.jvm_options(), "-cp", f"{self.libs}/*", main_class, *args]

    def format_command(self) -> list[str]:
        scram = [argument for listener in self.secure_listeners for argument in listener.scram_arguments()]
        return self.java_command(
            "kafka.tools.StorageTool",
            "format",
            "-t",
            self.cluster_id or cluster_id(),
            "-c",
            str(self.config_path),
            "--ignore-formatted",
            *scram,
        )

    def broker_command(self) -> list[str]:
        return self.java_command("kafka.Kafka", str(self.config_path))

    def zookeeper_command(self) -> list[str]:
        """Standalone ZooKeeper (QuorumPeerMain with no server.N lines) from the broker's classpath."""
        return self.java_command(
            "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(self.zookeeper_config_path)
        )

    def write_files(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "logs").mkdir(exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.properties.items()))
        if self.line.mode is Mode.ZOOKEEPER:
            self.zookeeper_config_path.write_text(
                f"dataDir={self.work_dir / 'zookeeper'}\n"
                f"clientPort={self.controller_port}\n"
                "clientPortAddress=127.0.0.1\n"
                "maxClientCnxns=0\n"
                "admin.enableServer=false\n"
            )
        (self.work_dir / "log4j.properties").write_text(_LOG4J1)
        (self.work_dir / "log4j2.properties").write_text(_LOG4J2)


@dataclass(frozen=True)
class BrokerSpec:
    """What a broker is asked to be, apart from where it runs: the one argument of `plan_broker`,
    `harness.broker.start_broker` (which plans again from it after a port clash) and
    `harness.cluster.start_cluster` (every node planned from it).

    `new_coordinator`: None keeps the line's default; True/False sets `group.coordinator.new.enable`
    where the line has both coordinators (ValueError where it has only one). `extra_config`: broker
    settings over the harness's own. `secure_listeners`: SSL / SASL listeners beside PLAINTEXT
    (KRaft lines only)."""

    kafka_version: str = DEFAULT_KAFKA_VERSION
    new_coordinator: bool | None = None
    extra_config: Mapping[str, str] = field(default_factory=dict)
    heap_mb: int = DEFAULT_HEAP_MB
    secure_listeners: tuple[SecureListener, ...] = ()


def plan_broker(
    spec: BrokerSpec,
    *,
    work_dir: Path | None = None,
    progress: ProgressCallback | None = None,
    port: int | None = None,
) -> LaunchPlan:
    """Fetch the jars (once) and lay out the config for the broker `spec` asks for; nothing is
    started yet. `port`: the PLAINTEXT listener's (the CLI's --port; default a free one)."""
    kafka_version, secure_listeners = spec.kafka_version, spec.secure_listeners
    line = line_for(kafka_version)
    if not line.implemented:
        raise BrokerError(f"the harness cannot launch Kafka {line.name} ({line.mode.value}) yet")
    coordinator_settings = line.coordinator_key(spec.new_coordinator)  # ValueError if impossible
    libs = broker_libs(kafka_version, progress)
    if work_dir is None:
        work_dir = Path(tempfile.mkdtemp(prefix=f"kafka-{kafka_version}-"))
    port, controller_port = port or _free_port(), _free_port()  # `port`: the CLI's --port
    while controller_port == port:
        controller_port = _free_port()
    secure_ports: list[int] = []
    while len(secure_ports) < len(secure_listeners):
        candidate = _free_port()
        if candidate not in (port, controller_port, *secure_ports):
            secure_ports.append(candidate)
    if secure_listeners and line.mode is not Mode.KRAFT:
        raise BrokerError("SSL/SASL listeners are set up for KRaft lines (3.3+) only")
    if line.mode is Mode.KRAFT:
        mode_settings = {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
            "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        }
    else:  # ZooKeeper mode: controller_port is ZooKeeper's client port; the broker makes the chroot
        mode_settings = {
            "broker.id": "0",
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "zookeeper.connect": f"127.0.0.1:{controller_port}/kafka",
            "zookeeper.connection.timeout.ms": "30000",
        }
    security_settings: dict[str, str] = {}
    if secure_listeners:
        extra = [(listener, p) for listener, p in zip(secure_listeners, secure_ports, strict=True)]
        mode_settings["listeners"] += "".join(f",{listener.name}://127.0.0.1:{p}" for listener, p in extra)
        mode_settings["advertised.listeners"] += "".join(
            f",{listener.name}://127.0.0.1:{listener.advertised_port or p}" for listener, p in extra
        )
        mode_settings["listener.security.protocol.map"] += "".join(
            f",{listener.name}:{listener.protocol}" for listener, _ in extra
        )
        for listener, p in extra:
            security_settings |= listener.properties(p)
    properties = {
        **mode_settings,
        **security_settings,
        "log.dirs": str(work_dir / "data"),
        **TEST_SETTINGS,
        **coordinator_settings,
        **spec.extra_config,
    }
    return LaunchPlan(
        line=line,
        kafka_version=kafka_version,
        libs=libs,
        work_dir=work_dir,
        port=port,
        controller_port=controller_port,
        properties=properties,
        heap_mb=spec.heap_mb,
        new_coordinator=line.effective_new_coordinator(spec.new_coordinator),
        secure_listeners=secure_listeners,
        secure_ports=tuple(secure_ports),
    )
