"""A small consumer group with a producer, for trying a cluster or a proxy by hand (README walk-through).

    python -m harness.group_clients --bootstrap HOST:PORT --config librdkafka.properties [--seconds 90]

Creates the topic if it is missing (3 partitions, replicated to up to 3 brokers), produces a few
records a second, and runs `--members` confluent-kafka (librdkafka) consumers in one group, every
client with the settings of `--config` (the `librdkafka.properties` that `group-replay broker
start` writes: security protocol, CA, SASL user). Every few seconds it asks the cluster which
broker coordinates the group and prints a line when that changes (`coordinator: node N`), so a
user can kill that node (`group-replay broker stop ID --node N`) and watch the group carry on.
At the end it prints how many records were produced and consumed; exit 0 when the group consumed
records after the last coordinator change (the group survived it), 1 otherwise, 2 for bad input.
Needs the `clients` extra (confluent-kafka).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any


def read_properties(path: Path) -> dict[str, str]:
    """`key=value` lines (`#` comments, blank lines ignored); ValueError naming the bad line."""
    settings: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"{path}:{number}: not key=value")
        settings[key.strip()] = value.strip()
    return settings


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m harness.group_clients", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT[,...]")
    parser.add_argument("--config", type=Path, metavar="FILE", help="librdkafka properties for every client")
    parser.add_argument("--topic", default="walkthrough")
    parser.add_argument("--group", default="walkthrough-group")
    parser.add_argument("--members", type=int, default=2)
    parser.add_argument("--rate", type=float, default=5.0, help="records produced per second")
    parser.add_argument("--seconds", type=float, default=90.0, help="how long to run")
    return parser


class _Group:
    def __init__(self, settings: dict[str, Any], args: argparse.Namespace) -> None:
        self.settings = settings
        self.args = args
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.produced = 0
        self.consumed = 0
        self.last_consumed_ns = 0
        self.errors: list[str] = []

    def consume(self, index: int) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {
                **self.settings,
                "group.id": self.args.group,
                "client.id": f"walkthrough-consumer-{index}",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 10_000,
            }
        )

        def assigned(_consumer: Any, partitions: Any) -> None:
            names = ", ".join(f"{p.topic}-{p.partition}" for p in partitions) or "nothing"
            print(f"member {index}: assigned {names}", flush=True)

        consumer.subscribe([self.args.topic], on_assign=assigned)
        try:
            while not self.stop.is_set():
                message = consumer.poll(0.5)
                if message is not None and message.error() is None:
                    with self.lock:
                        self.consumed += 1
                        self.last_consumed_ns = time.monotonic_ns()
        finally:
            consumer.close()

    def produce(self) -> None:
        from confluent_kafka import Producer

        producer = Producer({**self.settings, "client.id": "walkthrough-producer", "linger.ms": 5})
        interval = 1 / max(self.args.rate, 0.1)
        while not self.stop.wait(interval):
            producer.produce(self.args.topic, value=f"record {self.produced}".encode())
            producer.poll(0)
            self.produced += 1
        producer.flush(30)


def _coordinator(admin: Any, group: str) -> int | None:
    try:
        description = admin.describe_consumer_groups([group], request_timeout=10)[group].result(15)
    except Exception:  # the group may not exist yet, or the coordinator is moving
        return None
    return None if description.coordinator is None else int(description.coordinator.id)


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        from confluent_kafka import KafkaException
        from confluent_kafka.admin import AdminClient
        from confluent_kafka.cimpl import NewTopic
    except ImportError:
        print("harness.group_clients needs confluent-kafka: pip install -e '.[clients]'", file=sys.stderr)
        return 2
    try:
        settings: dict[str, Any] = read_properties(args.config) if args.config else {}
    except (OSError, ValueError) as exc:
        print(f"harness.group_clients: {exc}", file=sys.stderr)
        return 2
    settings["bootstrap.servers"] = args.bootstrap
    admin = AdminClient(settings)
    try:
        brokers = len(admin.list_topics(timeout=30).brokers)
        created = admin.create_topics([NewTopic(args.topic, 3, min(3, brokers))])[args.topic]
        try:
            created.result(30)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise
    except KafkaException as exc:
        print(f"harness.group_clients: cannot reach {args.bootstrap}: {exc}", file=sys.stderr)
        return 1
    group = _Group(settings, args)
    threads = [threading.Thread(target=group.produce, daemon=True)]
    threads += [threading.Thread(target=group.consume, args=(i,), daemon=True) for i in range(args.members)]
    for thread in threads:
        thread.start()
    coordinator: int | None = None
    changed_ns = time.monotonic_ns()
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        found = _coordinator(admin, args.group)
        if found is not None and found != coordinator:
            coordinator, changed_ns = found, time.monotonic_ns()
            print(f"coordinator: node {coordinator}", flush=True)
        time.sleep(2)
        with group.lock:
            print(f"produced {group.produced}, consumed {group.consumed}", flush=True)
    group.stop.set()
    for thread in threads:
        thread.join(timeout=15)
    survived = group.last_consumed_ns > changed_ns
    print(
        f"done: produced {group.produced}, consumed {group.consumed}; "
        f"{'records consumed after' if survived else 'NO records consumed since'} the last coordinator "
        f"change (node {coordinator})",
        flush=True,
    )
    return 0 if survived else 1


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # librdkafka handles still closing in daemon threads (a consumer whose coordinator died) can
    # hold interpreter shutdown for minutes; everything worth saying has been printed.
    os._exit(code)
