"""Class-data sharing for the KRaft format step (JDK 13+ dynamic archives, JEP 350).

Every KRaft broker and cluster node is formatted by `kafka.tools.StorageTool`: a JVM that loads
the same few thousand classes from the Kafka jars and exits. The first format of a Kafka version
on a JDK dumps the classes it loaded (`-XX:ArchiveClassesAtExit`) into a file of its own; after a
clean exit that file is moved into place (`os.replace`: first runs going together each write
their own and the last one wins, and no JVM ever maps a partial file). Later formats map it
(`-XX:SharedArchiveFile`): 2.1-3.7 s -> 1.0-1.6 s wall and 1.1 -> 0.6 s CPU a format on the
shared 2-core machine (load 7). A JVM that cannot use an archive (another JDK build, changed
jars) warns and runs without it; one that does not know the options (before JDK 13) is run again
without them (`run_format`). tests/support/admin_tool.py maps one for Kafka's
`kafka-consumer-groups` tool the same way.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from harness import paths


@dataclass(frozen=True)
class ClassArchive:
    """The archive a JVM command maps (`path`), or dumps into `dump_path` to move there."""

    path: Path
    dump_path: Path | None  # set when the archive does not exist yet

    def options(self) -> list[str]:
        if self.dump_path is None:
            return [f"-XX:SharedArchiveFile={self.path}"]
        return [f"-XX:ArchiveClassesAtExit={self.dump_path}"]

    def keep(self) -> None:
        """After the JVM exited cleanly: its dump becomes the archive."""
        if self.dump_path is not None and self.dump_path.is_file():
            os.replace(self.dump_path, self.path)

    def discard(self) -> None:
        if self.dump_path is not None:
            self.dump_path.unlink(missing_ok=True)


def class_archive(java: str, libs: Path, main_class: str) -> ClassArchive:
    """The archive of `main_class` run by `java` from the jars in `libs` (keyed by all three: an
    archive only maps on the JDK build and class path that wrote it)."""
    binary = Path(java).resolve()
    stat = binary.stat()
    key = f"{binary}:{stat.st_size}:{stat.st_mtime_ns}:{libs.resolve()}:{main_class}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    directory = paths.cache_root() / "class-archives"
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{main_class.rsplit('.', 1)[-1]}-{digest}.jsa"
    if path.is_file():
        return ClassArchive(path, None)
    return ClassArchive(path, directory / f"{path.name}.{os.getpid()}.{os.urandom(4).hex()}.dump")


def with_archive(command: list[str], archive: ClassArchive) -> list[str]:
    """`command` (`java OPTIONS -cp ... MAIN ...`) with the archive's option before `-cp`."""
    at = command.index("-cp")
    return [*command[:at], *archive.options(), *command[at:]]
