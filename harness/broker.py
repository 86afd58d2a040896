"""A real single-node Kafka broker, run as a `java` process from Maven Central jars.

KRaft lines run one process as broker+controller on two free 127.0.0.1 ports, with storage
formatted by `kafka.tools.StorageTool` in a fresh temp dir. ZooKeeper-era lines (2.4 - 3.2) run
ZooKeeper's QuorumPeerMain from the same classpath first, then the broker with a chroot on it.
Ready means the PLAINTEXT listener answers ApiVersions. What runs (settings, listeners, files,
command lines) is planned in `harness.launch`; this module starts, watches and stops it. Every
broker this process starts is stopped on `stop()`, on leaving its `with` block, at interpreter
exit (atexit), and, if this process dies hard, by the kernel (PR_SET_PDEATHSIG), so no test run
leaves an orphan JVM behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from harness import paths
from harness.class_archive import command_archive, with_archive
from harness.launch import DEFAULT_HEAP_MB as DEFAULT_HEAP_MB
from harness.launch import SASL_MECHANISMS as SASL_MECHANISMS
from harness.launch import SECURITY_PROTOCOLS as SECURITY_PROTOCOLS
from harness.launch import TEST_SETTINGS as TEST_SETTINGS
from harness.launch import BrokerError as BrokerError
from harness.launch import BrokerSpec as BrokerSpec
from harness.launch import LaunchPlan as LaunchPlan
from harness.launch import SecureListener as SecureListener
from harness.launch import cluster_id as cluster_id
from harness.launch import plan_broker as plan_broker
from harness.lines import Mode
from harness.maven import ProgressCallback
from harness.owned import Owned, StopsOnExit
from harness.probe import NotAnswering, wait_answering
from harness.views import PartView

DEFAULT_READY_TIMEOUT_MS = 90_000
DEFAULT_STOP_TIMEOUT_MS = 20_000
PORT_ATTEMPTS = 3


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


# Brokers this interpreter started (not detached): stopped at exit if nothing else has.
_LIVE: Owned[Broker] = Owned(lambda broker: broker.stop())


@dataclass(eq=False)
class Broker(StopsOnExit):
    """A running broker. Use as a context manager, or call `stop()`; `.bootstrap` is host:port."""

    plan: LaunchPlan
    process: subprocess.Popen[bytes]
    owns_work_dir: bool
    zookeeper: subprocess.Popen[bytes] | None = None
    started_at_ms: int = field(default_factory=lambda: int(time.time() * 1000))
    _stopped: bool = False

    # Views of its launch plan and its process (harness/__init__.py lists them as the API).
    bootstrap = PartView[str]("plan")
    kafka_version = PartView[str]("plan")
    new_coordinator = PartView[bool]("plan")
    log_path = PartView[Path]("plan")
    pid = PartView[int]("process")

    def listener_bootstrap(self, name: str) -> str:
        """host:port of this broker's `name` listener (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL)."""
        return self.plan.listener_bootstrap(name)

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
            _LIVE.discard(self)
            if remove_data and self.owns_work_dir:
                shutil.rmtree(self.plan.work_dir, ignore_errors=True)
        return self.process.returncode

    def start_again(self, ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS) -> None:
        """Start a stopped (or killed) broker again on its ports and data; returns once it answers."""
        if self.is_running():
            return
        if self.zookeeper is not None:
            raise BrokerError("a ZooKeeper-mode broker is not started again (its ZooKeeper stopped with it)")
        self.process = spawn(self.plan, detach=False)
        self._stopped = False
        track(self)
        wait_ready(self.plan, self.process, ready_timeout_ms)

    def restart(self, ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS) -> None:
        """A broker restart: controlled shutdown, then the same broker on the same data (its groups
        are loaded back from __consumer_offsets)."""
        self.stop(remove_data=False)
        self.start_again(ready_timeout_ms)

    def __repr__(self) -> str:
        return f"Broker(kafka_version={self.kafka_version!r}, bootstrap={self.bootstrap!r}, pid={self.pid})"


def spawn(plan: LaunchPlan, detach: bool) -> subprocess.Popen[bytes]:
    """The broker process of `plan`, logging to its log file; `detach`: it outlives this
    interpreter (own session, no death signal)."""
    return _spawn_logged(plan.broker_command(), plan.log_path, plan.work_dir, detach)


def _spawn_logged(
    command: list[str], log_path: Path, work_dir: Path, detach: bool
) -> subprocess.Popen[bytes]:
    """`command` in `work_dir` with its output appended to `log_path` (a broker or its ZooKeeper)."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=work_dir,
            start_new_session=detach,
            preexec_fn=child_preexec(detach),
        )


def track(broker: Broker) -> None:
    """Stop `broker` at interpreter exit if nothing else has."""
    _LIVE.add(broker)


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


def run_format(plan: LaunchPlan) -> None:
    """StorageTool format, with the version's class archive (harness.class_archive)."""
    command = plan.format_command()
    archive = command_archive(command)
    try:
        result = subprocess.run(with_archive(command, archive), capture_output=True, text=True, timeout=120)
    except BaseException:
        archive.discard()
        raise
    if result.returncode == 0:
        archive.keep()
    else:
        archive.discard()
        if _NO_JVM in result.stdout + result.stderr:  # a JDK without the archive options (before 13)
            result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        output = result.stdout + result.stderr
        causes = [line for line in output.splitlines() if _CAUSE.search(line)][:6]
        raise BrokerError(
            f"StorageTool format failed for Kafka {plan.kafka_version} (exit {result.returncode}):\n"
            + "\n".join(causes)
            + f"\n--- output tail ---\n{output[-2000:]}"
        )


