"""Class-data sharing for the short-lived JVMs the harness and the tests start (JDK 13+ dynamic
archives, JEP 350).

A JVM that starts, does one thing and exits (the KRaft format step `kafka.tools.StorageTool`,
Kafka's `kafka-consumer-groups` in tests/support/admin_tool.py, the Java consumers of
demo.clients and tests/java) loads the same few thousand classes from the same jars on every
start. The first run of a command (JDK build + every jar + main class: `class_archive`'s key)
dumps the classes it loaded (`-XX:ArchiveClassesAtExit`) into a file of its own; after a clean
exit that file is moved into place (`os.replace`: no JVM ever maps a partial file, and first runs
in different processes each write their own, the last one winning). Within one process one run
of a key dumps at a time; the others meanwhile run without an archive. Later runs map it
(`-XX:SharedArchiveFile`): StorageTool 2.1-3.7 -> 1.0-1.6 s wall (load 7). A consumer, which
runs until stopped, never dumps: `start_jvm` has a brokerless run of the same command write the
archive in the background. A JVM that cannot use an archive (another JDK build, changed jars)
warns on stderr and runs without it; one that does not know the options (before JDK 13) fails
to start (`run_format` runs it again without them). A class path holding a directory gets no
archive (a JVM refuses to dump one: "Cannot have non-empty directory in paths"), so
demo.clients jars the classes it compiles.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness import paths
from harness.owned import Owned

# CDS's warnings (a mismatched archive; classes a dump skips) on stderr, not stdout: the
# consumers' stdout is their JSON lines and the tools' is what the tests compare.
_LOG_TO_STDERR = ("-Xlog:cds*=off", "-Xlog:cds*=warning:stderr")
_STALE_DUMP_S = 3600  # a dump left by a process that exited before its JVM did
_dumping: set[Path] = set()  # archives a JVM of this process is dumping
_dumping_lock = threading.Lock()


@dataclass(frozen=True)
class ClassArchive:
    """The archive a JVM command maps (`mapped`), or dumps into `dump_path` to move to `path`;
    neither when no archive can serve it (another run of this process is dumping it)."""

    path: Path | None
    dump_path: Path | None  # set when this run writes the archive
    mapped: bool = False

    def options(self) -> list[str]:
        if self.mapped:
            return [*_LOG_TO_STDERR, f"-XX:SharedArchiveFile={self.path}"]
        if self.dump_path is not None:
            return [*_LOG_TO_STDERR, f"-XX:ArchiveClassesAtExit={self.dump_path}"]
        return []

    def keep(self) -> None:
        """After the JVM exited cleanly: its dump becomes the archive."""
        if self.dump_path is not None and self.path is not None and self.dump_path.is_file():
            os.replace(self.dump_path, self.path)
        self._release()

    def discard(self) -> None:
        if self.dump_path is not None:
            self.dump_path.unlink(missing_ok=True)
        self._release()

    def settle(self, returncode: int) -> None:
        """Keep the dump of a JVM that exited by itself (whatever its code: a JVM dumps on any
        `System.exit`), discard one a signal killed (its dump may be partial)."""
        if returncode >= 0:
            self.keep()
        else:
            self.discard()

    def _release(self) -> None:
        if self.dump_path is not None and self.path is not None:
            with _dumping_lock:
                _dumping.discard(self.path)


def class_archive(java: str, classpath: Path | str, main_class: str) -> ClassArchive:
    """The archive of `main_class` run by `java` on `classpath` (a directory of jars, or a `-cp`
    value: jars and `DIR/*`), keyed by the JDK binary and every jar's path, size and mtime: an
    archive only maps on the JDK build and class path that wrote it."""
    jars = _jars(classpath)
    if jars is None:
        return ClassArchive(None, None)
    binary = Path(java).resolve()
    stat = binary.stat()
    key = "\n".join([f"{binary}:{stat.st_size}:{stat.st_mtime_ns}", main_class, *jars])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    directory = paths.cache_root() / "class-archives"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{main_class.rsplit('.', 1)[-1]}-{digest}.jsa"
    if path.is_file():
        return ClassArchive(path, None, mapped=True)
    with _dumping_lock:
        if path in _dumping:
            return ClassArchive(None, None)
        _dumping.add(path)
    _remove_stale_dumps(directory)
    return ClassArchive(path, directory / f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}.dump")


def _jars(classpath: Path | str) -> list[str] | None:
    """Each jar of `classpath` as `path:size:mtime`; None when it holds a directory of classes."""
    entries = [f"{classpath}/*"] if isinstance(classpath, Path) else classpath.split(os.pathsep)
    jars: list[str] = []
    for entry in entries:
        if entry.endswith("/*"):
            files = sorted(Path(entry[:-2]).resolve().glob("*.jar"))
        elif Path(entry).is_dir():
            return None
        else:
            files = [Path(entry).resolve()]
        for jar in files:
            stat = jar.stat()
            jars.append(f"{jar}:{stat.st_size}:{stat.st_mtime_ns}")
    return jars


def _remove_stale_dumps(directory: Path) -> None:
    for dump in directory.glob("*.dump"):
        try:
            if time.time() - dump.stat().st_mtime > _STALE_DUMP_S:
                dump.unlink()
        except FileNotFoundError:
            pass


def with_archive(command: list[str], archive: ClassArchive) -> list[str]:
    """`command` (`java OPTIONS -cp ... MAIN ...`) with the archive's option before `-cp`."""
    at = command.index("-cp")
    return [*command[:at], *archive.options(), *command[at:]]


