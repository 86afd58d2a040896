"""Detached brokers a test starts through the CLI (`group-replay broker start`), stopped even when
the test run is killed.

`broker start` detaches its brokers on purpose (they outlive the command; no PR_SET_PDEATHSIG),
so a test that starts one stops it in a `finally`. A SIGKILLed pytest runs no `finally`: its
brokers were seen alive with PPID 1 afterwards. `stopped_even_if_killed(state_dir)` adds a
watchdog in its own session that waits for the test process to end and then runs `broker stop`
on that state dir; when the test ends normally the context stops the brokers and the watchdog.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

_WATCHDOG = """
import os, subprocess, sys, time
pid = int(sys.argv[1])
while True:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        break
    time.sleep(1)
subprocess.run(sys.argv[2:], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
               stderr=subprocess.DEVNULL, timeout=300)
"""


def stop_command(state_dir: Path) -> list[str]:
    return [sys.executable, "-m", "group_replay", "broker", "stop", "--state-dir", str(state_dir)]


@contextmanager
def run_when_killed(command: Sequence[str]) -> Iterator[None]:
    """`command` runs if this process dies inside the block (a watchdog in its own session);
    a normal exit from the block ends the watchdog without running it."""
    watchdog = subprocess.Popen(
        [sys.executable, "-c", _WATCHDOG, str(os.getpid()), *command],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield
    finally:
        watchdog.kill()
        watchdog.wait()


@contextmanager
def stopped_even_if_killed(state_dir: Path) -> Iterator[None]:
    """Every broker and cluster started from `state_dir` is stopped when the block ends, or by
    the watchdog if the test process is killed inside it."""
    with run_when_killed(stop_command(state_dir)):
        try:
            yield
        finally:
            subprocess.run(stop_command(state_dir), capture_output=True, timeout=120)
