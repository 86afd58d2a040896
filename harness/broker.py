"""A real single-node Kafka broker, run as a `java` process from Maven Central jars.

KRaft lines run one process as broker+controller on two free 127.0.0.1 ports, with storage
formatted by `kafka.tools.StorageTool` in a fresh temp dir. ZooKeeper-era lines (2.4 - 3.2) run
ZooKeeper's QuorumPeerMain from the same classpath first, then the broker with a chroot on it.
Ready means the PLAINTEXT listener
answers ApiVersions. Every broker this process starts is stopped on `stop()`, on leaving its
`with` block, at interpreter exit (atexit), and, if this process dies hard, by the kernel
(PR_SET_PDEATHSIG), so no test run leaves an orphan JVM behind.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from base64 import urlsafe_b64encode
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from harness import paths
from harness.lines import DEFAULT_KAFKA_VERSION, KafkaLine, LogBinding, Mode, line_for
from harness.maven import ProgressCallback, broker_libs, java_path
from harness.probe import api_versions

DEFAULT_HEAP_MB = 384
DEFAULT_READY_TIMEOUT_MS = 90_000
DEFAULT_STOP_TIMEOUT_MS = 20_000
_PORT_ATTEMPTS = 3

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


@dataclass(frozen=True)
class BrokerState:
    """What another process needs to find (and stop) a broker: written as JSON for detached ones."""

    kafka_version: str
    pid: int
    bootstrap: str
    port: int
    controller_port: int
    data_dir: str
    log_path: str
    new_coordinator: bool
    started_at_ms: int
    zookeeper_pid: int | None = None  # ZooKeeper-mode lines only

    @classmethod
    def from_json(cls, text: str) -> BrokerState:
        data: dict[str, Any] = json.loads(text)
        return cls(**{k: data[k] for k in cls.__dataclass_fields__ if k in data or k != "zookeeper_pid"})


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


def _die_with_parent() -> None:
    """preexec_fn: SIGTERM the child when the parent dies, even by SIGKILL (Linux only)."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def child_preexec(detach: bool) -> Callable[[], None] | None:
    """PR_SET_PDEATHSIG fires when the *thread* that forked exits, so it is only safe from the
    main thread (which lives as long as the process); children of other threads rely on atexit."""
    if detach or threading.current_thread() is not threading.main_thread():
        return None
    return _die_with_parent


def _log_tail(log_path: Path, lines: int = 40) -> str:
    try:
        text = log_path.read_text(errors="replace")
    except OSError as exc:
        return f"(no log at {log_path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])


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

    @property
    def data_dir(self) -> Path:
        return self.work_dir / "data"

    @property
    def log_path(self) -> Path:
        return self.work_dir / "broker.log"

    @property
    def config_path(self) -> Path:
        return self.work_dir / "server.properties"

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

    @property
    def zookeeper_config_path(self) -> Path:
        return self.work_dir / "zookeeper.properties"

    @property
    def zookeeper_log_path(self) -> Path:
        return self.work_dir / "zookeeper.log"

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


def plan_broker(
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    new_coordinator: bool | None = None,
    extra_config: dict[str, str] | None = None,
    *,
    work_dir: Path | None = None,
    heap_mb: int = DEFAULT_HEAP_MB,
    progress: ProgressCallback | None = None,
    secure_listeners: tuple[SecureListener, ...] = (),
    port: int | None = None,
) -> LaunchPlan:
    """Fetch the jars (once) and lay out the config for a broker; nothing is started yet.
    `secure_listeners`: SSL / SASL listeners beside PLAINTEXT (KRaft lines only)."""
    line = line_for(kafka_version)
    if not line.implemented:
        raise BrokerError(f"the harness cannot launch Kafka {line.name} ({line.mode.value}) yet")
    coordinator_settings = line.coordinator_key(new_coordinator)  # ValueError if impossible
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
        **(extra_config or {}),
    }
    return LaunchPlan(
        line=line,
        kafka_version=kafka_version,
        libs=libs,
        work_dir=work_dir,
        port=port,
        controller_port=controller_port,
        properties=properties,
        heap_mb=heap_mb,
        new_coordinator=line.effective_new_coordinator(new_coordinator),
        secure_listeners=secure_listeners,
        secure_ports=tuple(secure_ports),
    )


_LIVE: set[Broker] = set()
_LIVE_LOCK = threading.Lock()


