"""Fetch jar sets from Maven Central with `mvn dependency:copy-dependencies`, once per machine.

A pom template per Kafka line (harness/poms/) is filled in and resolved into
`<cache>/kafka/<version>/libs` (or `<cache>/clients/<version>/libs`). A file lock makes a second
process wait for the first download instead of racing it; a marker file written last means a
half-copied directory is never mistaken for a complete one.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.resources import files
from pathlib import Path

from harness import paths
from harness.lines import line_for

DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:3.6.1"
COMPLETE_MARKER = ".complete"

# Called with each artifact Maven reports downloading (a short name), or None when done.
ProgressCallback = Callable[[str | None], None]


class MavenError(RuntimeError):
    """Maven is missing or could not resolve the jars; the message carries Maven's own errors."""


def mvn_path() -> str | None:
    return shutil.which("mvn")


def java_path() -> str | None:
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").is_file():
        return str(Path(java_home) / "bin" / "java")
    return shutil.which("java")


def missing_tools() -> str | None:
    """Why brokers cannot run here (no java / no mvn), or None if they can."""
    missing = [name for name, found in (("java", java_path()), ("mvn", mvn_path())) if not found]
    return f"{' and '.join(missing)} not found on PATH" if missing else None


def pom_text(template: str, kafka_version: str, scala_version: str = "2.13") -> str:
    text = files("harness").joinpath("poms", template).read_text()
    return text.replace("@KAFKA_VERSION@", kafka_version).replace("@SCALA_VERSION@", scala_version)


@contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


_DOWNLOADED = re.compile(r"Downloaded from \S+: \S+/([^/\s]+\.(?:jar|pom))")


def _run_maven(pom: Path, out_dir: Path, progress: ProgressCallback | None) -> None:
    mvn = mvn_path()
    if mvn is None:
        raise MavenError("mvn not found on PATH: install Maven (Debian: apt-get install maven)")
    cmd = [
        mvn,
        "-B",
        "-f",
        str(pom),
        f"{DEPENDENCY_PLUGIN}:copy-dependencies",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={out_dir}",
    ]
    repo = paths.maven_repo()
    if repo is not None:
        cmd.append(f"-Dmaven.repo.local={repo}")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=pom.parent)
    assert proc.stdout is not None
    tail: list[str] = []
    for line in proc.stdout:
        tail = [*tail[-40:], line.rstrip()]
        match = _DOWNLOADED.search(line)
        if match and progress is not None:
            progress(match.group(1))
    code = proc.wait()
    if progress is not None:
        progress(None)
    if code != 0:
        errors = [line for line in tail if "[ERROR]" in line] or tail
        raise MavenError(f"mvn exited {code} resolving {pom}:\n" + "\n".join(errors[:12]))


def fetch_jars(
    target: Path,
    template: str,
    kafka_version: str,
    scala_version: str = "2.13",
    progress: ProgressCallback | None = None,
) -> Path:
    """`target/libs` holding the runtime closure of the filled-in pom; downloads at most once."""
    libs = target / "libs"
    if (libs / COMPLETE_MARKER).exists():
        return libs
    with _locked(target.with_name(target.name + ".lock")):
        if (libs / COMPLETE_MARKER).exists():  # another process finished while we waited
            return libs
        target.mkdir(parents=True, exist_ok=True)
        pom = target / "pom.xml"
        pom.write_text(pom_text(template, kafka_version, scala_version))
        staging = target / f"libs.partial-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        _run_maven(pom, staging, progress)
        if not any(staging.glob("*.jar")):
            raise MavenError(f"mvn copied no jars for {kafka_version} into {staging}")
        (staging / COMPLETE_MARKER).write_text(kafka_version + "\n")
        shutil.rmtree(libs, ignore_errors=True)
        staging.rename(libs)
    return libs


def broker_libs(kafka_version: str, progress: ProgressCallback | None = None) -> Path:
    """The broker's classpath directory for `kafka_version` (kafka_2.1x + its log binding)."""
    line = line_for(kafka_version)
    return fetch_jars(
        paths.kafka_dir(kafka_version), line.pom_template, kafka_version, line.scala_version, progress
    )


def client_libs(kafka_version: str, progress: ProgressCallback | None = None) -> Path:
    """kafka-clients `kafka_version` + slf4j-simple, for the Java consumer."""
    return fetch_jars(paths.clients_dir(kafka_version), "kafka-clients.xml", kafka_version, progress=progress)


def tools_libs(kafka_version: str, progress: ProgressCallback | None = None) -> Path:
    """kafka-tools `kafka_version` (kafka-consumer-groups and the other command-line tools)."""
    target = paths.cache_root() / "tools" / kafka_version
    return fetch_jars(target, "kafka-tools.xml", kafka_version, progress=progress)
