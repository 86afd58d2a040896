"""Added latency of a latency-bound producer through the proxy, beside Kroxylicious's +0.32 ms.

Kroxylicious publishes +0.32 ms p50 added by its proxy on a single-node cluster's producer
(its performance page). ProducerPerformance reports whole milliseconds, so this measures with a
producer of its own: confluent-kafka (librdkafka), `acks=1`, `linger.ms=0`, one record every
`--interval-ms` (never saturating), latency = produce() to its delivery report. A real Kafka
broker (harness, Maven jars); relays `direct`, `proxy` and `proxy+record` (group scope), the
order alternating every round; p50/p99 per relay and round, and the p50 added over direct.
`--baseline DIR` adds `main proxy+record`: the same recording proxy from another checkout (a
`git archive` of the code before a change), in the same rounds.

    python bench/proxy_latency.py [--records 2000] [--interval-ms 2] [--rounds 3] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from proxy_overhead import ROOT, free_port, process

RELAYS = ("direct", "proxy", "proxy+record")
BASELINE = "main proxy+record"


def latencies_ms(bootstrap: str, topic: str, records: int, interval_ms: float) -> list[float]:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "acks": "1", "linger.ms": 0})
    measured: list[float] = []

    def delivered(error: object, _message: object, sent_ns: int) -> None:
        if error is None:
            measured.append((time.perf_counter_ns() - sent_ns) / 1e6)

    for _ in range(50):  # warm up: metadata, connections
        producer.produce(topic, b"w")
    producer.flush(30)
    for _ in range(records):
        sent = time.perf_counter_ns()
        producer.produce(topic, b"x" * 100, on_delivery=lambda e, m, s=sent: delivered(e, m, s))
        producer.poll(interval_ms / 1000)
    producer.flush(30)
    return measured


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--interval-ms", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout whose recording proxy runs beside it")
    args = parser.parse_args()
    relays = (*RELAYS, *([BASELINE] if args.baseline else []))
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker
    from harness.lines import KAFKA_39

    p50: dict[str, list[float]] = {relay: [] for relay in relays}
    p99: dict[str, list[float]] = {relay: [] for relay in relays}
    with start_broker(BrokerSpec(KAFKA_39)) as broker, tempfile.TemporaryDirectory(prefix="latency-") as tmp:
        create_topic(broker.bootstrap, "latency", 1)
        for round_ in range(args.rounds):
            for relay in relays if round_ % 2 == 0 else relays[::-1]:
                if relay == "direct":
                    values = latencies_ms(broker.bootstrap, "latency", args.records, args.interval_ms)
                else:
                    port = free_port()
                    cmd = [sys.executable, "-m", "group_replay", "proxy", "--upstream", broker.bootstrap,
                           "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR"]  # fmt: skip
                    if relay.endswith("proxy+record"):
                        cmd += ["--record", str(Path(tmp) / "c.pcapng")]
                    with process(cmd, port, cwd=args.baseline if relay == BASELINE else ROOT):
                        values = latencies_ms(f"127.0.0.1:{port}", "latency", args.records, args.interval_ms)
                quantiles = statistics.quantiles(values, n=100)
                p50[relay].append(statistics.median(values))
                p99[relay].append(quantiles[98])
                print(f"  round {round_} {relay}: p50 {p50[relay][-1]:.3f} ms, p99 {p99[relay][-1]:.3f} ms "
                      f"({len(values)} records, load {os.getloadavg()[0]:.1f})", file=sys.stderr)  # fmt: skip
    print("| relay | p50 ms per round | p50 median | added p50 over direct (median of rounds) | p99 median |")
    print("|---|---|---:|---:|---:|")
    for relay in relays:
        added = statistics.median(p - d for p, d in zip(p50[relay], p50["direct"], strict=True))
        rounds = " / ".join(f"{v:.2f}" for v in p50[relay])
        print(f"| {relay} | {rounds} | {statistics.median(p50[relay]):.2f} | {added:+.2f} | "
              f"{statistics.median(p99[relay]):.2f} |")  # fmt: skip
    print(f"\nKroxylicious (published, single node): +0.32 ms p50. cpus {os.cpu_count()}, "
          f"load average at the end {os.getloadavg()[0]:.1f}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