@dataclass(eq=False)
class Broker:
    """A running broker. Use as a context manager, or call `stop()`; `.bootstrap` is host:port."""

    plan: LaunchPlan
    process: subprocess.Popen[bytes]
    owns_work_dir: bool
    zookeeper: subprocess.Popen[bytes] | None = None
    started_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    _stopped: bool = False

    @property
    def bootstrap(self) -> str:
        return self.plan.bootstrap

    def listener_bootstrap(self, name: str) -> str:
        """host:port of this broker's `name` listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        return self.plan.listener_bootstrap(name)

    @property
    def kafka_version(self) -> str:
        return self.plan.kafka_version

    @property
    def new_coordinator(self) -> bool:
        return self.plan.new_coordinator

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_path(self) -> Path:
        return self.plan.log_path

    def log_tail(self, lines: int = 40) -> str:
        return _log_tail(self.plan.log_path, lines)

    def state(self) -> BrokerState:
        return BrokerState(
            kafka_version=self.kafka_version,
            pid=self.pid,
            bootstrap=self.bootstrap,
            port=self.plan.port,
            controller_port=self.plan.controller_port,
            data_dir=str(self.plan.work_dir),
            log_path=str(self.plan.log_path),
            new_coordinator=self.new_coordinator,
            started_at_ms=self.started_at_ms,
            zookeeper_pid=None if self.zookeeper is None else self.zookeeper.pid,
        )

    def is_running(self) -> bool:
        return self.process.poll() is None

    def stop(self, timeout_ms: int = DEFAULT_STOP_TIMEOUT_MS, remove_data: bool = True) -> int | None:
        """SIGTERM (controlled shutdown), then SIGKILL after `timeout_ms`. Returns the exit code."""
        if not self._stopped:
            self._stopped = True
            _terminate(self.process, timeout_ms)
            if self.zookeeper is not None:  # after the broker, so it can deregister cleanly
                _terminate(self.zookeeper, timeout_ms)
            with _LIVE_LOCK:
                _LIVE.discard(self)
            if remove_data and self.owns_work_dir:
                shutil.rmtree(self.plan.work_dir, ignore_errors=True)
        return self.process.returncode

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Broker(kafka_version={self.kafka_version!r}, bootstrap={self.bootstrap!r}, pid={self.pid})"


def _terminate(process: subprocess.Popen[bytes], timeout_ms: int) -> None:
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout_ms / 1000)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()


@atexit.register
def stop_all() -> None:
    """Stop every broker this interpreter started and still owns."""
    with _LIVE_LOCK:
        brokers = list(_LIVE)
    for broker in brokers:
        broker.stop()


def _run_format(plan: LaunchPlan) -> None:
    result = subprocess.run(plan.format_command(), capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        causes = [line for line in output.splitlines() if _CAUSE.search(line)][:6]
        raise BrokerError(
            f"StorageTool format failed for Kafka {plan.kafka_version} (exit {result.returncode}):\n"
            + "\n".join(causes)
            + f"\n--- output tail ---\n{output[-2000:]}"
        )


_CAUSE = re.compile(r"Exception|ERROR|Caused by|error:", re.IGNORECASE)


def _wait_ready(plan: LaunchPlan, process: subprocess.Popen[bytes], timeout_ms: int) -> None:
    deadline = time.monotonic() + timeout_ms / 1000
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrokerError(
                f"Kafka {plan.kafka_version} exited with {process.returncode} before it was ready; "
                f"log {plan.log_path}:\n{_log_tail(plan.log_path)}"
            )
        try:
            api_versions("127.0.0.1", plan.port, timeout_ms=2000)
            return
        except (OSError, ConnectionError) as exc:
            last_error = exc
        time.sleep(0.2)
    raise BrokerError(
        f"Kafka {plan.kafka_version} did not answer ApiVersions on {plan.bootstrap} within {timeout_ms} ms "
        f"(last error: {last_error}); log {plan.log_path}:\n{_log_tail(plan.log_path)}"
    )


def _start_zookeeper(plan: LaunchPlan, detach: bool) -> subprocess.Popen[bytes]:
    """Start ZooKeeper and wait until its client port accepts connections."""
    with open(plan.zookeeper_log_path, "ab") as log:
        process = subprocess.Popen(
            plan.zookeeper_command(),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=plan.work_dir,
            start_new_session=detach,
            preexec_fn=child_preexec(detach),
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise BrokerError(
                f"ZooKeeper for Kafka {plan.kafka_version} exited with {process.returncode}:\n"
                f"{_log_tail(plan.zookeeper_log_path)}"
            )
        try:
            with socket.create_connection(("127.0.0.1", plan.controller_port), timeout=1):
                return process
        except OSError:
            time.sleep(0.2)
    _terminate(process, 5000)
    raise BrokerError(
        f"ZooKeeper did not listen on {plan.controller_port}:\n{_log_tail(plan.zookeeper_log_path)}"
    )


def _port_clash(plan: LaunchPlan) -> bool:
    return "Address already in use" in _log_tail(plan.log_path, 200)


def start_broker(
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    new_coordinator: bool | None = None,
    extra_config: dict[str, str] | None = None,
    *,
    work_dir: Path | None = None,
    heap_mb: int = DEFAULT_HEAP_MB,
    ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS,
    detach: bool = False,
    progress: ProgressCallback | None = None,
    secure_listeners: tuple[SecureListener, ...] = (),
    port: int | None = None,
) -> Broker:
    """Start a broker and return once it answers ApiVersions.

    `new_coordinator`: None keeps the line's default; True/False sets `group.coordinator.new.enable`
    where the line has both coordinators, and raises ValueError where it has only one.
    `detach=True` leaves the broker running after this interpreter exits (the CLI's `start`).
    """
    for attempt in range(_PORT_ATTEMPTS):
        plan = plan_broker(
            kafka_version,
            new_coordinator,
            extra_config,
            work_dir=work_dir,
            heap_mb=heap_mb,
            progress=progress,
            secure_listeners=secure_listeners,
            port=port,
        )
        owns_work_dir = work_dir is None
        plan.write_files()
        zookeeper = None
        try:
            if plan.line.mode is Mode.KRAFT:
                _run_format(plan)
            else:
                zookeeper = _start_zookeeper(plan, detach)
        except BaseException:
            if owns_work_dir:
                shutil.rmtree(plan.work_dir, ignore_errors=True)
            raise
        with open(plan.log_path, "ab") as log:
            process = subprocess.Popen(
                plan.broker_command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=plan.work_dir,
                start_new_session=detach,
                preexec_fn=child_preexec(detach),
            )
        broker = Broker(
            plan=plan, process=process, owns_work_dir=owns_work_dir and not detach, zookeeper=zookeeper
        )
        if not detach:
            with _LIVE_LOCK:
                _LIVE.add(broker)
        try:
            _wait_ready(plan, process, ready_timeout_ms)
        except BrokerError:
            clash = _port_clash(plan)
            broker.stop(remove_data=not clash or attempt == _PORT_ATTEMPTS - 1)
            if clash and attempt < _PORT_ATTEMPTS - 1:
                if owns_work_dir:
                    shutil.rmtree(plan.work_dir, ignore_errors=True)
                continue  # another process took a port between our probe and the bind: retry
            raise
        return broker
    raise AssertionError("unreachable")


# --- clusters: several KRaft nodes on 127.0.0.1 --------------------------------------------------

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


@dataclass(eq=False)
class Cluster:
    """Running KRaft nodes (broker+controller each, node ids 1..N, one controller quorum)."""

    brokers: list[Broker]

    @property
    def bootstrap(self) -> str:
        """Every running node's PLAINTEXT address, comma-separated (a client's bootstrap list)."""
        return ",".join(b.bootstrap for b in self.brokers if b.is_running())

    def node(self, node_id: int) -> Broker:
        return self.brokers[node_id - 1]

    def listener_bootstrap(self, name: str) -> str:
        """Every running node's `name` listener (SSL, SASL_SSL, ...), comma-separated."""
        return ",".join(b.listener_bootstrap(name) for b in self.brokers if b.is_running())

    def node_for_port(self, port: int) -> Broker:
        for broker in self.brokers:
            if broker.plan.port == port:
                return broker
        raise KeyError(f"no node listens on port {port}")

    @property
    def kafka_version(self) -> str:
        return self.brokers[0].kafka_version

    def kill(self, node_id: int) -> None:
        """SIGKILL one node (a crash: no controlled shutdown); its data stays for `restart`."""
        process = self.node(node_id).process
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()

    def restart(self, node_id: int, ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS) -> Broker:
        """Start a stopped or killed node again on its ports and data; returns once it answers."""
        broker = self.node(node_id)
        if broker.is_running():
            return broker
        with open(broker.plan.log_path, "ab") as log:
            broker.process = subprocess.Popen(
                broker.plan.broker_command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=broker.plan.work_dir,
                preexec_fn=child_preexec(False),
            )
        broker._stopped = False
        with _LIVE_LOCK:
            _LIVE.add(broker)
        _wait_ready(broker.plan, broker.process, ready_timeout_ms)
        return broker

    def stop(self) -> None:
        for broker in self.brokers:
            broker.stop()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_cluster(
    kafka_version: str = DEFAULT_KAFKA_VERSION,
    size: int = 3,
    new_coordinator: bool | None = None,
    extra_config: dict[str, str] | None = None,
    *,
    heap_mb: int = DEFAULT_HEAP_MB,
    ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS,
    progress: ProgressCallback | None = None,
    secure_listeners: tuple[SecureListener, ...] = (),
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
    settings = {**CLUSTER_SETTINGS} if size >= 3 else {}
    settings |= extra_config or {}
    plans = [
        plan_broker(
            kafka_version,
            new_coordinator,
            settings,
            heap_mb=heap_mb,
            progress=progress,
            secure_listeners=secure_listeners,
            work_dir=None if work_root is None else work_root / f"node-{index + 1}",
        )
        for index in range(size)
    ]
    if plans[0].line.mode is not Mode.KRAFT:
        raise BrokerError(f"clusters are set up for KRaft lines (3.3+) only, not Kafka {kafka_version}")
    voters = ",".join(f"{index + 1}@127.0.0.1:{plan.controller_port}" for index, plan in enumerate(plans))
    shared_id = cluster_id()
    plans = [
        replace(
            plan,
            cluster_id=shared_id,
            properties={**plan.properties, "node.id": str(index + 1), "controller.quorum.voters": voters},
        )
        for index, plan in enumerate(plans)
    ]
    brokers: list[Broker] = []
    try:
        for plan in plans:
            plan.write_files()
            _run_format(plan)
        for plan in plans:
            with open(plan.log_path, "ab") as log:
                process = subprocess.Popen(
                    plan.broker_command(),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    cwd=plan.work_dir,
                    start_new_session=detach,
                    preexec_fn=child_preexec(detach),
                )
            broker = Broker(plan=plan, process=process, owns_work_dir=not detach)
            if not detach:
                with _LIVE_LOCK:
                    _LIVE.add(broker)
            brokers.append(broker)
        for broker in brokers:
            _wait_ready(broker.plan, broker.process, ready_timeout_ms)
    except BaseException:
        for broker in brokers:
            broker.stop()
        for plan in plans:
            shutil.rmtree(plan.work_dir, ignore_errors=True)
        raise
    return Cluster(brokers)


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

    @classmethod
    def from_json(cls, text: str) -> ClusterState:
        data: dict[str, Any] = json.loads(text)
        nodes = tuple(BrokerState(**node) for node in data.pop("nodes"))
        return cls(**data, nodes=nodes)

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"


# --- detached brokers: a state file per version under the run dir --------------------------------


def state_path(kafka_version: str) -> Path:
    return paths.run_dir() / f"broker-{kafka_version}.json"


def write_state(state: BrokerState) -> Path:
    path = state_path(state.kafka_version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(state), indent=2) + "\n")
    tmp.replace(path)
    return path


