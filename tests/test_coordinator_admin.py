"""DeleteGroups and OffsetDelete with Kafka's semantics (issue 15), on the sans-IO coordinator and
side by side with a real broker over the wire.

The same script of requests runs against `coordinator serve` and Kafka 3.9: a consumer group
subscribed to one topic, with offsets committed for that topic and another; its answers (error
codes only: member ids differ) must be identical.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from proxy.wire import (
    ApiKey,
    ErrorCode,
    build_request,
    request_class,
)
from proxy.wire.consumer_protocol import encode_subscription
from replay.coordinator import CoordinatorConfig, KafkaBehaviour
from replay.coordinator import requests as Q
from tests.coordinator_sim import Sim
from tests.support.admin_tool import both_sides, consumer_groups
from tests.support.serve import WireClient, start_serve

E = ErrorCode

NO_INITIAL_DELAY = ("--group-initial-rebalance-delay-ms", "0")


def delete_groups(*groups: str) -> Any:
    return build_request(ApiKey.DELETE_GROUPS, 2, groups_names=groups)


def offset_delete(group_id: str, offsets: dict[str, tuple[int, ...]]) -> Any:
    topic_cls = request_class(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestTopic")
    partition_cls = request_class(ApiKey.OFFSET_DELETE, 0, "OffsetDeleteRequestPartition")
    topics = tuple(
        topic_cls(name=t, partitions=tuple(partition_cls(partition_index=p) for p in ps))
        for t, ps in offsets.items()
    )
    return build_request(ApiKey.OFFSET_DELETE, 0, group_id=group_id, topics=topics)


def deleted(response: Any) -> list[tuple[str, E]]:
    return [(r.group_id, r.error_code) for r in response.results]


def offsets_deleted(response: Any) -> tuple[E, list[tuple[str, int, E]]]:
    return response.error_code, sorted(
        (t.name, p.partition_index, p.error_code) for t in response.topics for p in t.partitions
    )


def stable_consumer(sim: Sim, group_id: str, topic: str) -> str:
    """One member subscribed to `topic` joins and syncs; its member id."""
    metadata = encode_subscription([topic])
    cid = sim.send(1, 3, Q.join_group(3, group_id, protocols=(("range", metadata),)))
    sim.run_timers(sim.now_ms)
    joined = sim.answer(cid)
    assert joined is not None and joined.error_code == E.none
    sim.call(1, 3, Q.sync_group(3, group_id, 1, joined.member_id, assignments={joined.member_id: b""}))
    return str(joined.member_id)


@pytest.mark.parametrize("behaviour", list(KafkaBehaviour))
def test_delete_groups_and_offsets_follow_kafka(behaviour: KafkaBehaviour) -> None:
    sim = Sim(CoordinatorConfig(group_initial_rebalance_delay_ms=0, kafka_behaviour=behaviour))
    member_id = stable_consumer(sim, "g", "t")
    sim.call(1, 8, Q.offset_commit(8, "g", 1, member_id, {("t", 0): 5, ("u", 0): 7, ("u", 1): 8}))

    assert deleted(sim.call(1, 2, delete_groups("g", "nope", ""))) == [
        ("g", E.non_empty_group),
        ("nope", E.group_id_not_found),
        ("", E.group_id_not_found),
    ]
    assert offsets_deleted(sim.call(1, 0, offset_delete("g", {"t": (0,), "u": (0,)}))) == (
        E.none,
        [("t", 0, E.group_subscribed_to_topic), ("u", 0, E.none)],
    )
    assert set(sim.coordinator.offsets.of("g")) == {("t", 0), ("u", 1)}
    assert offsets_deleted(sim.call(1, 0, offset_delete("nope", {"t": (0,)}))) == (E.group_id_not_found, [])
    assert offsets_deleted(sim.call(1, 0, offset_delete("", {"t": (0,)}))) == (E.invalid_group_id, [])

    sim.call(1, 3, Q.leave_group(3, "g", [(member_id, None)]))
    assert sim.state("g") == "Empty"
    # Empty: every offset asked goes, subscribed or not.
    assert offsets_deleted(sim.call(1, 0, offset_delete("g", {"t": (0,)}))) == (E.none, [("t", 0, E.none)])
    assert deleted(sim.call(1, 2, delete_groups("g"))) == [("g", E.none)]
    assert "g" not in sim.coordinator.groups and not sim.coordinator.offsets.has_offsets("g")
    assert deleted(sim.call(1, 2, delete_groups("g"))) == [("g", E.group_id_not_found)]


def test_a_live_group_of_another_protocol_type_refuses_offset_delete() -> None:
    sim = Sim()
    cid = sim.send(1, 3, Q.join_group(3, "c", protocol_type="connect"))
    sim.run_timers(sim.now_ms)
    assert sim.answer(cid).error_code == E.none  # type: ignore[union-attr]
    assert offsets_deleted(sim.call(1, 0, offset_delete("c", {"t": (0,)}))) == (E.non_empty_group, [])


def test_offset_delete_of_the_last_offsets_removes_an_empty_group_on_scala_only() -> None:
    """Scala's handleDeleteOffsets runs cleanupGroupMetadata on the group (Empty and no offsets
    left: Dead, removed); the new coordinator's deleteOffsets leaves that to the periodic cleanup."""
    for behaviour, kept in ((KafkaBehaviour.SCALA_3_9, False), (KafkaBehaviour.NEW_COORDINATOR, True)):
        sim = Sim(CoordinatorConfig(group_initial_rebalance_delay_ms=0, kafka_behaviour=behaviour))
        sim.call(1, 8, Q.offset_commit(8, "simple", -1, "", {("t", 0): 1}))
        assert offsets_deleted(sim.call(1, 0, offset_delete("simple", {"t": (0,)}))) == (
            E.none,
            [("t", 0, E.none)],
        )
        assert ("simple" in sim.coordinator.groups) is kept


