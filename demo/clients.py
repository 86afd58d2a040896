"""Real Kafka consumers of four kinds, each as a subprocess that reports what it saw as JSON lines.

Kinds: `confluent` (librdkafka), `kafka-python` (3.x), `aiokafka`, and `java` (kafka-clients of a
chosen version, driving demo/java/GroupConsumer.java compiled once with javac). A subprocess
can be stopped cleanly (SIGTERM: the client closes, dynamic members send LeaveGroup, static ones
do not), killed (SIGKILL: nothing sent) or bounced, which is what group tests need to exercise.
"""

from __future__ import annotations

import contextlib
import enum
import hashlib
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

from demo.security import ClientSecurity
from harness import paths
from harness.broker import child_preexec
from harness.class_archive import start_jvm
from harness.maven import ProgressCallback, client_libs, java_path
from harness.owned import Owned, StopsOnExit

# Oldest kafka-clients we support: the class is compiled against it so every newer one runs it.
JAVA_COMPILE_AGAINST = "2.4.1"
DEFAULT_JAVA_CLIENT = "3.9.2"
DEFAULT_SESSION_TIMEOUT_MS = 6000
DEFAULT_STOP_TIMEOUT_MS = 20_000
# GroupConsumer's arguments for the run that writes its class archive (harness.class_archive's
# start_jvm): an unreachable bootstrap, two seconds of polling it, then it exits.
GROUP_CONSUMER_TRAINING = ("127.0.0.1:1", "group-replay-archive", "-", "archive", "6000", "2000", "archive")


class ClientKind(enum.Enum):
    CONFLUENT = "confluent"
    KAFKA_PYTHON = "kafka-python"
    AIOKAFKA = "aiokafka"
    JAVA = "java"


class ClientError(RuntimeError):
    """A consumer process failed, or did not report what was awaited; includes its output."""


@dataclass(frozen=True)
class ConsumerSpec:
    """Who the member is. `group_instance_id=None` makes it a dynamic member."""

    kind: ClientKind
    bootstrap: str
    group_id: str
    topics: tuple[str, ...]
    group_instance_id: str | None = None
    client_id: str = "group-replay-consumer"
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    java_client_version: str = DEFAULT_JAVA_CLIENT  # only for kind=JAVA
    run_ms: int | None = None  # None: until stopped
    client_config: Path | None = None  # security settings, librdkafka's names (demo.security)

    @property
    def label(self) -> str:
        who = self.group_instance_id or f"dynamic:{self.client_id}"
        version = f" {self.java_client_version}" if self.kind is ClientKind.JAVA else ""
        return f"{self.kind.value}{version} {who}"


@dataclass(frozen=True)
class ClientEvent:
    """One JSON line a consumer printed."""

    event: str
    ts_ms: int
    partitions: tuple[str, ...] = ()
    generation_id: int | None = None
    member_id: str | None = None
    is_leader: bool | None = None  # only where the client exposes it (kafka-python)
    raw: dict[str, Any] = field(default_factory=dict, compare=False)

    @classmethod
    def parse(cls, line: str) -> ClientEvent | None:
        try:
            data = json.loads(line)
        except ValueError:
            return None
        if not isinstance(data, dict) or "event" not in data:
            return None
        return cls(
            event=str(data["event"]),
            ts_ms=int(data.get("ts_ms", 0)),
            partitions=tuple(data.get("partitions") or ()),
            generation_id=data.get("generation_id"),
            member_id=data.get("member_id"),
            is_leader=data.get("is_leader"),
            raw=data,
        )


# --- the Java consumer: compile once per source hash -------------------------------------------


def java_source() -> str:
    return files("demo").joinpath("java", "GroupConsumer.java").read_text()


def compiled_java_consumer(progress: ProgressCallback | None = None) -> Path:
    """Directory holding GroupConsumer.class, compiled with javac --release 8 if not cached."""
    source = java_source()
    return compile_cached("GroupConsumer", source, JAVA_COMPILE_AGAINST, release="8", progress=progress)


