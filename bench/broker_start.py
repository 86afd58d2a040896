"""Time to a ready broker (answers ApiVersions): cold (empty cache + empty Maven repo, so jars are
downloaded) and warm (cached), for Kafka 3.9.x and 4.x, and the container provider if an engine
can run. The baseline, measured in the same run, is a bare `java -version`: it shows how much of
a broker start is the JVM itself on this (shared, noisy) machine.

    python bench/broker_start.py [--repeats 3] [--no-cold] [--no-container] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from harness import paths
from harness.broker import BrokerSpec, start_broker
from harness.lines import KAFKA_4X, KAFKA_39
from harness.maven import java_path


@dataclass(frozen=True)
class Row:
    case: str
    runs: int
    median_ms: int
    min_ms: int
    max_ms: int


def _measure(case: str, runs: int, action: Callable[[], None]) -> Row:
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        action()
        samples.append(int((time.perf_counter() - start) * 1000))
    return Row(case, runs, int(statistics.median(samples)), min(samples), max(samples))


def _start_stop(kafka_version: str) -> Callable[[], None]:
    def action() -> None:
        start_broker(BrokerSpec(kafka_version)).stop()  # stop is outside "ready" but inside the timing: small

    return action


def _cold(kafka_version: str) -> Callable[[], None]:
    """Fresh cache dir and fresh Maven local repo: every jar comes from Maven Central."""

    def action() -> None:
        with tempfile.TemporaryDirectory(prefix="bench-cold-") as tmp:
            saved = {k: os.environ.get(k) for k in (paths.CACHE_ENV, paths.MAVEN_REPO_ENV)}
            os.environ[paths.CACHE_ENV] = f"{tmp}/cache"
            os.environ[paths.MAVEN_REPO_ENV] = f"{tmp}/m2"
            try:
                start_broker(BrokerSpec(kafka_version)).stop()
            finally:
                for key, value in saved.items():
                    if value is None:
                        os.environ.pop(key, None)
                    else:
                        os.environ[key] = value

    return action


def _container_rows(repeats: int) -> list[Row]:
    from harness.container.engine import EngineUnavailable, start_engine

    try:
        engine = start_engine()
    except EngineUnavailable as exc:
        print(f"container provider skipped: {exc}", file=sys.stderr)
        return []
    engine.export_env()
    try:
        import docker

        from harness.container.image import ensure_image, image_tag, stage_rootfs
        from harness.container.kafka import ApacheKafkaContainer
        from harness.maven import broker_libs

        rows = []

        def cold_image() -> None:
            client = docker.from_env()
            tag = image_tag(KAFKA_39, broker_libs(KAFKA_39)).replace(":", ":bench-")
            with tempfile.TemporaryDirectory(prefix="bench-image-") as tmp:
                stage_rootfs(Path(tmp), broker_libs(KAFKA_39))
                client.images.build(path=tmp, dockerfile="Containerfile", tag=tag, rm=True)
            with ApacheKafkaContainer(tag, KAFKA_39):
                pass
            client.images.remove(tag, force=True)
            client.close()

        rows.append(_measure(f"container {KAFKA_39} cold (jlink + image build + start)", 1, cold_image))
        tag = ensure_image(KAFKA_39)

        def warm() -> None:
            with ApacheKafkaContainer(tag, KAFKA_39):
                pass

        rows.append(_measure(f"container {KAFKA_39} warm (image present)", repeats, warm))
        return rows
    finally:
        engine.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-cold", action="store_true")
    parser.add_argument("--no-container", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    java = java_path()
    if java is None or shutil.which("mvn") is None:
        print("java and mvn are needed", file=sys.stderr)
        return 2

    rows = [
        _measure(
            "baseline: java -version",
            args.repeats,
            lambda: subprocess.run([java, "-version"], capture_output=True),
        )
    ]
    for version in (KAFKA_39, KAFKA_4X):
        start_broker(BrokerSpec(version)).stop()  # make sure the warm cache exists before timing warm starts
        if not args.no_cold:
            rows.append(_measure(f"process {version} cold (download jars)", 1, _cold(version)))
        rows.append(_measure(f"process {version} warm", args.repeats, _start_stop(version)))
    if not args.no_container:
        rows += _container_rows(args.repeats)

    from rich.console import Console
    from rich.table import Table

    base = rows[0].median_ms or 1
    table = Table(title=f"time to a ready Kafka broker ({os.cpu_count()} cores, shared)")
    for column in ("case", "runs", "median ms", "min ms", "max ms", "x baseline"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for row in rows:
        table.add_row(
            row.case,
            str(row.runs),
            str(row.median_ms),
            str(row.min_ms),
            str(row.max_ms),
            f"{row.median_ms / base:.1f}",
        )
    Console(width=120).print(table)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
