"""Kafka's own `kafka-consumer-groups` (ConsumerGroupCommand from the kafka-tools artifact, 3.9.2
and 4.3.1, unchanged) against `coordinator serve` and a real broker (issue 15): `--list`,
`--describe --members --verbose`, `--describe --state`, `--describe --offsets` and
`--reset-offsets --to-earliest --execute` print the same, once what only differs by
construction is normalised (member ids, client hosts, the coordinator's address and node id).

Each side gets the same groups over the wire: `live`, one static consumer-protocol member
(subscribed to the topic, assigned both its partitions, offsets 5 and 7 committed) kept Stable
by the open connection; `empty`, the same left Empty by a LeaveGroup. The topic has two partitions and no
records on either side (log end offset 0).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from harness.lines import KAFKA_4X
from proxy.wire.consumer_protocol import encode_assignment, encode_subscription
from replay.coordinator import requests as Q
from tests.support.admin_tool import both_sides, consumer_groups
from tests.support.serve import WireClient, start_serve

# What the tools log (slf4j, log4j, their config dumps: tab-indented) rather than print.
LOG_LINE = re.compile(r"^(\[|\t|SLF4J|log4j:|WARNING|OpenJDK)")
TOOL_VERSIONS = {"3.9.2": "scala-3.9", "4.3.1": "new-coordinator"}  # tool -> serve --behaviour


async def _setup(port: int, empty: str, live: str, topic: str) -> tuple[WireClient, list[str]]:
    """The two groups; returns the connection keeping `live` Stable and the member ids issued."""
    client = await WireClient.connect(port, "admin-tool-setup")

    async def call(request: Any) -> Any:
        return await client.call(request, timeout_s=60)

    subscription = encode_subscription([topic])
    assignment = encode_assignment({topic: [0, 1]})
    member_ids = []
    for group_id, instance_id in ((empty, None), (live, "static-live")):  # live: a static member
        api_version = 3 if instance_id is None else 5
        joined = await call(
            Q.join_group(
                api_version, group_id, group_instance_id=instance_id, session_timeout_ms=300_000,
                rebalance_timeout_ms=60_000, protocols=(("range", subscription),),
            )
        )  # fmt: skip
        member_id = joined.member_id
        member_ids.append(member_id)
        synced = await call(
            Q.sync_group(
                api_version, group_id, joined.generation_id, member_id, group_instance_id=instance_id,
                assignments={member_id: assignment},
            )
        )  # fmt: skip
        assert synced.error_code == 0, synced
        committed = await call(
            Q.offset_commit(
                8, group_id, joined.generation_id, member_id, {(topic, 0): 5, (topic, 1): 7},
                group_instance_id=instance_id,
            )
        )  # fmt: skip
        assert {p.error_code for t in committed.topics for p in t.partitions} == {0}, committed
        if group_id == empty:
            await call(Q.leave_group(3, group_id, [(member_id, None)]))
    return client, member_ids


def _tool(classpath: str, port: int, *args: str) -> tuple[int, str]:
    done = consumer_groups(classpath, port, *args, timeout_s=180)
    return done.returncode, done.stdout + done.stderr


def _normalised(text: str, port: int, member_ids: list[str], groups: tuple[str, ...]) -> list[str]:
    """Lines with their columns single-spaced; ids, hosts and the coordinator made generic; log
    lines dropped. `--list` output is cut to this test's groups."""
    for index, member_id in enumerate(member_ids):
        text = text.replace(member_id, f"<member-{index}>")
    text = text.replace(f"127.0.0.1:{port}", "<coordinator>").replace(f"localhost:{port}", "<coordinator>")
    text = re.sub(r"<coordinator>\s+\(\d+\)", "<coordinator> (<id>)", text)
    text = re.sub(r"/127\.0\.0\.1\b|/localhost\b", "<host>", text)
    lines = []
    for raw in text.splitlines():
        if LOG_LINE.match(raw) or " INFO " in raw or " WARN " in raw:
            continue
        line = " ".join(raw.split())
        if line:
            lines.append(line)
    if all(" " not in line for line in lines):  # --list: one group id per line
        lines = sorted(line for line in lines if line in groups)
    return lines


Outputs = list[tuple[str, int, list[str]]]  # (command, exit code, normalised lines)


def _tool_outputs(
    classpath: str,
    port: int,
    setup: Callable[[], Awaitable[tuple[WireClient, list[str]]]],
    commands: list[list[str]],
    groups: tuple[str, ...],
) -> Outputs:
    """The groups made by `setup` (which returns the connection keeping them alive and the member
    ids to normalise), then each tool command's exit code and normalised lines."""
    loop = asyncio.new_event_loop()
    try:
        client, member_ids = loop.run_until_complete(setup())
        outputs = []
        for args in commands:
            code, text = _tool(classpath, port, *args)
            outputs.append((" ".join(args[:2]), code, _normalised(text, port, member_ids, groups)))
        client.close()
    finally:
        loop.close()
    return outputs