def compile_cached(
    name: str,
    source: str,
    clients_version: str,
    *,
    release: str | None = None,
    progress: ProgressCallback | None = None,
) -> Path:
    """Directory holding `name`.class and `name`.jar (its classes, for a class path a JVM can
    archive: harness.class_archive), compiled from `source` (the public class `name`) with javac
    against kafka-clients `clients_version`, once per source: cached under the harness cache by
    the digest of the source, the clients version and the release (the same source compiled
    against other clients is another build), built in a staging directory renamed into place
    when javac succeeds."""
    digest = hashlib.sha256(f"{clients_version}\0{release}\0{source}".encode()).hexdigest()[:16]
    out = paths.cache_root() / "java" / f"{name}-{digest}"
    if (out / f"{name}.jar").exists():
        return out
    if not (out / f"{name}.class").exists():
        _compile(name, source, clients_version, out, release, progress)
    jar = out / f"{name}.jar"
    partial = jar.with_name(f"{jar.name}.{os.getpid()}.partial")
    with zipfile.ZipFile(partial, "w") as archive:
        for compiled in sorted(out.glob("*.class")):
            archive.write(compiled, compiled.name)
    os.replace(partial, jar)
    return out


def _compile(
    name: str,
    source: str,
    clients_version: str,
    out: Path,
    release: str | None,
    progress: ProgressCallback | None,
) -> None:
    javac = shutil.which("javac")
    if javac is None:
        raise ClientError("javac not found on PATH: install a JDK (Debian: openjdk-17-jdk-headless)")
    libs = client_libs(clients_version, progress)
    staging = out.with_name(f"{out.name}.{os.getpid()}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    (staging / f"{name}.java").write_text(source, encoding="utf-8")
    flags = ["--release", release, "-nowarn"] if release else []
    # javac's own JVM with C1 only and the serial GC: 14 -> 4-6 s wall, 2.6 -> 1.4 s CPU a compile
    # (load 15-18); the default G1 and C2 start compiler threads a one-file compile never repays.
    quick = ["-J-XX:TieredStopAtLevel=1", "-J-XX:+UseSerialGC"]
    argv = [javac, *quick, *flags, "-cp", f"{libs}/*", "-d", str(staging), str(staging / f"{name}.java")]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise ClientError(f"javac failed:\n{result.stdout}{result.stderr}")
    shutil.rmtree(out, ignore_errors=True)  # a partial directory (no class in it)
    try:
        staging.rename(out)
    except OSError:  # another process compiled the same source meanwhile
        shutil.rmtree(staging, ignore_errors=True)


def java_client_command(
    main_class: str, classes: Path, clients_version: str, *args: str, options: Sequence[str] = ()
) -> list[str]:
    """`java` running `main_class` (compiled by `compile_cached` into `classes`) on kafka-clients
    `clients_version`, with the flags of every short-lived client JVM: a small heap, C1 only and
    the serial GC (less CPU to start on a shared machine). Start it with
    `harness.class_archive.start_jvm` to map its class archive."""
    java = java_path()
    if java is None:
        raise ClientError("java not found on PATH")
    libs = client_libs(clients_version)
    return [
        java,
        *options,
        "-Xmx96m",
        "-XX:+UseSerialGC",
        "-XX:TieredStopAtLevel=1",
        "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
        "-Dorg.slf4j.simpleLogger.logFile=System.err",
        "-cp",
        f"{classes / f'{main_class}.jar'}:{libs}/*",
        main_class,
        *args,
    ]


def command_for(spec: ConsumerSpec, progress: ProgressCallback | None = None) -> list[str]:
    if spec.kind is ClientKind.JAVA:
        classes = compiled_java_consumer(progress)
        client_libs(spec.java_client_version, progress)  # downloaded with progress reported
        security = []
        if spec.client_config is not None:
            security_dir = paths.cache_root() / "security"
            java_settings = ClientSecurity.read(spec.client_config).java_properties(security_dir)
            security = [f"-Dgroup.replay.client.properties={java_settings}"]
        return java_client_command(
            "GroupConsumer",
            classes,
            spec.java_client_version,
            spec.bootstrap,
            spec.group_id,
            spec.group_instance_id or "-",
            ",".join(spec.topics),
            str(spec.session_timeout_ms),
            str(-1 if spec.run_ms is None else spec.run_ms),
            spec.client_id,
            options=security,
        )
    cmd = [
        sys.executable,
        "-m",
        "demo.consumer_main",
        "--kind",
        spec.kind.value,
        "--bootstrap",
        spec.bootstrap,
        "--group",
        spec.group_id,
        "--client-id",
        spec.client_id,
        "--session-timeout-ms",
        str(spec.session_timeout_ms),
    ]
    for topic in spec.topics:
        cmd += ["--topic", topic]
    if spec.group_instance_id:
        cmd += ["--instance", spec.group_instance_id]
    if spec.run_ms is not None:
        cmd += ["--run-ms", str(spec.run_ms)]
    if spec.client_config is not None:
        cmd += ["--client-config", str(spec.client_config)]
    return cmd


# No consumer outlives the interpreter that started it.
_LIVE: Owned[ConsumerProcess] = Owned(lambda consumer: consumer.kill())


class ConsumerProcess(StopsOnExit):
    """A running consumer. Its JSON lines are collected on a reader thread into `events`."""

    def __init__(self, spec: ConsumerSpec, progress: ProgressCallback | None = None) -> None:
        self.spec = spec
        self.events: list[ClientEvent] = []
        self.stderr_lines: list[str] = []
        self._new: queue.Queue[ClientEvent | None] = queue.Queue()
        self._lock = threading.Lock()
        popen: dict[str, Any] = {"stdin": subprocess.DEVNULL, "stdout": subprocess.PIPE, "text": True}
        popen |= {"stderr": subprocess.PIPE, "preexec_fn": child_preexec(detach=False)}
        command = command_for(spec, progress)
        if spec.kind is ClientKind.JAVA:
            self.process = start_jvm(command, train_args=GROUP_CONSUMER_TRAINING, **popen)
        else:
            self.process = subprocess.Popen(command, **popen)
        _LIVE.add(self)
        self._readers = [
            threading.Thread(target=self._read_stdout, daemon=True),
            threading.Thread(target=self._read_stderr, daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            event = ClientEvent.parse(line)
            if event is not None:
                with self._lock:
                    self.events.append(event)
                self._new.put(event)
        self._new.put(None)

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            with self._lock:
                self.stderr_lines = [*self.stderr_lines[-60:], line.rstrip()]

    @property
    def pid(self) -> int:
        return self.process.pid

    def snapshot(self) -> list[ClientEvent]:
        with self._lock:
            return list(self.events)

    def assignments(self) -> list[ClientEvent]:
        return [e for e in self.snapshot() if e.event == "assigned"]

    def last_assignment(self) -> ClientEvent | None:
        found = self.assignments()
        return found[-1] if found else None

    def describe(self) -> str:
        with self._lock:
            out = "\n".join(json.dumps(e.raw) for e in self.events[-20:])
            err = "\n".join(self.stderr_lines[-20:])
        return (
            f"{self.spec.label} (pid {self.pid}, exit {self.process.poll()})\nstdout:\n{out}\nstderr:\n{err}"
        )

    def wait_for(
        self, predicate: Callable[[ClientEvent], bool], timeout_ms: int, after: int = 0
    ) -> ClientEvent:
        """First event (at index >= `after`) matching `predicate`; ClientError on timeout or exit."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            for event in self.snapshot()[after:]:
                if event.event == "error":
                    raise ClientError(
                        f"consumer reported an error: {event.raw.get('message')}\n{self.describe()}"
                    )
                if predicate(event):
                    return event
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ClientError(f"timed out after {timeout_ms} ms\n{self.describe()}")
            try:
                if self._new.get(timeout=min(remaining, 0.5)) is None:
                    self._new.put(None)  # keep the end marker for later callers
                    if not any(predicate(e) for e in self.snapshot()[after:]):
                        raise ClientError(f"consumer exited before the awaited event\n{self.describe()}")
            except queue.Empty:
                pass

    def wait_assigned(self, timeout_ms: int = 60_000, after: int = 0) -> ClientEvent:
        return self.wait_for(lambda e: e.event == "assigned", timeout_ms, after)

    def stop(self, timeout_ms: int = DEFAULT_STOP_TIMEOUT_MS) -> int:
        """SIGTERM: the client closes cleanly (dynamic members leave the group). SIGKILL on timeout."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_ms / 1000)
            except subprocess.TimeoutExpired:
                self.kill()
        for reader in self._readers:
            reader.join(timeout=5)
        _LIVE.discard(self)
        return int(self.process.wait())

    def kill(self) -> int:
        """SIGKILL: no LeaveGroup, no commit; the coordinator notices only by session timeout."""
        with contextlib.suppress(ProcessLookupError):
            self.process.kill()
        _LIVE.discard(self)
        return int(self.process.wait())


def start_consumer(spec: ConsumerSpec, progress: ProgressCallback | None = None) -> ConsumerProcess:
    return ConsumerProcess(spec, progress)
