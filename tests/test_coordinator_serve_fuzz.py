"""Hostile-but-valid request fuzz against `coordinator serve` and a real broker (issue 18).

The quick part of the reliability suite: a few seconds of tests/serve_fuzz.py per target with
the same seed. serve must close no connection (Kafka closes none under this fuzz), keep firing
timers (a fresh group still gets its JoinGroup answered), and answer no error code the broker
never answers. The long run is bench/soak_serve.py.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.serve_fuzz import FuzzReport, compare, fuzz
from tests.support.serve import start_serve

SEED = 18
FUZZ_S = 6.0
TOPIC_PARTITIONS = 3

# The two runs see the groups in different states (timing, member ids), so the sets of answered
# codes differ a little from run to run. A code serve answered and this broker run did not must
# still be one Kafka's handler answers that API with (GroupCoordinator.scala, KafkaApis):
KAFKA_ANSWERS_TOO: dict[str, frozenset[str]] = {
    # doSyncGroup: `!group.isProtocolTypeAndNameConsistent(...)` -> INCONSISTENT_GROUP_PROTOCOL;
    # validateSyncGroup / doSyncGroup: unknown member, generation, rebalance, fenced.
    "SYNC_GROUP": frozenset(
        {"inconsistent_group_protocol", "illegal_generation", "rebalance_in_progress", "fenced_instance_id"}
    ),
    # doCurrentMemberJoinGroup / handleJoinGroup; UNKNOWN_SERVER_ERROR when the join completes
    # inside the request and selectProtocol throws (KafkaApis.handleError).
    "JOIN_GROUP": frozenset(
        {"group_max_size_reached", "member_id_required", "fenced_instance_id", "unknown_server_error"}
    ),
    # handleHeartbeat: every validation outcome.
    "HEARTBEAT": frozenset({"illegal_generation", "rebalance_in_progress", "fenced_instance_id"}),
    # handleLeaveGroup: a removal that completes a join phase with no selectable protocol throws.
    "LEAVE_GROUP": frozenset({"fenced_instance_id", "unknown_server_error"}),
    # validateOffsetCommit / doCommitOffsets.
    "OFFSET_COMMIT": frozenset({"illegal_generation", "rebalance_in_progress", "fenced_instance_id"}),
}


@pytest.fixture
def serve() -> Iterator[tuple[subprocess.Popen[str], int]]:
    process, port = start_serve(f"fuzz:{TOPIC_PARTITIONS}")
    try:
        yield process, port
    finally:
        process.terminate()
        process.wait(timeout=10)


def _fuzz(target: str, port: int, topic: str = "fuzz", prefix: str = "fz") -> FuzzReport:
    return asyncio.run(
        fuzz(target, "127.0.0.1", port, seed=SEED, duration_s=FUZZ_S, topic=topic, prefix=prefix)
    )


def test_serve_survives_hostile_requests(serve: tuple[subprocess.Popen[str], int]) -> None:
    process, port = serve
    report = _fuzz("serve", port)
    assert report.requests > 100, report.summary()
    assert report.closed_by_target == 0, report.summary()
    assert report.probe_joined_s is not None, "a fresh group's JoinGroup was not answered: timers dead?"
    assert process.poll() is None
    # The fuzz does reach the JoinGroup that lists a protocol twice, and what it leads to.
    assert ("JOIN_GROUP", "inconsistent_group_protocol") in report.answered


@pytest.mark.integration
def test_serve_answers_like_kafka_under_the_same_fuzz(
    serve: tuple[subprocess.Popen[str], int], kafka_39: Any, make_topic: Callable[..., str]
) -> None:
    topic = make_topic(kafka_39.bootstrap, TOPIC_PARTITIONS, prefix="fuzz")
    host, _, kafka_port = kafka_39.bootstrap.rpartition(":")
    assert host in ("127.0.0.1", "localhost")
    prefix = f"fz{topic.rsplit('-', 1)[-1]}"  # fresh group ids on the shared broker
    kafka = _fuzz("kafka-3.9", int(kafka_port), topic=topic, prefix=prefix)
    process, port = serve
    served = _fuzz("serve", port, topic=topic, prefix=prefix)
    difference = compare(served, kafka)
    detail = json.dumps(difference, indent=1) + f"\n{served.summary()}\n{kafka.summary()}"
    assert served.closed_by_target <= kafka.closed_by_target, detail
    assert served.probe_joined_s is not None and kafka.probe_joined_s is not None, detail
    unexpected = [
        (api, code)
        for api, code in difference["codes_only_serve"]
        # Success is an answer Kafka gives to every API; whether one fuzzed run of the broker
        # happened to succeed at an API depends on timing (seen under load: HEARTBEAT none).
        if code != "none" and code not in KAFKA_ANSWERS_TOO.get(api, ())
    ]
    assert not unexpected, detail
    assert process.poll() is None
