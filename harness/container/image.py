"""A real Apache Kafka image built locally, with no registry: `FROM scratch` plus files we have.

Contents: a Java runtime made by `jlink` from the host's JDK (only the modules a broker uses),
the shared libraries it links against (found with ldd), a static busybox for /bin/sh, and the
same Maven Central jars the process provider runs. The tag carries a hash of all inputs, so a
changed JDK or jar set builds a new image and an unchanged one is reused.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from harness.maven import ProgressCallback, broker_libs, java_path

IMAGE_REPOSITORY = "localhost/group-replay-kafka"
# Modules the broker loads (JMX, JAAS/SASL, naming, XML, the unsafe/zip bits Kafka and Scala use;
# java.desktop for java.beans, which reload4j's PropertyConfigurator needs: without it Kafka 3.x
# logs nothing at all, "NoClassDefFoundError: java/beans/IntrospectionException").
JRE_MODULES = (
    "java.base,java.compiler,java.desktop,java.instrument,java.logging,java.management,java.management.rmi,"
    "java.naming,java.net.http,java.rmi,java.scripting,java.security.jgss,java.security.sasl,java.sql,"
    "java.transaction.xa,java.xml,jdk.crypto.ec,jdk.jfr,jdk.management,jdk.naming.dns,"
    "jdk.security.auth,jdk.unsupported,jdk.zipfs"
)
WAIT_FOR_START = "/tc/start.sh"


class ImageBuildError(RuntimeError):
    """The image could not be assembled or built; carries the failing tool's output."""


def java_home() -> Path:
    java = java_path()
    if java is None:
        raise ImageBuildError("java not found on PATH")
    return Path(java).resolve().parent.parent


def busybox_path() -> Path:
    found = shutil.which("busybox")
    if found is None:
        raise ImageBuildError("busybox not found (Debian: apt-get install busybox-static)")
    return Path(found)


def containerfile_text() -> str:
    return (
        "FROM scratch\n"
        "COPY rootfs/ /\n"
        "ENV PATH=/opt/jre/bin:/bin JAVA_HOME=/opt/jre\n"
        # Wait until the test writes the start script (it needs the mapped port), then run it.
        f'CMD ["/bin/sh", "-c", "while [ ! -f {WAIT_FOR_START} ]; do sleep 0.1; done; '
        f'exec /bin/sh {WAIT_FOR_START}"]\n'
    )


def image_tag(kafka_version: str, libs: Path) -> str:
    digest = hashlib.sha256()
    digest.update(containerfile_text().encode())
    release = java_home() / "release"
    digest.update(release.read_bytes() if release.exists() else str(java_home()).encode())
    digest.update(JRE_MODULES.encode())
    digest.update(busybox_path().read_bytes()[:4096])
    for jar in sorted(libs.glob("*.jar")):
        digest.update(f"{jar.name}:{jar.stat().st_size}\n".encode())
    return f"{IMAGE_REPOSITORY}:{kafka_version}-{digest.hexdigest()[:12]}"


_LDD_PATH = re.compile(r"=>\s+(/\S+)|^\s*(/\S+)\s+\(")


def _shared_libraries(files: list[Path]) -> set[Path]:
    found: set[Path] = set()
    for path in files:
        result = subprocess.run(["ldd", str(path)], capture_output=True, text=True)
        for line in result.stdout.splitlines():
            match = _LDD_PATH.search(line)
            if match:
                lib = Path(match.group(1) or match.group(2))
                if lib.exists():
                    found.add(lib)
    return found


def _copy_into(rootfs: Path, source: Path) -> None:
    target = rootfs / source.relative_to("/")
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source.resolve(), target)


def stage_rootfs(context: Path, libs: Path) -> None:
    """Lay out `context/rootfs` (the image's /) and `context/Containerfile`."""
    rootfs = context / "rootfs"
    jre = rootfs / "opt" / "jre"
    jlink = java_home() / "bin" / "jlink"
    if not jlink.exists():
        raise ImageBuildError(f"jlink not found at {jlink} (a full JDK is needed, not just a JRE)")
    result = subprocess.run(
        [
            str(jlink),
            "--add-modules",
            JRE_MODULES,
            "--strip-debug",
            "--no-header-files",
            "--no-man-pages",
            "--compress=1",
            "--output",
            str(jre),
        ],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise ImageBuildError(f"jlink failed:\n{result.stdout}{result.stderr}")
    elf_files = [jre / "bin" / "java", *jre.glob("lib/**/*.so")]
    for lib in _shared_libraries(elf_files):
        if not str(lib).startswith(str(jre)):
            _copy_into(rootfs, lib)
    # The ELF interpreter java asks for, at the path it asks for.
    loader = Path("/lib64/ld-linux-x86-64.so.2")
    if loader.exists():
        _copy_into(rootfs, loader)
    (rootfs / "bin").mkdir(parents=True, exist_ok=True)
    shutil.copy2(busybox_path(), rootfs / "bin" / "busybox")
    for applet in ("sh", "sleep", "cat", "ls", "echo", "mkdir", "rm"):
        (rootfs / "bin" / applet).symlink_to("busybox")
    kafka_libs = rootfs / "opt" / "kafka" / "libs"
    kafka_libs.mkdir(parents=True)
    for jar in libs.glob("*.jar"):
        shutil.copy2(jar, kafka_libs / jar.name)
    for directory in ("tmp", "tc", "var/lib/kafka", "etc"):
        (rootfs / directory).mkdir(parents=True, exist_ok=True)
    (rootfs / "tmp").chmod(0o1777)
    (context / "Containerfile").write_text(containerfile_text())


def image_exists(client: object, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)  # type: ignore[attr-defined]
    except docker.errors.ImageNotFound:
        return False
    return True


def ensure_image(
    kafka_version: str,
    progress: ProgressCallback | None = None,
    on_step: Callable[[str], None] | None = None,
) -> str:
    """The tag of a local image running Kafka `kafka_version`; builds it through the engine if absent."""
    import docker
    import docker.errors

    say = on_step or (lambda _msg: None)
    libs = broker_libs(kafka_version, progress)
    tag = image_tag(kafka_version, libs)
    client = docker.from_env()
    try:
        if image_exists(client, tag):
            return tag
        say(f"building image {tag}")
        with tempfile.TemporaryDirectory(prefix="kafka-image-") as tmp:
            context = Path(tmp)
            stage_rootfs(context, libs)
            try:
                client.images.build(path=str(context), dockerfile="Containerfile", tag=tag, rm=True)
            except (docker.errors.BuildError, docker.errors.APIError) as exc:
                raise ImageBuildError(f"engine failed to build {tag}: {exc}") from exc
    finally:
        client.close()
    return tag
