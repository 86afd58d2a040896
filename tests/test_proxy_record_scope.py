"""`--record-scope group` in front of a real broker: Produce and Fetch relayed, recorded as
their headers only.

A confluent-kafka producer and a consumer group move real data through the recording proxy; the
capture must hold the group's frames and their lookups whole and Produce and Fetch frames as
header-only ones (counted by `capture show`, opened by tshark), its
header must say so, its close comments must count every byte, and `replay` must still work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from group_replay import main as group_replay
from harness.lines import KAFKA_39
from proxy.capture.header import GROUP_SCOPE_API_KEYS, RecordScope
from proxy.capture.reader import read_capture
from proxy.capture.writer import CaptureWriter
from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
from proxy.wire import ApiKey
from tests.test_capture_tshark import TSHARK, tshark_fields

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

MESSAGES = 300


def produce_and_consume(bootstrap: str, topic: str, group: str, extra: dict[str, str] | None = None) -> int:
    """Produce MESSAGES records, then consume them all in `group` (committing); returns how many
    the consumer saw. `extra`: client settings (security) for both."""
    from confluent_kafka import Consumer, Producer

    settings = {"bootstrap.servers": bootstrap, **(extra or {})}
    producer = Producer({**settings, "linger.ms": 5})
    for i in range(MESSAGES):
        producer.produce(topic, value=b"x" * 200, key=str(i).encode())
    assert producer.flush(60) == 0
    consumer = Consumer(
        {
            **settings,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
        }
    )
    consumer.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 90
    try:
        while seen < MESSAGES and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            seen += 1
            if seen % 100 == 0 or seen == MESSAGES:
                consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return seen


def _recorded(broker_factory, make_topic, path: Path, scope: RecordScope, partitions: int, name: str) -> None:
    """MESSAGES produced and consumed by a group through a proxy recording `scope` into `path`."""
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    topic = make_topic(broker.bootstrap, partitions, prefix=name)
    recorder = CaptureWriter(path, upstream=broker.bootstrap, record_scope=scope)
    proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(broker.bootstrap)), recorder)
    try:
        assert produce_and_consume(proxy.bootstrap, topic, f"{name}-{os.getpid()}") == MESSAGES
    finally:
        proxy.stop()


def test_group_scope_records_the_group_not_the_data(broker_factory, make_topic, tmp_path: Path) -> None:
    path = tmp_path / "group.pcapng"
    _recorded(broker_factory, make_topic, path, RecordScope.GROUP, 2, "scope")
    capture = read_capture(path)
    assert capture.damage is None
    assert capture.record_scope is RecordScope.GROUP and capture.header["record_scope"] == "group"
    keys = {f.api_key for f in capture.frames if not f.header_only}
    assert ApiKey.PRODUCE not in keys and ApiKey.FETCH not in keys
    assert keys <= GROUP_SCOPE_API_KEYS
    header_only = [f for f in capture.frames if f.header_only]
    assert {ApiKey.PRODUCE, ApiKey.FETCH} <= {f.api_key for f in header_only}
    assert not {f.api_key for f in header_only} & GROUP_SCOPE_API_KEYS
    assert all(len(f.payload) == (8 if f.direction == "request" else 4) for f in header_only)
    assert {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP, ApiKey.OFFSET_COMMIT, ApiKey.API_VERSIONS} <= keys
    # Every byte is still counted: the connections carried far more than the capture holds.
    counted = sum((c.client_bytes or 0) + (c.upstream_bytes or 0) for c in capture.connections.values())
    recorded = sum(len(f.payload) + 4 for f in capture.frames if f.leg == "client")
    assert counted > MESSAGES * 200 > recorded // 10 and counted > recorded
    # `capture show` says what was recorded; replay works from the group frames alone.
    shown = subprocess.run(
        [sys.executable, "-m", "group_replay", "capture", "show", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "300"},
    )
    assert shown.returncode == 0 and "record scope group" in shown.stdout
    assert "closed connections carried" in shown.stdout
    produce_requests = sum(
        f.api_key == ApiKey.PRODUCE and f.direction == "request" and f.leg == "client" for f in header_only
    )
    assert f"Produce {produce_requests} (header only)" in shown.stdout, shown.stdout
    if TSHARK is not None:  # Wireshark opens it: the header-only packets are snapped, not damage
        rows = tshark_fields(path, "kafka.api_key == 11", "kafka.api_key")
        assert rows, "tshark found no JoinGroup"
    out = tmp_path / "events"
    assert group_replay(["replay", str(path), "--out", str(out), "--progress", "off"]) == 0
    rows = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    assert {row["run"] for row in rows} == {"recorded", "reference"}


def test_all_scope_still_records_every_frame(broker_factory, make_topic, tmp_path: Path) -> None:
    path = tmp_path / "all.pcapng"
    _recorded(broker_factory, make_topic, path, RecordScope.ALL, 1, "scope-all")
    capture = read_capture(path)
    assert capture.damage is None and capture.record_scope is RecordScope.ALL
    keys = {f.api_key for f in capture.frames}
    assert {ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.JOIN_GROUP} <= keys
