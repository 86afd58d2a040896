"""One Python Kafka consumer as a process: `python -m demo.consumer_main --kind confluent ...`.

Runs as a subprocess so a test can bounce or kill it like a real deployment. Prints one JSON
object per line on stdout (the contract `demo.clients` parses):
  {"event": "started", ...}                      after the consumer is created
  {"event": "assigned", "partitions": [...], "generation_id": int|null, "member_id": str|null,
   "is_leader": bool (kafka-python only, from `_coordinator._is_leader`)}
  {"event": "revoked", "partitions": [...]}
  {"event": "records", "count": n}               at most once per poll that returned records
  {"event": "coordinator", "node_id": n}         kafka-python only: the broker it found coordinating
  {"event": "closed"}                            after a clean close (SIGTERM, SIGINT or --run-ms)
  {"event": "error", "message": str}
Every kind uses the range assignor, so mixed groups agree on a protocol (aiokafka's default is
roundrobin only); kafka-python's is mended first (`kafka_python_range_assignor`). Generation and
member id come from each client's internals where it has no public API
(kafka-python `_coordinator._generation`, aiokafka `_coordinator.generation/member_id`);
librdkafka exposes the member id only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

from demo.security import ClientSecurity

_stop = False


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "ts_ms": int(time.time() * 1000), **fields}), flush=True)


def _on_signal(_signum: int, _frame: object) -> None:
    global _stop
    _stop = True


def _deadline(run_ms: int | None) -> float:
    return float("inf") if run_ms is None else time.monotonic() + run_ms / 1000


def _tp_names(parts: Any) -> list[str]:
    return sorted(f"{p.topic}-{p.partition}" for p in parts)


def run_confluent(args: argparse.Namespace) -> None:
    from confluent_kafka import Consumer

    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.client_id,
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": max(100, args.session_timeout_ms // 5),
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "partition.assignment.strategy": "range",
    }
    config |= _security(args).librdkafka()
    if args.instance:
        config["group.instance.id"] = args.instance
    consumer = Consumer(config)
    emit("started", kind="confluent", client_id=args.client_id, group_instance_id=args.instance)

    def on_assign(c: Any, parts: Any) -> None:
        emit("assigned", partitions=_tp_names(parts), generation_id=None, member_id=c.memberid() or None)

    def on_revoke(_c: Any, parts: Any) -> None:
        emit("revoked", partitions=_tp_names(parts))

    consumer.subscribe(args.topics, on_assign=on_assign, on_revoke=on_revoke)
    end = _deadline(args.run_ms)
    while not _stop and time.monotonic() < end:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            emit("records", count=1)
    consumer.close()


def _security(args: argparse.Namespace) -> ClientSecurity:
    return ClientSecurity() if args.client_config is None else ClientSecurity.read(args.client_config)


def _python_client_config(args: argparse.Namespace) -> dict[str, Any]:
    """The consumer settings kafka-python and aiokafka spell the same way (security: nearly)."""
    return _security(args).python(args.kind) | {
        "bootstrap_servers": args.bootstrap,
        "group_id": args.group,
        "client_id": args.client_id,
        "group_instance_id": args.instance or None,
        "session_timeout_ms": args.session_timeout_ms,
        "heartbeat_interval_ms": max(100, args.session_timeout_ms // 5),
        "auto_offset_reset": "earliest",
        "enable_auto_commit": False,
    }


def kafka_python_range_assignor() -> type:
    """kafka-python's "range" assignor, with each topic's members in the order of Kafka's own.

    kafka-python 3.0.12's `RangePartitionAssignor.assign` splits a topic's members into static and
    dynamic ones with `itertools.groupby` over an unsorted list and keeps one run of each kind in a
    dict. When the JoinGroup member list interleaves static and dynamic members (the demo group's
    does: the broker lists members in the order they joined), every member outside the last run of
    each kind is assigned nothing. Whenever the kafka-python member led the demo group, other
    members got no partitions; a static member bounced after that rejoins a Stable group and gets
    its stored empty assignment back, for good (CI saw it twice, on Kafka 3.9.2 and 4.3.1).

    This subclass keeps the protocol name, version and wire format and assigns with replay's port
    of Kafka's RangeAssignor (`replay.assignors.range_assign`: KAFKA-8355's member order, members
    with a group.instance.id first, by instance id, then the others by member id).
    """
    from kafka.coordinator.assignors.abstract import ConsumerProtocolAssignment
    from kafka.coordinator.assignors.range import RangePartitionAssignor

    from proxy.wire.consumer_protocol import encode_subscription
    from replay.assignors import range_assign

    class KafkaOrderRangeAssignor(RangePartitionAssignor):  # type: ignore[misc]
        @classmethod
        def assign(cls, cluster: Any, members: Any) -> dict[str, Any]:
            subscriptions = {
                m.member_id: (m.group_instance_id, encode_subscription(list(m.metadata.topics)))
                for m in members
            }
            counts: dict[str, int] = {}  # a topic without metadata gets no assignment, as in kafka-python
            for m in members:
                for topic in m.metadata.topics:
                    known = cluster.partitions_for_topic(topic)
                    if known is not None:
                        counts[topic] = len(known)
            owned: dict[str, dict[str, list[int]]] = {}
            for member_id, partitions in range_assign(subscriptions, counts).items():
                by_topic = owned.setdefault(member_id, {})
                for topic, partition in partitions:
                    by_topic.setdefault(topic, []).append(partition)
            return {
                member_id: ConsumerProtocolAssignment(cls.version, sorted(topics.items()), b"")
                for member_id, topics in owned.items()
            }

    return KafkaOrderRangeAssignor


def run_kafka_python(args: argparse.Namespace) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    consumer = KafkaConsumer(
        **_python_client_config(args),
        partition_assignment_strategy=(kafka_python_range_assignor(),),
    )
    emit("started", kind="kafka-python", client_id=args.client_id, group_instance_id=args.instance)

    def generation() -> tuple[int | None, str | None]:
        gen = getattr(getattr(consumer, "_coordinator", None), "_generation", None)
        if gen is None or gen.generation_id < 0:
            return None, None
        return int(gen.generation_id), str(gen.member_id)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=_tp_names(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            generation_id, member_id = generation()
            is_leader = getattr(getattr(consumer, "_coordinator", None), "_is_leader", None)
            emit(
                "assigned",
                partitions=_tp_names(assigned),
                generation_id=generation_id,
                member_id=member_id,
                is_leader=is_leader,
            )

    consumer.subscribe(topics=args.topics, listener=Listener())
    end = _deadline(args.run_ms)
    coordinator = None
    while not _stop and time.monotonic() < end:
        batches = consumer.poll(timeout_ms=100)
        count = sum(len(records) for records in batches.values())
        if count:
            emit("records", count=count)
        # The broker the member found coordinating its group (FindCoordinator's answer): None
        # while it looks for one; kafka-python 3 names its connection to it `coordinator-<id>`.
        found = getattr(getattr(consumer, "_coordinator", None), "coordinator_id", None)
        if found is not None and found != coordinator:
            coordinator = found
            emit("coordinator", node_id=int(str(found).rsplit("-", 1)[-1]))
    consumer.close()


async def _aiokafka_main(args: argparse.Namespace) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener
    from aiokafka.coordinator.assignors.range import RangePartitionAssignor

    consumer = AIOKafkaConsumer(
        **_python_client_config(args),
        partition_assignment_strategy=(RangePartitionAssignor,),
    )

    def generation() -> tuple[int | None, str | None]:
        coordinator = getattr(consumer, "_coordinator", None)
        gen = getattr(coordinator, "generation", -1)
        if coordinator is None or gen is None or gen < 0:
            return None, None
        return int(gen), str(coordinator.member_id)

    class Listener(ConsumerRebalanceListener):  # type: ignore[misc]
        def on_partitions_revoked(self, revoked: Any) -> None:
            emit("revoked", partitions=_tp_names(revoked))

        def on_partitions_assigned(self, assigned: Any) -> None:
            generation_id, member_id = generation()
            emit("assigned", partitions=_tp_names(assigned), generation_id=generation_id, member_id=member_id)

    consumer.subscribe(topics=args.topics, listener=Listener())
    await consumer.start()
    emit("started", kind="aiokafka", client_id=args.client_id, group_instance_id=args.instance)
    end = _deadline(args.run_ms)
    try:
        while not _stop and time.monotonic() < end:
            batches = await consumer.getmany(timeout_ms=100)
            count = sum(len(records) for records in batches.values())
            if count:
                emit("records", count=count)
    finally:
        await consumer.stop()


def run_aiokafka(args: argparse.Namespace) -> None:
    asyncio.run(_aiokafka_main(args))


RUNNERS = {"confluent": run_confluent, "kafka-python": run_kafka_python, "aiokafka": run_aiokafka}


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo.consumer_main", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True, choices=sorted(RUNNERS))
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", dest="topics", action="append", required=True)
    parser.add_argument(
        "--instance", default=None, help="group.instance.id (static member); omit for dynamic"
    )
    parser.add_argument("--client-id", default="group-replay-consumer")
    parser.add_argument("--session-timeout-ms", type=int, default=6000)
    parser.add_argument(
        "--client-config", type=Path, default=None, help="security settings (librdkafka's names)"
    )
    parser.add_argument(
        "--run-ms", type=int, default=None, help="close after this long (default: until signalled)"
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        RUNNERS[args.kind](args)
    except Exception as exc:
        emit("error", message=f"{type(exc).__name__}: {exc}")
        return 1
    emit("closed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
