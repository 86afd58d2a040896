"""`group-replay coordinator serve`: the reference coordinator over TCP.

In-process tests speak the wire protocol through `proxy.wire`; the integration tests run real
consumers (confluent-kafka, kafka-python, aiokafka, Java kafka-clients) against a served
coordinator subprocess and bounce them.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from replay.coordinator import CoordinatorConfig
from replay.coordinator import requests as Q
from replay.serve_cli import parse_topics
from replay.server import ReferenceServer
from tests.support.serve import WireClient, start_serve

E = ErrorCode


def test_parse_topics() -> None:
    assert parse_topics("events:6, orders ,x:2") == {"events": 6, "orders": 1, "x": 2}
    for bad in ("a:0", "a:x", ":3"):
        with pytest.raises(ValueError):
            parse_topics(bad)


def test_server_speaks_the_wire_protocol() -> None:
    from kio.schema.api_versions.v3.request import ApiVersionsRequest
    from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
    from kio.schema.metadata.v12.request import MetadataRequest, MetadataRequestTopic

    async def scenario() -> None:
        server = ReferenceServer(CoordinatorConfig(group_initial_rebalance_delay_ms=0), {"events": 3})
        _, port = await server.start("127.0.0.1", 0)
        a = await WireClient.connect(port)
        versions = await a.call(ApiVersionsRequest(client_software_name="t", client_software_version="1"))
        served = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        assert served[11] == (0, 9) and served[14] == (0, 5)
        meta = await a.call(
            MetadataRequest(
                topics=(MetadataRequestTopic(topic_id=None, name="events"),),
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        assert [b.port for b in meta.brokers] == [port]
        assert [p.partition_index for p in meta.topics[0].partitions] == [0, 1, 2]
        found = await a.call(FindCoordinatorRequest(key_type=0, coordinator_keys=("g",)))
        assert found.coordinators[0].port == port

        # A parked JoinGroup is answered when the second member completes the rebalance; a
        # malformed frame on a third connection closes only that connection.
        first = await a.call(Q.join_group(9, "g", group_instance_id="x", session_timeout_ms=10_000))
        assert first.error_code == E.none and first.generation_id == 1
        b = await WireClient.connect(port)
        join_b = Q.join_group(5, "g", group_instance_id="y", session_timeout_ms=10_000)
        await b.send(join_b)
        bad = await WireClient.connect(port)
        bad.writer.write(b"\xff\xff\xff\xff")
        await bad.writer.drain()
        assert await asyncio.wait_for(bad.reader.read(10), 5) == b""
        again = Q.join_group(9, "g", first.member_id, group_instance_id="x", session_timeout_ms=10_000)
        rejoin = await a.call(again)
        joined_b = await b.receive(join_b)
        assert rejoin.generation_id == joined_b.generation_id == 2
        assert rejoin.leader == first.member_id and len(rejoin.members) == 2
        for client in (a, b, bad):
            client.writer.close()
        assert server.server is not None
        server.server.close()

    asyncio.run(scenario())


# --- real clients -------------------------------------------------------------------------------


@dataclass
class Served:
    bootstrap: str
    events_path: Path
    process: subprocess.Popen[str]

    def events(self, group_id: str) -> list[dict[str, Any]]:
        rows = [json.loads(line) for line in self.events_path.read_text().splitlines() if line.strip()]
        return [r for r in rows if r["group_id"] == group_id]

    def rebalances(self, group_id: str) -> int:
        return sum(1 for r in self.events(group_id) if r["event"] == "rebalance_started")

    def generation(self, group_id: str) -> int:
        return max((r["generation_id"] for r in self.events(group_id)), default=0)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    events_path = tmp_path_factory.mktemp("coordinator") / "events.jsonl"
    process, port = start_serve("events:4,wide:6", "--events", str(events_path))
    try:
        yield Served(f"127.0.0.1:{port}", events_path, process)
    finally:
        process.terminate()
        process.wait(timeout=10)


def _wait(predicate: Any, timeout_s: float, what: str, describe: Any = None) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}: {describe() if describe else ''}")
        time.sleep(0.2)


KINDS = ["confluent", "kafka-python", "aiokafka", "java"]


def _xfail_if_client_stalled(served: Served, group: str, members: dict[str, Any]) -> None:
    """A live client process whose member the coordinator expired for missing heartbeats has
    stalled on its own side. Seen with kafka-python 3.x (about 1 run in 20 on this loaded VM):
    after a leader rejoin its main thread waits in `ensure_coordinator_ready` on a
    FindCoordinator that never reaches the wire (the server log shows every request it sent
    answered, and no new request or connection from it), and its heartbeat thread stops."""
    stalled = [
        row["group_instance_id"]
        for row in served.events(group)
        if row["event"] == "member_expired"
        and row["reason"] == "session timeout"
        and row["group_instance_id"] in members
        and members[row["group_instance_id"]].process.poll() is None
    ]
    if stalled:
        pytest.xfail(f"client-side stall of live member(s) {stalled}: the coordinator expired them")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_static_rolling_bounce_does_not_rebalance(served: Served, kind: str) -> None:
    """KIP-345 on the reference coordinator with a real client: restarting each static member
    (no LeaveGroup on close) keeps the generation and every member's partitions."""
    from demo.clients import ClientKind, ConsumerSpec, start_consumer

    group = f"static-{kind}"

    def spec(instance: str) -> ConsumerSpec:
        return ConsumerSpec(
            kind=ClientKind(kind),
            bootstrap=served.bootstrap,
            group_id=group,
            topics=("events",),
            group_instance_id=instance,
            client_id=f"{kind}-{instance}",
            # KIP-345's promise is a bounce within the session timeout. A Java member's restart
            # (JVM start to JoinGroup) took over 6 s once on a loaded 2-core machine beside the
            # suite's other xdist worker (docs/ci.md); nothing here waits on the timeout itself.
            session_timeout_ms=15_000,
        )

    members = {name: start_consumer(spec(name)) for name in ("a", "b")}
    try:
        for member in members.values():
            member.wait_assigned(60_000)
        try:
            _wait(
                lambda: all(
                    (last := m.last_assignment()) is not None and len(last.partitions) == 2
                    for m in members.values()
                ),
                60,
                "both static members to hold two partitions",
                lambda: {
                    "clients": {n: m.snapshot()[-4:] for n, m in members.items()},
                    "coordinator": served.events(group)[-12:],
                },
            )
        except AssertionError:
            _xfail_if_client_stalled(served, group, members)
            raise
        before = {name: m.last_assignment().partitions for name, m in members.items()}  # type: ignore[union-attr]
        rebalances, generation = served.rebalances(group), served.generation(group)
        for name in ("a", "b"):
            members[name].stop()
            members[name] = start_consumer(spec(name))
            assigned = members[name].wait_assigned(60_000)
            assert assigned.partitions == before[name]
        time.sleep(1)
        assert served.rebalances(group) == rebalances
        assert served.generation(group) == generation
        joins = [r for r in served.events(group) if r["event"] == "member_joined"]
        assert [r["group_instance_id"] for r in joins[-2:]] == ["a", "b"]
    finally:
        for member in members.values():
            member.stop()