# --- the same script against serve and a real broker ---------------------------------------------


async def _script(port: int, group_id: str, topic: str, other: str) -> list[Any]:
    client = await WireClient.connect(port, "admin-test")
    writer = client.writer

    async def call(request: Any) -> Any:
        return await client.call(request, timeout_s=30)

    answers: list[Any] = []
    metadata = encode_subscription([topic])
    joined = await call(Q.join_group(3, group_id, protocols=(("range", metadata),)))
    member_id = joined.member_id
    answers.append(("join", joined.error_code))
    synced = await call(
        Q.sync_group(3, group_id, joined.generation_id, member_id, assignments={member_id: b""})
    )
    answers.append(("sync", synced.error_code))
    committed = await call(
        Q.offset_commit(8, group_id, joined.generation_id, member_id, {(topic, 0): 5, (other, 0): 7})
    )
    answers.append(("commit", sorted(p.error_code for t in committed.topics for p in t.partitions)))
    answers.append(("delete live", [code for _, code in deleted(await call(delete_groups(group_id)))]))
    answers.append(
        (
            "offset delete live",
            offsets_deleted(await call(offset_delete(group_id, {topic: (0,), other: (0,)}))),
        )
    )
    answers.append(
        ("offset delete unknown", offsets_deleted(await call(offset_delete(f"{group_id}-x", {topic: (0,)}))))
    )
    left = await call(Q.leave_group(3, group_id, [(member_id, None)]))
    answers.append(("leave", left.error_code))
    answers.append(
        ("offset delete empty", offsets_deleted(await call(offset_delete(group_id, {topic: (0,)}))))
    )
    answers.append(("delete empty", [code for _, code in deleted(await call(delete_groups(group_id)))]))
    answers.append(("delete again", [code for _, code in deleted(await call(delete_groups(group_id)))]))
    writer.close()
    return answers


@pytest.mark.integration
def test_delete_groups_and_offsets_answer_like_kafka(kafka_39: Any, make_topic: Callable[..., str]) -> None:
    from tests.serve_fuzz import wait_coordinator_ready

    topic, other = (
        make_topic(kafka_39.bootstrap, 1, prefix="adm"),
        make_topic(kafka_39.bootstrap, 1, prefix="adm"),
    )
    group_id = f"admin-{topic}"
    port = int(kafka_39.bootstrap.rpartition(":")[2])
    asyncio.run(wait_coordinator_ready("127.0.0.1", port, (group_id,)))
    kafka = asyncio.run(_script(port, group_id, topic, other))

    process, served_port = start_serve(f"{topic},{other}", group_settings=NO_INITIAL_DELAY)
    try:
        served = asyncio.run(_script(served_port, group_id, topic, other))
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert served == kafka
    live = dict(kafka)["offset delete live"]
    assert live[0] == E.none
    assert {(t, code) for t, _, code in live[1]} == {(other, E.none), (topic, E.group_subscribed_to_topic)}


