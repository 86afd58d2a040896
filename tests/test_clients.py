"""Each real client kind joins a group as a static member on a real broker and gets partitions."""

from __future__ import annotations

import shutil
import uuid

import pytest

from demo.clients import (
    JAVA_COMPILE_AGAINST,
    ClientError,
    ClientEvent,
    ClientKind,
    ConsumerSpec,
    command_for,
    compile_cached,
    start_consumer,
)
from harness.lines import KAFKA_39
from tests.support.consumers import static_member_of

KINDS = [
    (ClientKind.CONFLUENT, None),
    (ClientKind.KAFKA_PYTHON, None),
    (ClientKind.AIOKAFKA, None),
    (ClientKind.JAVA, "3.9.2"),
    (ClientKind.JAVA, "2.4.1"),
    (ClientKind.JAVA, "4.3.1"),
]


def _ids(kind_version: tuple[ClientKind, str | None]) -> str:
    kind, version = kind_version
    return kind.value + (f"-{version}" if version else "")


class _Partitions:
    """The one thing an assignor asks of kafka-python's ClusterMetadata."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.counts = counts

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.counts[topic])) if topic in self.counts else None


def test_kafka_python_leader_gives_every_member_of_a_mixed_group_its_range() -> None:
    """The demo group's members in the order they join (static and dynamic interleaved), as the
    broker lists them to a kafka-python leader: each gets the range Kafka's RangeAssignor gives it
    (replay.assignors.range_assign, checked against Kafka's own test vectors), and the bytes
    kafka-python sends decode to it. kafka-python 3.0.12's own assignor gave three of the five
    nothing here (the demo's bounce then waited forever)."""
    from types import SimpleNamespace

    from kafka.coordinator.assignors.abstract import ConsumerProtocolSubscription

    from demo.consumer_main import kafka_python_range_assignor
    from proxy.wire.consumer_protocol import decode_assignment, encode_subscription
    from replay.assignors import range_assign

    joined = [
        ("static-confluent-7", "static-confluent"),
        ("dynamic-aiokafka-2", None),
        ("static-kafka-python-9", "static-kafka-python"),
        ("dynamic-java-2.4-1", None),
        ("static-java-3.9-4", "static-java-3.9"),
    ]
    metadata = encode_subscription(["t"])
    members = [
        SimpleNamespace(
            member_id=m, group_instance_id=i, metadata=ConsumerProtocolSubscription.decode(metadata)
        )
        for m, i in joined
    ]
    assignor = kafka_python_range_assignor()
    assert assignor.name == "range"
    got = {
        member_id: decode_assignment(assignment.encode())
        for member_id, assignment in assignor.assign(_Partitions({"t": 6}), members).items()
    }
    expected = range_assign({m: (i, metadata) for m, i in joined}, {"t": 6})
    assert got == {m: tuple(f"{t}-{p}" for t, p in sorted(parts)) for m, parts in expected.items()}
    assert all(got[m] for m, _ in joined)
    assert got["static-confluent-7"] == ("t-0", "t-1")  # static members first, by instance id


def test_event_lines_parse_and_junk_is_ignored() -> None:
    line = '{"event": "assigned", "ts_ms": 5, "partitions": ["t-0"], "generation_id": 3, "member_id": "m"}'
    event = ClientEvent.parse(line)
    assert event == ClientEvent("assigned", 5, ("t-0",), 3, "m")
    assert ClientEvent.parse("SLF4J: noise") is None
    assert ClientEvent.parse("[1, 2]") is None


def test_dynamic_member_has_no_instance_flag() -> None:
    spec = ConsumerSpec(ClientKind.CONFLUENT, "127.0.0.1:9", "g", ("t",))
    assert "--instance" not in command_for(spec)
    static = ConsumerSpec(ClientKind.AIOKAFKA, "127.0.0.1:9", "g", ("t",), group_instance_id="i-1")
    cmd = command_for(static)
    assert cmd[cmd.index("--instance") + 1] == "i-1"


def test_compile_cached_compiles_once_per_source(monkeypatch: pytest.MonkeyPatch) -> None:
    """javac runs for a new source only (the second call finds the class without a JDK on PATH),
    and a source javac refuses is a ClientError carrying javac's message."""
    if shutil.which("javac") is None:
        pytest.skip("no JDK on PATH")
    name = f"CacheProbe{uuid.uuid4().hex[:8]}"
    source = f"public class {name} {{ static org.apache.kafka.clients.consumer.KafkaConsumer<?, ?> c; }}\n"
    out = compile_cached(name, source, JAVA_COMPILE_AGAINST, release="8")
    try:
        assert (out / f"{name}.class").is_file()
        with monkeypatch.context() as patched:
            patched.setenv("PATH", "")
            assert compile_cached(name, source, JAVA_COMPILE_AGAINST, release="8") == out
        broken = out.with_name(f"{name}Broken")
        with pytest.raises(ClientError, match=r"(?s)javac failed:.*error"):
            compile_cached(broken.name, f"public class {broken.name} {{ nope }}", JAVA_COMPILE_AGAINST)
    finally:
        for leftover in out.parent.glob(f"{name}*"):
            shutil.rmtree(leftover)


@pytest.mark.integration
@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind_version", KINDS, ids=_ids)
def test_static_member_of_each_kind_gets_partitions(broker_factory, make_topic, kind_version) -> None:
    kind, java_version = kind_version
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    topic = make_topic(broker.bootstrap, partitions=2, prefix=f"c-{_ids(kind_version)}")
    spec = static_member_of(
        kind, broker.bootstrap, topic, _ids(kind_version), java_client_version=java_version or "3.9.2"
    )
    expected = (f"{topic}-0", f"{topic}-1")
    with start_consumer(spec) as consumer:
        # A client may first report an empty assignment (kafka-python joins before it has the
        # topic's metadata, then rejoins); wait for the one that carries the partitions.
        assigned = consumer.wait_for(
            lambda e: e.event == "assigned" and bool(e.partitions), timeout_ms=90_000
        )
    assert assigned.partitions == expected
    assert consumer.process.returncode == 0, consumer.describe()
    assert consumer.snapshot()[-1].event == "closed"
    if kind in (ClientKind.KAFKA_PYTHON, ClientKind.AIOKAFKA) or (
        kind is ClientKind.JAVA and java_version != "2.4.1"
    ):
        assert assigned.generation_id is not None and assigned.generation_id >= 1
        assert assigned.member_id and assigned.member_id.startswith(spec.group_instance_id)
    if kind is ClientKind.CONFLUENT:
        assert assigned.member_id and assigned.member_id.startswith(spec.group_instance_id)