def command_archive(command: Sequence[str]) -> ClassArchive:
    """The archive of `command` (`java OPTIONS -cp CLASSPATH MAIN ...`)."""
    at = list(command).index("-cp")
    return class_archive(command[0], command[at + 1], command[at + 2])


def start_jvm(command: list[str], *, train_args: Sequence[str], **popen: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen(command, **popen)` for a JVM that runs until its owner stops it (the Java
    consumers), mapping its class archive. Such a run never dumps the archive itself: a dump
    makes its JVM's exit seconds slower, and a test that bounces a static member within its
    session timeout would see it expire. When the archive is missing, this run goes without it
    and a second JVM in the background writes it: the same options, class path and main class
    with `train_args`, arguments with which the main class does its usual start without a broker
    (an unreachable bootstrap) and exits by itself or when its stdin closes (after `TRAIN_S`)."""
    archive = command_archive(command)
    if archive.mapped:
        return subprocess.Popen(with_archive(command, archive), **popen)
    if archive.dump_path is not None:
        main = command.index("-cp") + 2
        trainer = with_archive([*command[: main + 1], *train_args], archive)
        threading.Thread(target=_train, args=(trainer, archive), daemon=True).start()
    return subprocess.Popen(command, **popen)


# The trainer waits TRAIN_DELAY_S and runs at a lower priority: started with the run it serves,
# it took CPU from that run's start on a loaded 2-core machine (a first consumer start 1.7-2.1 ->
# 7.7-9.8 s at load 14-20). Its stdin closes TRAIN_S after it starts.
TRAIN_DELAY_S = 5.0
TRAIN_NICE = 10
TRAIN_S = 5.0
_TRAINERS: Owned[subprocess.Popen[bytes]] = Owned(lambda trainer: trainer.kill())  # none outlives us


def _train(command: list[str], archive: ClassArchive) -> None:
    time.sleep(TRAIN_DELAY_S)
    try:
        trainer = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.nice(TRAIN_NICE),
        )
    except OSError:
        archive.discard()
        return
    _TRAINERS.add(trainer)
    try:
        trainer.wait(timeout=TRAIN_S)
    except subprocess.TimeoutExpired:
        assert trainer.stdin is not None
        trainer.stdin.close()
    try:
        archive.settle(trainer.wait(timeout=300))
    except subprocess.TimeoutExpired:
        trainer.kill()
        archive.settle(trainer.wait())
    _TRAINERS.discard(trainer)
