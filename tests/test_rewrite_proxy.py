"""The live proxy with a rewrite policy, between real Java 3.9 consumers and a real 3.9 broker.

Policy: re-encode JoinGroup to v5 (the `reason` field may drop). The capture's two legs show each
JoinGroup as the client sent it (v9) and as the broker saw it (v5); a static member that rejoins
after a bounce gets no SkipAssignment, because a v5 coordinator cannot say it (KIP-814).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from demo.clients import ClientKind, ConsumerSpec, start_consumer
from harness.admin import create_topic
from harness.lines import KAFKA_39
from proxy.capture.reader import exchanges, read_capture
from proxy.wire import ApiKey
from tests.support.proxy import ProxyProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]

POLICY = """\
name: joingroup-v5
reencode: {JoinGroup: 5}
allow_drop: [reason]
"""


@pytest.mark.timeout(400)
def test_java_group_behind_a_joingroup_v5_proxy(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    topic = f"rw-{os.getpid()}"
    create_topic(broker.bootstrap, topic, 4)
    policy = tmp_path / "joingroup-v5.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    capture_path = tmp_path / "rewrite.pcapng"
    proxy = ProxyProcess(
        "--upstream", broker.bootstrap, "--record", str(capture_path), "--policy", str(policy)
    )  # fmt: skip
    bootstrap = proxy.bootstrap
    specs = [
        ConsumerSpec(
            ClientKind.JAVA,
            bootstrap,
            group_id=f"g-{topic}",
            topics=(topic,),
            group_instance_id=f"inst-{i}",
            client_id=f"java-{i}",
            session_timeout_ms=30_000,
        )
        for i in range(2)
    ]
    consumers = []
    try:
        for spec in specs:
            consumer = start_consumer(spec)
            consumers.append(consumer)
            consumer.wait_for(lambda e: e.event == "assigned" and bool(e.partitions), 120_000)
        # Static bounce of every member, one after the other: one of them is the leader.
        for index, spec in enumerate(specs):
            consumers[index].stop()
            consumers[index] = start_consumer(spec)
            consumers[index].wait_for(lambda e: e.event == "assigned" and bool(e.partitions), 120_000)
    finally:
        for consumer in consumers:
            consumer.stop()
        log = proxy.stop().stderr
    assert "Traceback" not in log, log

    capture = read_capture(capture_path)
    assert capture.header["policy"] == "joingroup-v5"
    client_joins = [ex for ex in exchanges(capture, "client") if ex.request.api_key == ApiKey.JOIN_GROUP]
    upstream_joins = [ex for ex in exchanges(capture, "upstream") if ex.request.api_key == ApiKey.JOIN_GROUP]
    assert client_joins and len(client_joins) == len(upstream_joins)
    assert {ex.request.api_version for ex in client_joins} == {9}
    assert {ex.request.api_version for ex in upstream_joins} == {5}
    assert all(ex.request.rewritten for ex in client_joins)

    responses = [ex.decode() for ex in client_joins if ex.response is not None]
    joined = [(request, response) for request, response in responses if int(response.error_code) == 0]
    assert not any(response.skip_assignment for _, response in joined)
    by_instance: dict[str, list[tuple[object, object]]] = {}
    for request, response in joined:
        by_instance.setdefault(request.group_instance_id, []).append((request, response))
    assert sorted(by_instance) == ["inst-0", "inst-1"]
    # The leader: the member a response named leader of a generation in which it was the member.
    leaders = [
        request.group_instance_id for request, response in joined if response.leader == response.member_id
    ]
    assert leaders, "no JoinGroup response named its own member the leader"
    leader = leaders[-1]
    # A restarted process joins with no member id: the first such join started it, the next one is
    # the bounce.
    fresh = [response for request, response in by_instance[leader] if request.member_id == ""]
    assert len(fresh) >= 2, f"the leader {leader} never rejoined after its bounce"
    rejoin = fresh[1]
    # Answered by a v5 coordinator and converted back to v9: no SkipAssignment, and the leader id is
    # not the rejoiner's new member id, so it does not run an assignment (pre-KIP-814 behaviour).
    assert rejoin.skip_assignment is False
    assert rejoin.leader != rejoin.member_id
