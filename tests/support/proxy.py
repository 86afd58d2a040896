"""`group-replay proxy` as a subprocess, the way a user runs it: one starter for every test (and
bench) that needs the command line itself rather than `proxy.server.BackgroundProxy`.

It waits for the "proxy listening on HOST:PORT" line, fails with the proxy's stderr if the
process exits (or says nothing) first, drains stdout and stderr on threads so a chatty proxy
(`--log-level DEBUG`) never blocks on a full pipe, and at `stop` fails if the proxy printed a
traceback.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[2]
LISTENING = re.compile(r"proxy listening on (\S+:\d+)")
START_TIMEOUT_S = 120  # a loaded machine imports kio slowly; the usual start is about a second


@dataclass(frozen=True)
class ProxyOutput:
    """What the stopped proxy printed, all of it, and how it exited."""

    stdout: str
    stderr: str
    returncode: int

    @property
    def printed(self) -> str:
        """stdout then stderr: every line the proxy printed."""
        return self.stdout + self.stderr


def _drain(stream: IO[str], lines: list[str], seen: queue.Queue[str] | None) -> None:
    for line in stream:
        lines.append(line)
        if seen is not None:
            seen.put(line)
    if seen is not None:
        seen.put("")  # end of output


class ProxyProcess:
    """`python -m group_replay proxy --listen LISTEN ARGS...` (no `--listen` when `listen` is
    None: a config file gives it). `bootstrap` is the address it printed; `first_line` that line.
    stderr goes to `stderr_path` when given (a long soak's log), else it is kept in memory."""

    def __init__(
        self,
        *args: str,
        listen: str | None = "127.0.0.1:0",
        cwd: Path = ROOT,
        stderr_path: Path | None = None,
    ) -> None:
        command = [sys.executable, "-m", "group_replay", "proxy"]
        if listen is not None:
            command += ["--listen", listen]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
        self._stderr_file = stderr_path.open("w") if stderr_path is not None else None
        self.process = subprocess.Popen(
            [*command, *args],
            stdout=subprocess.PIPE,
            stderr=self._stderr_file or subprocess.PIPE,
            text=True,
            cwd=cwd,
            env=env,
        )
        self.stderr_path = stderr_path
        self._stdout: list[str] = []
        self._stderr: list[str] = []
        seen: queue.Queue[str] = queue.Queue()
        assert self.process.stdout is not None
        drains: list[tuple[IO[str], list[str], queue.Queue[str] | None]] = [
            (self.process.stdout, self._stdout, seen)
        ]
        if self.process.stderr is not None:
            drains.append((self.process.stderr, self._stderr, None))
        self._threads = [threading.Thread(target=_drain, args=drain, daemon=True) for drain in drains]
        for thread in self._threads:
            thread.start()
        self.first_line = self._wait_listening(seen)
        found = LISTENING.search(self.first_line)
        assert found is not None
        self.bootstrap = found.group(1)

    def _wait_listening(self, seen: queue.Queue[str]) -> str:
        try:
            line = seen.get(timeout=START_TIMEOUT_S)
        except queue.Empty:
            line = ""
        if not LISTENING.search(line):
            self.process.kill()
            self.process.wait(timeout=60)
            self._join()
            raise AssertionError(f"proxy did not start: {line!r}\n{self._stderr_text()[-3000:]}")
        return line

    def _join(self) -> None:
        for thread in self._threads:
            thread.join(timeout=60)
        if self._stderr_file is not None:
            self._stderr_file.close()

    def _stderr_text(self) -> str:
        if self.stderr_path is not None:
            return self.stderr_path.read_text(errors="replace")
        return "".join(self._stderr)

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def send_signal(self, sig: signal.Signals) -> None:
        self.process.send_signal(sig)

    def stop(self, sig: signal.Signals = signal.SIGTERM, timeout_s: float = 60) -> ProxyOutput:
        """Sends `sig` (SIGTERM or SIGINT: the proxy prints its summary and exits), kills it after
        `timeout_s`; fails if it printed a traceback."""
        if self.process.poll() is None:
            self.process.send_signal(sig)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=60)
        self._join()
        output = ProxyOutput("".join(self._stdout), self._stderr_text(), self.process.returncode)
        assert "Traceback" not in output.stderr, output.stderr[-3000:]
        return output
