"""Kafka's own `kafka-consumer-groups` (ConsumerGroupCommand from the kafka-tools artifact) run
against a broker and against `coordinator serve`, for the tests that compare what it prints.

One copy of the command line (tests/test_coordinator_admin.py and
tests/test_coordinator_admin_tool.py had their own), and the two sides run together: each side
is its own groups on its own server, so Kafka's and serve's tool runs do not meet.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from harness.class_archive import command_archive, with_archive
from harness.maven import java_path

T = TypeVar("T")

# The flags the harness gives its short-lived JVMs (harness.launch, demo.clients): C1 only and
# the serial GC start a tool run with about a third less CPU on a loaded 2-core machine; the
# tool's class archive (harness.class_archive, dumped by its first clean run) halves it again
# (1.6-2.4 -> 0.8-1.0 s wall, 1.1-1.3 -> 0.6 s CPU at load 12-14). The tool's code and output
# are the same; only how the JVM loads and compiles it differs.
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")
MAIN_CLASS = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"


def consumer_groups(
    classpath: str, port: int, *args: str, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`kafka-consumer-groups --bootstrap-server 127.0.0.1:PORT ARGS` (the script's main class)
    with `classpath` the kafka-tools jars (`DIR/*`)."""
    java = java_path() or "java"
    command = [
        java,
        *QUICK_JVM,
        "-cp",
        classpath,
        MAIN_CLASS,
        "--bootstrap-server",
        f"127.0.0.1:{port}",
        *args,
    ]
    archive = command_archive(command)
    try:
        done = subprocess.run(
            with_archive(command, archive), capture_output=True, text=True, timeout=timeout_s
        )
    except BaseException:
        archive.discard()  # what a killed run left
        raise
    archive.settle(done.returncode)  # the JVM exited by itself (whatever its code): its dump is whole
    return done


def both_sides(kafka: Callable[[], T], served: Callable[[], T]) -> tuple[T, T]:
    """`kafka()` and `served()` at once (threads: each mostly waits on its tool's JVM), their
    results in that order; either's exception is raised."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        kafka_side, served_side = pool.submit(kafka), pool.submit(served)
        return kafka_side.result(), served_side.result()