def cluster_state_path(kafka_version: str) -> Path:
    return paths.run_dir() / f"cluster-{kafka_version}.json"


def cluster_directory(kafka_version: str) -> Path:
    """Where a detached cluster of this version keeps its nodes, certificates and client configs."""
    return paths.run_dir() / f"cluster-{kafka_version}"


def write_cluster_state(state: ClusterState) -> Path:
    path = cluster_state_path(state.kafka_version)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(state.to_json())
    tmp.replace(path)
    return path


def find_running_clusters(kafka_version: str | None = None) -> list[ClusterState]:
    """Clusters started detached whose nodes are (some of them) still alive."""
    found = []
    for path in sorted(paths.run_dir().glob("cluster-*.json")):
        try:
            state = ClusterState.from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if kafka_version is not None and state.kafka_version != kafka_version:
            continue
        if any(pid_alive(node.pid) for node in state.nodes):
            found.append(state)
    return found


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
    cluster_state_path(state.kafka_version).unlink(missing_ok=True)
    shutil.rmtree(state.directory, ignore_errors=True)
    return bool(alive)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie still "exists"; treat it as gone.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z"):
            return False
    return True


def find_running(kafka_version: str | None = None) -> list[BrokerState]:
    """Brokers started detached (by `group-replay broker start`) whose process is still alive."""
    found = []
    for path in sorted(paths.run_dir().glob("broker-*.json")):
        try:
            state = BrokerState.from_json(path.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if kafka_version is not None and state.kafka_version != kafka_version:
            continue
        if pid_alive(state.pid):
            found.append(state)
    return found


def stop_detached(state: BrokerState, timeout_ms: int = DEFAULT_STOP_TIMEOUT_MS) -> bool:
    """SIGTERM then SIGKILL a detached broker by pid; removes its state file and data dir."""
    stopped = _kill_pid(state.pid, timeout_ms)
    if state.zookeeper_pid is not None:
        _kill_pid(state.zookeeper_pid, timeout_ms)
    state_path(state.kafka_version).unlink(missing_ok=True)
    shutil.rmtree(state.data_dir, ignore_errors=True)
    return stopped


def _kill_pid(pid: int, timeout_ms: int) -> bool:
    """SIGTERM, then SIGKILL after `timeout_ms`; True if the process was alive."""
    stopped = False
    if pid_alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_ms / 1000
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        if pid_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        stopped = True
    return stopped