_NO_JVM = "Could not create the Java Virtual Machine"
_CAUSE = re.compile(r"Exception|ERROR|Caused by|error:", re.IGNORECASE)


def wait_ready(plan: LaunchPlan, process: subprocess.Popen[bytes], timeout_ms: int) -> None:
    def check_alive() -> None:
        if process.poll() is not None:
            raise BrokerError(
                f"Kafka {plan.kafka_version} exited with {process.returncode} before it was ready; "
                f"log {plan.log_path}:\n{_log_tail(plan.log_path)}"
            )

    try:
        wait_answering("127.0.0.1", plan.port, timeout_ms, check_alive, poll_s=0.2)
    except NotAnswering as exc:
        raise BrokerError(
            f"Kafka {plan.kafka_version} did not answer ApiVersions on {plan.bootstrap} "
            f"within {timeout_ms} ms (last error: {exc.last_error}); "
            f"log {plan.log_path}:\n{_log_tail(plan.log_path)}"
        ) from None


def _start_zookeeper(plan: LaunchPlan, detach: bool) -> subprocess.Popen[bytes]:
    """Start ZooKeeper and wait until its client port accepts connections."""
    process = _spawn_logged(plan.zookeeper_command(), plan.zookeeper_log_path, plan.work_dir, detach)
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


def port_clash(plan: LaunchPlan) -> bool:
    """Whether the node's log says it could not bind a planned port: another process took it
    between our probe and Kafka's bind (the log of a node that failed to start is short; the
    bind error comes early, before its shutdown's hundreds of lines)."""
    try:
        return "Address already in use" in plan.log_path.read_text(errors="replace")
    except OSError:
        return False


def start_broker(
    spec: BrokerSpec,
    *,
    work_dir: Path | None = None,
    ready_timeout_ms: int = DEFAULT_READY_TIMEOUT_MS,
    detach: bool = False,
    progress: ProgressCallback | None = None,
    port: int | None = None,
) -> Broker:
    """Start the broker `spec` asks for and return once it answers ApiVersions.

    `detach=True` leaves the broker running after this interpreter exits (the CLI's `start`).
    """
    for attempt in range(PORT_ATTEMPTS):
        plan = plan_broker(spec, work_dir=work_dir, progress=progress, port=port)
        owns_work_dir = work_dir is None
        plan.write_files()
        zookeeper = None
        try:
            if plan.line.mode is Mode.KRAFT:
                run_format(plan)
            else:
                zookeeper = _start_zookeeper(plan, detach)
        except BaseException:
            if owns_work_dir:
                shutil.rmtree(plan.work_dir, ignore_errors=True)
            raise
        process = spawn(plan, detach)
        broker = Broker(
            plan=plan, process=process, owns_work_dir=owns_work_dir and not detach, zookeeper=zookeeper
        )
        if not detach:
            track(broker)
        try:
            wait_ready(plan, process, ready_timeout_ms)
        except BrokerError:
            clash = port_clash(plan)
            broker.stop(remove_data=not clash or attempt == PORT_ATTEMPTS - 1)
            if clash and attempt < PORT_ATTEMPTS - 1:
                if owns_work_dir:
                    shutil.rmtree(plan.work_dir, ignore_errors=True)
                continue  # another process took a port between our probe and the bind: retry
            raise
        return broker
    raise AssertionError("unreachable")


# --- detached brokers: a state file per version under the run dir --------------------------------


def state_path(kafka_version: str) -> Path:
    return paths.run_dir() / f"broker-{kafka_version}.json"


def write_state(state: BrokerState) -> Path:
    return paths.write_atomically(state_path(state.kafka_version), json.dumps(asdict(state), indent=2) + "\n")


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


class _Versioned(Protocol):
    @property
    def kafka_version(self) -> str: ...


_State = TypeVar("_State", bound=_Versioned)


def read_states(pattern: str, parse: Callable[[str], _State], kafka_version: str | None) -> list[_State]:
    """The state files under the run dir matching `pattern` that parse (a damaged one is skipped),
    of `kafka_version` (of any when None): for detached brokers and detached clusters."""
    found = []
    for path in sorted(paths.run_dir().glob(pattern)):
        try:
            state = parse(path.read_text())
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if kafka_version is None or state.kafka_version == kafka_version:
            found.append(state)
    return found


def find_running(kafka_version: str | None = None) -> list[BrokerState]:
    """Brokers started detached (by `group-replay broker start`) whose process is still alive."""
    return [s for s in read_states("broker-*.json", BrokerState.from_json, kafka_version) if pid_alive(s.pid)]


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