def _outputs(classpath: str, port: int, empty: str, live: str, topic: str) -> Outputs:
    commands = [
        ["--list"],
        ["--describe", "--group", live, "--members", "--verbose"],
        ["--describe", "--group", live, "--state"],
        ["--describe", "--group", live, "--offsets"],
        ["--describe", "--group", empty, "--offsets"],
        ["--describe", "--group", empty, "--state"],
        ["--reset-offsets", "--group", live, "--topic", topic, "--to-earliest", "--execute"],
        ["--reset-offsets", "--group", empty, "--topic", topic, "--to-earliest", "--execute"],
        ["--describe", "--group", empty, "--offsets"],
    ]
    return _tool_outputs(classpath, port, lambda: _setup(port, empty, live, topic), commands, (empty, live))


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("tool_version", list(TOOL_VERSIONS))
def test_kafka_consumer_groups_prints_the_same_against_serve_and_kafka(
    tool_version: str, broker_factory: Callable[..., Any], make_topic: Callable[..., str]
) -> None:
    from harness.lines import KAFKA_39
    from harness.maven import tools_libs
    from tests.serve_fuzz import wait_coordinator_ready

    classpath = f"{tools_libs(tool_version)}/*"
    if tool_version == "3.9.2":
        broker = broker_factory(KAFKA_39, new_coordinator=False)
    else:
        broker = broker_factory(KAFKA_4X)
    topic = make_topic(broker.bootstrap, 2, prefix="tool")
    empty, live = f"empty-{topic}", f"live-{topic}"
    port = int(broker.bootstrap.rpartition(":")[2])
    asyncio.run(wait_coordinator_ready("127.0.0.1", port, (empty, live)))
    process, served_port = start_serve(
        f"{topic}:2", "--behaviour", TOOL_VERSIONS[tool_version],
        group_settings=("--group-initial-rebalance-delay-ms", "0"),
    )  # fmt: skip
    try:
        kafka, served = both_sides(
            lambda: _outputs(classpath, port, empty, live, topic),
            lambda: _outputs(classpath, served_port, empty, live, topic),
        )
    finally:
        process.terminate()
        process.wait(timeout=10)
    for (what, kafka_code, kafka_lines), (_, served_code, served_lines) in zip(kafka, served, strict=True):
        assert (served_code, served_lines) == (kafka_code, kafka_lines), (what, served, kafka)
    # The comparison compares something: each command printed its table or its error.
    assert kafka[0][2] == sorted([empty, live])
    member_row = f"{live} <member-1> static-live <host> admin-tool-setup 2 "
    assert any(line.startswith(member_row) for line in kafka[1][2]), kafka[1]
    assert any("Stable" in line for line in kafka[2][2]) and any("Empty" in line for line in kafka[5][2])
    reset = " ".join(kafka[7][2])  # 3.9.2 prints the rows without line breaks
    assert reset.startswith("GROUP TOPIC PARTITION NEW-OFFSET"), reset
    assert reset.count(f"{empty} {topic}") == 2, reset


# A mixed group (issue 13): one consumer-protocol member and one classic member living in the
# consumer group the first one's heartbeat converted (GroupMetadataManager
# .consumerGroupHeartbeat -> convertToConsumerGroup, then classicGroupJoinToConsumerGroup for the
# classic member's rejoin). The 4.3.1 tool describes it with ConsumerGroupDescribe.
MIXED_CONSUMER_ID = "mixed-consumer-member-0000001"


async def _settle_mixed(client: WireClient, group: str, topic: str, member_id: str, deadline_s: float) -> str:
    """The classic member A (static, instance `classic-a`) forms the group; the consumer member
    joins and converts it; both heartbeat (A rejoining when told) until the group is Stable with
    both holding their targets. Returns A's member id."""
    from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest

    from replay.coordinator.consumer import HeartbeatRequest
    from replay.coordinator.consumer.wire import heartbeat_response_from_kio, heartbeat_to_kio

    async def call(request: Any) -> Any:
        return await client.call(request, timeout_s=60)

    subscription = encode_subscription([topic])

    async def classic_round(member: str, generation: int | None) -> tuple[str, int]:
        if generation is not None:
            beat = await call(Q.heartbeat(3, group, generation, member, group_instance_id="classic-a"))
            if beat.error_code == 0:
                return member, generation
        joined = await call(
            Q.join_group(
                5, group, member, group_instance_id="classic-a", session_timeout_ms=300_000,
                rebalance_timeout_ms=60_000, protocols=(("range", subscription),),
            )
        )  # fmt: skip
        assert joined.error_code == 0, joined
        assignments = None
        if joined.leader == joined.member_id:  # the classic group's leader assigns everything
            assignments = {joined.member_id: encode_assignment({topic: [0, 1]})}
        synced = await call(
            Q.sync_group(
                5, group, joined.generation_id, joined.member_id, group_instance_id="classic-a",
                assignments=assignments,
            )
        )  # fmt: skip
        assert synced.error_code in (0, 27), synced  # 27: REBALANCE_IN_PROGRESS, rejoin next round
        return joined.member_id, joined.generation_id

    classic_id, generation = await classic_round("", None)
    epoch, owned = 0, {}
    loop = asyncio.get_running_loop()
    while True:
        request = HeartbeatRequest(
            group, member_id, epoch, rebalance_timeout_ms=60_000 if epoch == 0 else -1,
            subscribed_topic_names=(topic,) if epoch == 0 else None, owned=owned,
        )  # fmt: skip
        answer = heartbeat_response_from_kio(await call(heartbeat_to_kio(request)))
        assert answer.error_code == 0, answer
        epoch = answer.member_epoch
        if answer.assignment is not None:
            owned = dict(answer.assignment)
        classic_id, generation = await classic_round(classic_id, generation)
        describe = ConsumerGroupDescribeRequest(group_ids=(group,), include_authorized_operations=False)
        state = (await call(describe)).groups[0]
        if state.group_state == "Stable" and all(m.member_epoch == state.group_epoch for m in state.members):
            return classic_id
        assert loop.time() < deadline_s, state
        await asyncio.sleep(0.3)


