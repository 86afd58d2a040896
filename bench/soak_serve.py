"""`coordinator serve` reliability figures (issue 18): the hostile-request fuzzer for minutes.

Not a test: it prints one table from one run. The same seeded fuzz (tests/serve_fuzz.py) runs
against a real Kafka 3.9 broker first (the baseline: what Kafka answers, how many connections it
closes) and then against a `coordinator serve` process, whose RSS is sampled every 5 s. After
each run a fresh group's JoinGroup must still be answered (the timers survived). The quick
version is tests/test_coordinator_serve_fuzz.py.

    python bench/soak_serve.py [--seconds 90] [--seed 18] [--connections 8] [--no-kafka]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from tests.serve_fuzz import FuzzReport, compare, fuzz  # noqa: E402
from tests.support.serve import start_serve  # noqa: E402

TOPIC_PARTITIONS = 3


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def run_serve(seconds: float, seed: int, connections: int, topic: str) -> tuple[FuzzReport, list[float], int]:
    process, port = start_serve(f"{topic}:{TOPIC_PARTITIONS}")
    samples = [rss_mb(process.pid)]

    def tick(_: FuzzReport) -> None:
        samples.append(rss_mb(process.pid))

    try:
        report = asyncio.run(
            fuzz(
                "serve",
                "127.0.0.1",
                port,
                seed=seed,
                duration_s=seconds,
                connections=connections,
                topic=topic,
                on_tick=tick,
            )
        )
        samples.append(rss_mb(process.pid))
        alive = process.poll() is None
    finally:
        process.terminate()
        process.wait(timeout=10)
    faults = sum(1 for line in process.stderr.read().splitlines() if " failed at " in line)
    if not alive:
        report.closed_by_target = -1
    return report, samples, faults


def run_kafka(seconds: float, seed: int, connections: int) -> tuple[FuzzReport, str]:
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker
    from harness.lines import KAFKA_39

    broker = start_broker(BrokerSpec(KAFKA_39, new_coordinator=False), progress=None)
    try:
        topic = f"fuzz-{int(time.time())}"
        create_topic(broker.bootstrap, topic, TOPIC_PARTITIONS)
        host, _, port = broker.bootstrap.rpartition(":")
        report = asyncio.run(
            fuzz(
                "kafka-3.9",
                host,
                int(port),
                seed=seed,
                duration_s=seconds,
                connections=connections,
                topic=topic,
            )
        )
    finally:
        broker.stop()
    return report, topic


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=90)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--no-kafka", action="store_true", help="skip the broker baseline")
    args = parser.parse_args(argv)

    kafka: FuzzReport | None = None
    topic = "fuzz"
    if not args.no_kafka:
        kafka, topic = run_kafka(args.seconds, args.seed, args.connections)
    served, samples, faults = run_serve(args.seconds, args.seed, args.connections, topic)

    table = Table(
        title=f"hostile-request fuzz, seed {args.seed}, {args.connections} connections, {args.seconds:.0f} s"
    )
    for column in (
        "target",
        "requests",
        "req/s",
        "closed by target",
        "abandoned",
        "probe join s",
        "RSS MB start/peak/end",
        "faults logged",
    ):
        table.add_column(column, justify="left" if column == "target" else "right")
    rows: list[tuple[FuzzReport, str, str]] = []
    if kafka is not None:
        rows.append((kafka, "", ""))
    rows.append((served, f"{samples[0]:.0f} / {max(samples):.0f} / {samples[-1]:.0f}", str(faults)))
    for report, rss, fault_text in rows:
        table.add_row(
            report.target,
            f"{report.requests:,}",
            f"{report.requests / args.seconds:,.0f}",
            "process died" if report.closed_by_target < 0 else str(report.closed_by_target),
            str(report.abandoned),
            "not answered" if report.probe_joined_s is None else f"{report.probe_joined_s:.2f}",
            rss,
            fault_text,
        )
    console = Console(width=160)
    console.print(table)
    if kafka is not None:
        difference = compare(served, kafka)
        console.print(f"codes only serve answered: {difference['codes_only_serve']}")
        console.print(f"codes only Kafka answered: {difference['codes_only_kafka']}")
    ok = served.closed_by_target == 0 and served.probe_joined_s is not None
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
