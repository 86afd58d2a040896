"""harness.class_archive: the class-data-sharing archives of the short-lived JVMs (the format step,
Kafka's tools, the Java consumers): keyed by every jar of the class path, one dump at a time per
process, never a dump by a consumer that runs until stopped."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import class_archive as archives


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Archives under `tmp_path` (only class_archive's cache root: the jars stay where they are)."""
    monkeypatch.setattr(archives, "paths", SimpleNamespace(cache_root=lambda: tmp_path))
    return tmp_path / "class-archives"


def _jars(directory: Path, *names: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_bytes(b"PK\x05\x06" + bytes(18))
    return directory


def test_the_key_is_every_jar_of_the_class_path(cache: Path, tmp_path: Path) -> None:
    java = shutil.which("sh") or "/bin/sh"  # any binary: only its identity is keyed
    libs = _jars(tmp_path / "libs", "a.jar", "b.jar")
    first = archives.class_archive(java, f"{libs}/*", "Main")
    first.discard()
    assert first.path is not None and first.path.parent == cache
    as_directory = archives.class_archive(java, libs, "Main")
    as_directory.discard()
    assert as_directory.path == first.path  # a directory is DIR/*
    again = archives.class_archive(java, f"{libs}/*", "Main")
    again.discard()
    assert again.path == first.path
    other_main = archives.class_archive(java, f"{libs}/*", "Other")
    other_main.discard()
    os.utime(libs / "b.jar", ns=(1, 1))  # a jar replaced in place
    touched = archives.class_archive(java, f"{libs}/*", "Main")
    touched.discard()
    _jars(libs, "c.jar")
    added = archives.class_archive(java, f"{libs}/*", "Main")
    added.discard()
    assert len({first.path, other_main.path, touched.path, added.path}) == 4


def test_a_directory_of_classes_gets_no_archive(cache: Path, tmp_path: Path) -> None:
    """A JVM refuses to start with -XX:ArchiveClassesAtExit and a non-empty directory on its
    class path, so such a command runs as it is."""
    libs = _jars(tmp_path / "libs", "a.jar")
    classes = tmp_path / "classes"
    classes.mkdir()
    (classes / "Main.class").write_bytes(b"\xca\xfe\xba\xbe")
    archive = archives.class_archive("/bin/sh", f"{classes}:{libs}/*", "Main")
    assert archive.options() == []
    command = ["java", "-cp", f"{classes}:{libs}/*", "Main"]
    assert archives.with_archive(command, archive) == command


def test_one_dump_at_a_time_in_a_process_then_the_archive_maps(cache: Path, tmp_path: Path) -> None:
    libs = _jars(tmp_path / "libs", "a.jar")
    dumping = archives.class_archive("/bin/sh", libs, "Main")
    assert dumping.dump_path is not None and "-XX:ArchiveClassesAtExit" in " ".join(dumping.options())
    meanwhile = archives.class_archive("/bin/sh", libs, "Main")
    assert meanwhile.options() == [] and meanwhile.dump_path is None
    dumping.dump_path.write_bytes(b"whole")
    dumping.settle(0)
    assert not dumping.dump_path.exists() and dumping.path is not None
    assert dumping.path.read_bytes() == b"whole"
    mapped = archives.class_archive("/bin/sh", libs, "Main")
    assert mapped.mapped and mapped.options()[-1] == f"-XX:SharedArchiveFile={dumping.path}"
    assert all(option.startswith("-Xlog:cds") for option in mapped.options()[:-1])  # warnings on stderr


def test_a_killed_dump_is_discarded_and_the_next_run_dumps(cache: Path, tmp_path: Path) -> None:
    libs = _jars(tmp_path / "libs", "a.jar")
    killed = archives.class_archive("/bin/sh", libs, "Main")
    assert killed.dump_path is not None
    killed.dump_path.write_bytes(b"partial")
    killed.settle(-9)
    assert list(cache.iterdir()) == []
    assert archives.class_archive("/bin/sh", libs, "Main").dump_path is not None


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_consumer_maps_the_archive_its_brokerless_trainer_wrote(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """start_jvm runs a Java consumer without an archive and has a second JVM (the same command,
    an unreachable bootstrap) write one; the consumer's own command then maps it: with -Xshare:on
    a JVM that cannot map its archive exits instead of running without."""
    if shutil.which("javac") is None:
        pytest.skip("no JDK on PATH")
    monkeypatch.setattr(archives, "TRAIN_DELAY_S", 0.0)  # the trainer at once and at full priority
    monkeypatch.setattr(archives, "TRAIN_NICE", 0)
    from demo.clients import GROUP_CONSUMER_TRAINING, compiled_java_consumer, java_client_command

    classes = compiled_java_consumer()
    args = ("127.0.0.1:1", "g", "-", "t", "6000", "500", "c")  # exits after half a second
    command = java_client_command("GroupConsumer", classes, "3.9.2", *args)
    first = archives.start_jvm(
        command, train_args=GROUP_CONSUMER_TRAINING, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert "-XX:SharedArchiveFile" not in " ".join(first.args) and "-XX:ArchiveClassesAtExit" not in " ".join(
        first.args
    )
    assert first.wait(timeout=120) == 0
    deadline = time.monotonic() + 180
    while not (written := list(cache.glob("GroupConsumer-*.jsa"))) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(written) == 1 and not list(cache.glob("*.dump"))
    mapped = archives.command_archive(command)
    assert mapped.mapped and mapped.path == written[0]
    strict = archives.with_archive([command[0], "-Xshare:on", *command[1:]], mapped)
    done = subprocess.run(strict, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"event": "started"' in done.stdout and "[cds" not in done.stdout