# --- Kafka's own admin tool against serve and a real broker ---------------------------------------


def _kafka_tools_classpath() -> str:
    """kafka-tools 3.9.2 and its dependencies (fetched from Maven Central into the cache once)."""
    from harness.maven import tools_libs

    return f"{tools_libs('3.9.2')}/*"


async def _admin_setup(port: int, empty: str, live: str, topic: str, other: str) -> asyncio.StreamWriter:
    """`empty`: an Empty consumer group with offsets for both topics; `live`: a one-member
    consumer group subscribed to `topic`, kept Stable while the returned connection is open."""
    client = await WireClient.connect(port, "admin-setup")
    writer = client.writer

    async def call(request: Any) -> Any:
        return await client.call(request, timeout_s=30)

    metadata = encode_subscription([topic])
    for group_id in (empty, live):
        joined = await call(
            Q.join_group(3, group_id, session_timeout_ms=60_000, protocols=(("range", metadata),))
        )
        member_id = joined.member_id
        await call(Q.sync_group(3, group_id, joined.generation_id, member_id, assignments={member_id: b""}))
        await call(
            Q.offset_commit(8, group_id, joined.generation_id, member_id, {(topic, 0): 5, (other, 0): 7})
        )
        if group_id == empty:
            await call(Q.leave_group(3, group_id, [(member_id, None)]))
    return writer


def _tool_outputs(classpath: str, port: int, empty: str, live: str, topic: str) -> list[tuple[int, str]]:
    outputs = []
    for args in (
        ["--delete-offsets", "--group", live, "--topic", topic],
        ["--delete", "--group", live],
        ["--delete-offsets", "--group", empty, "--topic", topic],
        ["--delete", "--group", empty],
        ["--delete", "--group", empty],
    ):
        done = consumer_groups(classpath, port, *args, timeout_s=120)
        outputs.append((done.returncode, " ".join(done.stdout.split())))
    return outputs


@pytest.mark.integration
@pytest.mark.slow
def test_kafka_consumer_groups_delete_and_delete_offsets_against_serve(
    kafka_39: Any, make_topic: Callable[..., str]
) -> None:
    """`kafka-consumer-groups --delete` / `--delete-offsets` (the 3.9.2 tool, unchanged) print
    the same against serve as against Kafka 3.9 (issue 15)."""
    classpath = _kafka_tools_classpath()
    topic, other = (
        make_topic(kafka_39.bootstrap, 1, prefix="cg"),
        make_topic(kafka_39.bootstrap, 1, prefix="cg"),
    )
    empty, live = f"empty-{topic}", f"live-{topic}"
    port = int(kafka_39.bootstrap.rpartition(":")[2])

    from tests.serve_fuzz import wait_coordinator_ready

    asyncio.run(wait_coordinator_ready("127.0.0.1", port, (empty, live)))

    def run(target_port: int) -> list[tuple[int, str]]:
        async def setup() -> asyncio.StreamWriter:
            return await _admin_setup(target_port, empty, live, topic, other)

        loop = asyncio.new_event_loop()
        try:
            writer = loop.run_until_complete(setup())
            outputs = _tool_outputs(classpath, target_port, empty, live, topic)
            writer.close()
        finally:
            loop.close()
        return outputs

    process, served_port = start_serve(f"{topic},{other}", group_settings=NO_INITIAL_DELAY)
    try:
        kafka, served = both_sides(lambda: run(port), lambda: run(served_port))
    finally:
        process.terminate()
        process.wait(timeout=10)
    assert served == kafka
    assert "GroupNotEmptyException" in kafka[1][1] or "not empty" in kafka[1][1]
    assert "was successful" in kafka[3][1]
