"""A coordinator restart with real clients (issue 15): `coordinator serve --state-dir` against what
a real Kafka broker restart does.

Two static confluent-kafka consumers share a two-partition topic and commit offsets; the
coordinator restarts (the broker: controlled shutdown and start on the same data; serve: a new
process on the same port and state directory) while they keep running. What each side shows
afterwards is observed the same way: the consumers' member ids, whether their generation still
commits (an OffsetCommit over the wire with the member's id and the generation it had: Kafka
answers ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID when either was lost), how many rebalances the
clients saw, whether a commit from the client succeeds and the offsets read back. serve without
`--state-dir` runs the same script as the control: it must differ from Kafka.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from replay.coordinator import requests as Q
from tests.support.serve import WireClient, start_serve

SESSION_TIMEOUT_MS = 90_000  # longer than a loaded machine's broker restart: nobody should expire


def _commit_generation(port: int, group: str, member_id: str, generation: int, topic: str) -> ErrorCode:
    """What an OffsetCommit with this member id and generation gets (the generation probe)."""

    async def probe() -> ErrorCode:
        client = await WireClient.connect(port, "generation-probe")
        try:
            answer = await client.call(Q.offset_commit(8, group, generation, member_id, {(topic, 0): 1}), 30)
        finally:
            client.close()
        return ErrorCode(answer.topics[0].partitions[0].error_code)

    for _ in range(30):
        code = asyncio.run(probe())
        if code not in (ErrorCode.coordinator_load_in_progress, ErrorCode.not_coordinator):
            return code
        time.sleep(1)  # the broker is still loading the group
    return code


def _generation(port: int, group: str, member_id: str, topic: str) -> int | None:
    for generation in range(1, 30):
        if _commit_generation(port, group, member_id, generation, topic) == ErrorCode.none:
            return generation
    return None


class Members:
    """Two static confluent-kafka consumers polled from this thread; counts their assignments."""

    def __init__(self, bootstrap: str, group: str, topic: str) -> None:
        from confluent_kafka import Consumer

        self.assignments = {"a": 0, "b": 0}
        self.owned: dict[str, list[int]] = {"a": [], "b": []}
        self.consumers: dict[str, Any] = {}
        for name in self.assignments:

            def on_assign(_consumer: Any, partitions: Any, name: str = name) -> None:
                self.assignments[name] += 1
                self.owned[name] = sorted(p.partition for p in partitions)

            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": group,
                    "group.instance.id": f"static-{name}",
                    "client.id": f"restart-{name}",
                    "session.timeout.ms": SESSION_TIMEOUT_MS,
                    "heartbeat.interval.ms": 1000,
                    "enable.auto.commit": False,
                    "partition.assignment.strategy": "range",
                }
            )
            consumer.subscribe([topic], on_assign=on_assign)
            self.consumers[name] = consumer

    def poll(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for consumer in self.consumers.values():
                consumer.poll(0.1)

    def settle(self) -> None:
        deadline = time.monotonic() + 120
        while sorted(self.owned["a"] + self.owned["b"]) != [0, 1] or not all(self.owned.values()):
            assert time.monotonic() < deadline, f"the group did not settle: {self.owned}"
            self.poll(0.5)
        self.poll(3)

    def member_ids(self) -> dict[str, str]:
        return {name: c.memberid() for name, c in self.consumers.items()}

    def commit(self, topic: str, offset: int) -> str:
        """Each member commits its partition at `offset` (+ the partition); the error, if any."""
        from confluent_kafka import KafkaException, TopicPartition

        for name, consumer in self.consumers.items():
            if len(self.owned[name]) != 1:
                return f"member {name} owns {self.owned[name]}"
            (partition,) = self.owned[name]
            try:
                asked = [TopicPartition(topic, partition, offset + partition)]
                consumer.commit(offsets=asked, asynchronous=False)
            except KafkaException as exc:
                return str(exc.args[0].name())
        return "ok"

    def committed(self, topic: str) -> dict[int, int]:
        from confluent_kafka import TopicPartition

        asked = [TopicPartition(topic, p) for p in (0, 1)]
        return {tp.partition: tp.offset for tp in self.consumers["a"].committed(asked, timeout=30)}

    def close(self) -> None:
        for consumer in self.consumers.values():
            consumer.close()


def observe_restart(bootstrap: str, group: str, topic: str, restart: Callable[[], None]) -> dict[str, Any]:
    port = int(bootstrap.rpartition(":")[2])
    members = Members(bootstrap, group, topic)
    try:
        members.settle()
        before = members.member_ids()
        generation = _generation(port, group, before["a"], topic)
        assert generation is not None, "no generation commits for the member"
        assert members.commit(topic, 5) == "ok"
        assignments = sum(members.assignments.values())
        restart()
        members.poll(12)  # a dozen heartbeat intervals after the coordinator is back
        offsets_after_restart = members.committed(topic)
        generation_kept = _commit_generation(port, group, before["a"], generation, topic).name
        commit = "not tried"
        deadline = time.monotonic() + 60
        while commit != "ok" and time.monotonic() < deadline:
            commit = members.commit(topic, 10)
            if commit in ("COORDINATOR_LOAD_IN_PROGRESS", "NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE"):
                members.poll(1)  # the broker is still loading the group: as a client would, retry
                continue
            break
        return {
            "member ids kept": members.member_ids() == before,
            "generation kept": generation_kept,
            "rebalances the clients saw": sum(members.assignments.values()) - assignments,
            "commit after the restart": commit,
            "committed offsets after the restart": offsets_after_restart,
            "committed offsets after a new commit": members.committed(topic),
        }
    finally:
        members.close()


@contextmanager
def _serve(topic: str, state_dir: Path | None, behaviour: str) -> Iterator[tuple[str, Callable[[], None]]]:
    extra: tuple[str, ...] = ("--behaviour", behaviour)
    if state_dir is not None:
        extra += ("--state-dir", str(state_dir))
    process, port = start_serve(f"{topic}:2", *extra)
    processes = [process]

    def restart() -> None:
        processes[-1].terminate()
        processes[-1].wait(timeout=10)
        again, again_port = start_serve(f"{topic}:2", *extra, "--port", str(port))
        processes.append(again)
        assert again_port == port

    try:
        yield f"127.0.0.1:{port}", restart
    finally:
        for p in processes:
            p.terminate()
            p.wait(timeout=10)
            assert p.stderr is not None
            stderr = p.stderr.read()
            assert "Traceback" not in stderr, stderr[-3000:]


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize(
    ("broker", "behaviour"), [("kafka_39", "scala-3.9"), ("kafka_4x", "new-coordinator")]
)
def test_serve_with_a_state_dir_survives_a_restart_as_a_kafka_broker_does(
    broker: str,
    behaviour: str,
    request: pytest.FixtureRequest,
    make_topic: Callable[..., str],
    tmp_path: Path,
) -> None:
    """Kafka 3.9's Scala coordinator and 4.x's new one, each against serve behaving as it."""
    kafka_broker = request.getfixturevalue(broker)
    topic = make_topic(kafka_broker.bootstrap, 2, prefix="restart")
    from tests.serve_fuzz import wait_coordinator_ready

    group = f"restart-{topic}"
    port = int(kafka_broker.bootstrap.rpartition(":")[2])
    asyncio.run(wait_coordinator_ready("127.0.0.1", port, (group,)))

    def on_serve(state_dir: Path | None) -> dict[str, Any]:
        with _serve(topic, state_dir, behaviour) as (bootstrap, restart):
            return observe_restart(bootstrap, group, topic, restart)

    # The three observations are independent (their own coordinator, members and restart) and
    # mostly wait (settling, a dozen heartbeats, the broker's restart): they run concurrently.
    with ThreadPoolExecutor(max_workers=3) as pool:
        on_kafka = pool.submit(observe_restart, kafka_broker.bootstrap, group, topic, kafka_broker.restart)
        on_served = pool.submit(on_serve, tmp_path / "state")
        on_forgetful = pool.submit(on_serve, None)  # the control: a serve that forgets
        kafka, served, forgetful = on_kafka.result(), on_served.result(), on_forgetful.result()
    assert kafka["member ids kept"] and kafka["generation kept"] == "none", kafka
    assert served == kafka, (served, kafka)
    assert kafka["committed offsets after the restart"] == {0: 5, 1: 6}
    # It forgets the group: the members rejoin (a rebalance) and their offsets are gone. (Their new
    # member ids equal the old ones: without a log the coordinator starts again at epoch 0 and the
    # same join order issues the same ids, the repetition the epoch in the log prevents.)
    assert forgetful != kafka
    assert forgetful["rebalances the clients saw"] > 0, forgetful
    assert forgetful["committed offsets after the restart"] == {0: -1001, 1: -1001}, forgetful
