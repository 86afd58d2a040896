"""A Docker-API engine for testcontainers on a machine with no registry and no running daemon.

If `DOCKER_HOST` already answers, it is used as is. Otherwise `podman system service` is started
on a private socket with a containers.conf that this machine needs (see
/work/shared/testcontainers-without-registry.md): ulimits no higher than the hard limits (no
CAP_SYS_RESOURCE), runtime runc (crun fails on hybrid cgroups). testcontainers is told to skip
Ryuk (its image cannot be pulled) and to use the docker_host connection mode (/.dockerenv makes
it guess wrongly otherwise).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import resource
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from harness import paths

TESTCONTAINERS_ENV = {
    "TESTCONTAINERS_RYUK_DISABLED": "true",
    "TESTCONTAINERS_CONNECTION_MODE": "docker_host",
}
DEFAULT_START_TIMEOUT_MS = 30_000


class EngineUnavailable(RuntimeError):
    """No container engine could be reached or started; the message is the engine's own error."""


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, socket_path: str, timeout_s: float) -> None:
        super().__init__("localhost", timeout=timeout_s)
        self.socket_path = socket_path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


def ping(docker_host: str, timeout_ms: int = 2000) -> str | None:
    """None if the engine at `docker_host` answers /_ping with OK, else the error."""
    if not docker_host.startswith("unix://"):
        return f"only unix:// engines are probed, got {docker_host}"
    connection = _UnixHTTPConnection(docker_host.removeprefix("unix://"), timeout_ms / 1000)
    try:
        connection.request("GET", "/_ping")
        response = connection.getresponse()
        body = response.read().decode(errors="replace")
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        connection.close()
    return (
        None if response.status == 200 and body.strip() == "OK" else f"HTTP {response.status}: {body[:200]}"
    )


def containers_conf_text() -> str:
    hard_nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    nofile = 1048576 if hard_nofile == resource.RLIM_INFINITY else hard_nofile
    return (
        "[containers]\n"
        f'default_ulimits = ["nofile={nofile}:{nofile}", "nproc=32768:32768"]\n'
        "[engine]\n"
        'runtime = "runc"\n'
    )


@dataclass
class Engine:
    """A reachable engine; `stop()` ends the podman service only if we started it."""

    docker_host: str
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None
    _saved_env: dict[str, str | None] = field(default_factory=dict)

    @property
    def started_here(self) -> bool:
        return self.process is not None

    def export_env(self) -> None:
        """Point testcontainers (env and its already-imported config) at this engine."""
        wanted = {"DOCKER_HOST": self.docker_host, **TESTCONTAINERS_ENV}
        for key, value in wanted.items():
            self._saved_env.setdefault(key, os.environ.get(key))
            os.environ[key] = value
        with contextlib.suppress(ImportError):
            from testcontainers.core.config import ConnectionMode, testcontainers_config

            testcontainers_config.ryuk_disabled = True
            testcontainers_config.connection_mode_override = ConnectionMode.docker_host

    def restore_env(self) -> None:
        for key, value in self._saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        self._saved_env.clear()

    def stop(self, timeout_ms: int = 10_000) -> None:
        self.restore_env()
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_ms / 1000)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def _die_with_parent() -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)


def start_engine(timeout_ms: int = DEFAULT_START_TIMEOUT_MS) -> Engine:
    """Use `DOCKER_HOST` if it answers; else start a podman API service. Raises EngineUnavailable."""
    existing = os.environ.get("DOCKER_HOST")
    if existing and ping(existing) is None:
        return Engine(existing)
    podman = shutil.which("podman")
    if podman is None:
        detail = f"DOCKER_HOST={existing} does not answer ({ping(existing)}); " if existing else ""
        raise EngineUnavailable(f"{detail}podman not found on PATH (Debian: apt-get install podman runc)")
    if shutil.which("runc") is None:
        raise EngineUnavailable(
            "runc not found on PATH (podman's default crun fails on this kernel's cgroups)"
        )
    base = paths.cache_root() / "podman"
    base.mkdir(parents=True, exist_ok=True)
    conf = base / "containers.conf"
    conf.write_text(containers_conf_text())
    sock = Path(f"/tmp/group-replay-podman-{os.getpid()}.sock")
    sock.unlink(missing_ok=True)
    log_path = base / f"service-{os.getpid()}.log"
    env = {**os.environ, "CONTAINERS_CONF": str(conf)}
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [podman, "system", "service", "--time=0", f"unix://{sock}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            preexec_fn=_die_with_parent,
        )
    engine = Engine(f"unix://{sock}", process, log_path)
    deadline = time.monotonic() + timeout_ms / 1000
    error: str | None = "not started"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            break
        error = ping(engine.docker_host) if sock.exists() else "socket not created yet"
        if error is None:
            return engine
        time.sleep(0.2)
    engine.stop()
    output = log_path.read_text(errors="replace")[-2000:]
    raise EngineUnavailable(f"podman system service did not answer ({error}); its output:\n{output}")
