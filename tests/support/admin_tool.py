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

T = TypeVar("T")

# The flags the harness gives its short-lived JVMs (harness.launch, demo.clients): C1 only and
# the serial GC start a tool run with about a third less CPU on a loaded 2-core machine. The
# tool's code and output are the same; only how the JVM compiles it differs.
QUICK_JVM = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def consumer_groups(
    classpath: str, port: int, *args: str, timeout_s: float
) -> subprocess.CompletedProcess[str]:
    """`kafka-consumer-groups --bootstrap-server 127.0.0.1:PORT ARGS` (the script's main class)."""
    return subprocess.run(
        ["java", *QUICK_JVM, "-cp", classpath, "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
         "--bootstrap-server", f"127.0.0.1:{port}", *args],
        capture_output=True, text=True, timeout=timeout_s,
    )  # fmt: skip


def both_sides(kafka: Callable[[], T], served: Callable[[], T]) -> tuple[T, T]:
    """`kafka()` and `served()` at once (threads: each mostly waits on its tool's JVM), their
    results in that order; either's exception is raised."""
    with ThreadPoolExecutor(max_workers=2) as pool:
        kafka_side, served_side = pool.submit(kafka), pool.submit(served)
        return kafka_side.result(), served_side.result()
