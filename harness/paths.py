"""Where the harness keeps downloaded jars, compiled classes and the state of detached brokers.

One root so a CI cache, a developer's machine and a cold benchmark can each point it somewhere
else (`GROUP_REPLAY_CACHE`); everything below it is safe to delete.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "GROUP_REPLAY_CACHE"
MAVEN_REPO_ENV = "GROUP_REPLAY_MAVEN_REPO"
RUN_DIR_ENV = "GROUP_REPLAY_RUN_DIR"


def cache_root() -> Path:
    """`$GROUP_REPLAY_CACHE`, else `$XDG_CACHE_HOME/group-replay`, else `~/.cache/group-replay`."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "group-replay"


def kafka_dir(kafka_version: str) -> Path:
    return cache_root() / "kafka" / kafka_version


def clients_dir(kafka_version: str) -> Path:
    return cache_root() / "clients" / kafka_version


def run_dir() -> Path:
    """State files of brokers started detached by `group-replay broker start` (`GROUP_REPLAY_RUN_DIR`)."""
    explicit = os.environ.get(RUN_DIR_ENV)
    return Path(explicit).expanduser() if explicit else cache_root() / "run"


def write_atomically(path: Path, text: str) -> Path:
    """`text` into `path` through a temporary file and a rename: a reader never sees half a state file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path


def maven_repo() -> Path | None:
    """A Maven local repository to use instead of ~/.m2 (a cold benchmark sets it to an empty dir)."""
    explicit = os.environ.get(MAVEN_REPO_ENV)
    return Path(explicit).expanduser() if explicit else None