def _mixed_outputs(classpath: str, port: int, group: str, topic: str) -> Outputs:
    async def setup() -> tuple[WireClient, list[str]]:
        client = await WireClient.connect(port, "admin-tool-mixed")
        deadline = asyncio.get_running_loop().time() + 120
        classic_id = await _settle_mixed(client, group, topic, MIXED_CONSUMER_ID, deadline)
        return client, [classic_id, MIXED_CONSUMER_ID]

    commands = [
        ["--list"],
        ["--describe", "--group", group, "--members", "--verbose"],
        ["--describe", "--group", group, "--state"],
    ]
    outputs = _tool_outputs(classpath, port, setup, commands, (group,))
    what, code, lines = outputs[1]
    rows = [lines[0], *sorted(_settled_row(line) for line in lines[1:])]  # Kafka's member map order
    return [outputs[0], (what, code, rows), *outputs[2:]]


# A member row of `--describe --members --verbose` on a consumer group (4.3.1 tool): ...
# #PARTITIONS CURRENT-EPOCH CURRENT-ASSIGNMENT TARGET-EPOCH TARGET-ASSIGNMENT UPGRADED.
MEMBER_ROW = re.compile(r" (\d+) (\d+) (\S+) (\d+) (\S+) (true|false)$")


def _settled_row(line: str) -> str:
    """A member row with its epochs and partitions made generic once it is checked settled
    (current epoch and assignment equal to the target). How many epoch bumps a settle takes, and
    which partition a member keeps, are Kafka's timing (4.3 computes targets in batches, every
    group.consumer.assignment.interval.ms) and the HashMap order of its random member ids;
    the partition count, instance id, client, host and UPGRADED stay compared."""
    match = MEMBER_ROW.search(line)
    if match is None:
        return line
    count, epoch, assignment, target_epoch, target, upgraded = match.groups()
    assert (epoch, assignment) == (target_epoch, target), line
    return f"{line[: match.start()]} {count} <epoch> <partitions> <epoch> <partitions> {upgraded}"


@pytest.mark.integration
@pytest.mark.slow
def test_kafka_consumer_groups_describes_a_mixed_group_as_kafka_does(
    broker_factory: Callable[..., Any], make_topic: Callable[..., str]
) -> None:
    """`--list`, `--describe --members --verbose` and `--describe --state` of the 4.3.1 tool on a
    consumer group holding a consumer-protocol member and a classic member: the same against
    Kafka 4.3.1 (default policy bidirectional) and `coordinator serve --behaviour new-coordinator
    --consumer-group-migration-policy bidirectional`.
    The consumer member's heartbeat session (45 s by default on both) outlives the three tool runs."""
    from harness.maven import tools_libs
    from tests.serve_fuzz import wait_coordinator_ready

    classpath = f"{tools_libs('4.3.1')}/*"
    broker = broker_factory(KAFKA_4X)
    topic = make_topic(broker.bootstrap, 2, prefix="mixed")
    group = f"mixed-{topic}"
    port = int(broker.bootstrap.rpartition(":")[2])
    asyncio.run(wait_coordinator_ready("127.0.0.1", port, (group,)))
    process, served_port = start_serve(
        f"{topic}:2", "--behaviour", "new-coordinator", "--consumer-group-migration-policy", "bidirectional",
        group_settings=("--group-initial-rebalance-delay-ms", "0"),
    )  # fmt: skip
    try:
        kafka, served = both_sides(
            lambda: _mixed_outputs(classpath, port, group, topic),
            lambda: _mixed_outputs(classpath, served_port, group, topic),
        )
    finally:
        process.terminate()
        process.wait(timeout=10)
    for (what, kafka_code, kafka_lines), (_, served_code, served_lines) in zip(kafka, served, strict=True):
        assert (served_code, served_lines) == (kafka_code, kafka_lines), (what, served, kafka)
    assert kafka[0][2] == [group]
    members = kafka[1][2]
    assert any(line.startswith(f"{group} <member-1> ") for line in members), members  # consumer protocol
    assert any(line.startswith(f"{group} <member-0> classic-a ") for line in members), members  # classic
    assert any("Stable" in line for line in kafka[2][2]), kafka[2]