@pytest.mark.integration
@pytest.mark.slow
def test_dynamic_and_mixed_rolling_bounce_rebalances(served: Served) -> None:
    """Members of every client kind (Java 3.9 static, Java 2.4.1 and the Python clients dynamic)
    share a group; bouncing the dynamic ones rebalances each time and the partitions stay split."""
    from demo.clients import ClientKind, ConsumerSpec, start_consumer

    group = "mixed"
    topic = ("wide",)
    specs = {
        "confluent": ConsumerSpec(ClientKind.CONFLUENT, served.bootstrap, group, topic, client_id="conf"),
        "kafka-python": ConsumerSpec(ClientKind.KAFKA_PYTHON, served.bootstrap, group, topic, client_id="kp"),
        "java": ConsumerSpec(
            ClientKind.JAVA, served.bootstrap, group, topic, group_instance_id="java-static"
        ),
        "java-2.4": ConsumerSpec(
            ClientKind.JAVA, served.bootstrap, group, topic, client_id="j24", java_client_version="2.4.1"
        ),
        "aiokafka": ConsumerSpec(ClientKind.AIOKAFKA, served.bootstrap, group, topic, client_id="aio"),
    }
    members = {name: start_consumer(s) for name, s in specs.items()}

    def settled() -> bool:
        lasts = [m.last_assignment() for m in members.values()]
        if any(last is None for last in lasts):
            return False
        owned = [p for last in lasts for p in last.partitions]  # type: ignore[union-attr]
        return sorted(owned) == [f"wide-{i}" for i in range(6)]

    try:
        _wait(settled, 90, "five members to split six partitions")
        for name in ("confluent", "kafka-python", "java-2.4"):
            rebalances = served.rebalances(group)
            members[name].stop()
            members[name] = start_consumer(specs[name])
            members[name].wait_assigned(60_000)
            _wait(
                settled,
                90,
                f"the group to settle after bouncing {name}",
                lambda: {n: m.snapshot()[-4:] for n, m in members.items()},
            )
            assert served.rebalances(group) > rebalances
        left = [r for r in served.events(group) if r["event"] == "member_left"]
        assert len(left) >= 3  # dynamic members send LeaveGroup when they close
    finally:
        for member in members.values():
            member.stop()
