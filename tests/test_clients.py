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
