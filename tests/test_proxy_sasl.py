"""SASL relayed unchanged through the recording proxy to a real broker's SASL listeners.

The broker (tests/conftest.py `secure_broker`) authenticates: PLAIN users from the JAAS config
the harness wrote, SCRAM-SHA-512 credentials stored when its storage was formatted. Real clients
log in through the proxy (`group-replay proxy` as a subprocess, logging at DEBUG), then the
capture file and every line the proxy printed are searched for the passwords.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from proxy.capture.reader import read_capture
from proxy.wire import ApiKey
from tests.conftest import SASL_USERS
from tests.support.java import assert_java_gets_both_partitions, java_client_properties
from tests.support.proxy import ProxyProcess
from tests.test_proxy_record_scope import MESSAGES, produce_and_consume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

PASSWORDS = {name: password for name, password in SASL_USERS}


def _proxy(upstream: str, record: Path, *flags: str) -> ProxyProcess:
    return ProxyProcess("--upstream", upstream, "--record", str(record), "--log-level", "DEBUG", *flags)


def _secrets_absent(capture_path: Path, output: str) -> None:
    data = capture_path.read_bytes()
    for password in PASSWORDS.values():
        assert password.encode() not in data, "a password reached the capture"
        assert password not in output, "a password reached the proxy's output"
        # nor in pieces: the first bytes of a password (issue 18 defect 7 logged them as a header)
        assert password[:8] not in output


CASES = [
    # listener, mechanism, user, extra client settings
    ("SASL_PLAINTEXT", "PLAIN", "alice", {}),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512", "bob", {}),
    ("SASL_SSL", "SCRAM-SHA-512", "bob", {}),
    ("SASL_SSL", "PLAIN", "alice", {}),
]


@pytest.mark.parametrize(("listener", "mechanism", "user", "extra"), CASES)
def test_sasl_is_relayed_and_no_secret_is_recorded_or_logged(
    secure_broker,
    make_topic,
    tmp_path: Path,
    listener: str,
    mechanism: str,
    user: str,
    extra: dict[str, object],
) -> None:
    ca = secure_broker.setup.ca
    topic = make_topic(secure_broker.broker.bootstrap, 1, prefix="sasl")
    path = tmp_path / "sasl.pcapng"
    flags = ["--upstream-tls-ca", str(ca.cert)] if listener == "SASL_SSL" else []
    flags += ["--record-scope", "all"] if mechanism == "PLAIN" else []  # every frame, SASL redacted
    proxy = _proxy(secure_broker.listener(listener), path, *flags)
    settings: dict[str, object] = {
        "security.protocol": "SASL_PLAINTEXT",  # the proxy's client leg is PLAINTEXT here
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": PASSWORDS[user],
        **extra,
    }
    try:
        seen = produce_and_consume(proxy.bootstrap, topic, f"sasl-{os.getpid()}-{mechanism}", settings)  # type: ignore[arg-type]
    finally:
        output = proxy.stop().printed
    assert seen == MESSAGES
    assert "Traceback" not in output and "closing: malformed" not in output
    capture = read_capture(path)
    assert capture.damage is None
    sasl = [f for f in capture.frames if f.api_key in (ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE)]
    assert any(f.api_key == ApiKey.SASL_HANDSHAKE for f in sasl)
    assert all(f.redacted_body_bytes is not None for f in sasl if f.api_key == ApiKey.SASL_AUTHENTICATE)
    assert {ApiKey.JOIN_GROUP, ApiKey.SYNC_GROUP} <= {f.api_key for f in capture.frames}
    _secrets_absent(path, output)


def test_pre_kip152_raw_sasl_tokens_are_relayed(secure_broker, make_topic, tmp_path: Path) -> None:
    """kafka-python pinned to api_version 0.10.2 logs in the old way: SaslHandshake v0, then the
    PLAIN token as a raw frame without a Kafka header (issue 18 defect 7); the proxy relays it and
    neither records nor logs it."""
    from kafka import KafkaConsumer, KafkaProducer

    topic = make_topic(secure_broker.broker.bootstrap, 1, prefix="sasl-raw")
    path = tmp_path / "raw.pcapng"
    proxy = _proxy(secure_broker.listener("SASL_PLAINTEXT"), path, "--record-scope", "all")
    common = {
        "bootstrap_servers": proxy.bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "alice",
        "sasl_plain_password": PASSWORDS["alice"],
        "api_version": (0, 10, 2),
    }
    seen = 0
    try:
        producer = KafkaProducer(**common)
        for _ in range(50):
            producer.send(topic, b"x" * 100)
        producer.flush(60)
        producer.close()
        consumer = KafkaConsumer(
            topic,
            group_id=f"sasl-raw-{os.getpid()}",
            auto_offset_reset="earliest",
            consumer_timeout_ms=30_000,
            **common,
        )
        for _ in consumer:
            seen += 1
            if seen == 50:
                break
        consumer.commit()
        consumer.close()
    finally:
        output = proxy.stop().printed
    assert seen == 50
    assert "closing: malformed" not in output and "Traceback" not in output
    capture = read_capture(path)
    assert capture.damage is None
    handshakes = [f for f in capture.frames if f.api_key == ApiKey.SASL_HANDSHAKE]
    assert handshakes and {f.api_version for f in handshakes} == {0}
    assert not any(f.api_key == ApiKey.SASL_AUTHENTICATE for f in capture.frames)
    assert any(f.api_key == ApiKey.JOIN_GROUP for f in capture.frames)
    _secrets_absent(path, output)


def test_a_wrong_password_is_refused_by_the_broker_through_the_proxy(secure_broker, tmp_path: Path) -> None:
    """The broker still authenticates: a wrong password fails as it would without the proxy."""
    from confluent_kafka import KafkaError, Producer

    path = tmp_path / "refused.pcapng"
    proxy = _proxy(secure_broker.listener("SASL_PLAINTEXT"), path)
    wrong = "not-alices-password"
    errors: list[KafkaError] = []
    try:
        producer = Producer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": "SCRAM-SHA-512",
                "sasl.username": "alice",
                "sasl.password": wrong,
                "error_cb": errors.append,
            }
        )
        for _ in range(30):
            producer.poll(0.5)
            if any(e.code() == KafkaError._AUTHENTICATION for e in errors):
                break
        assert any("invalid credentials" in e.str() for e in errors if e.code() == KafkaError._AUTHENTICATION)
    finally:
        output = proxy.stop().printed
    assert wrong not in output and wrong.encode() not in path.read_bytes()


def test_java_consumer_over_sasl_ssl_through_the_proxy(
    secure_broker, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Java consumer logs in with SCRAM-SHA-512 over TLS to the proxy, which logs in over
    TLS to the broker's SASL_SSL listener (TLS on both legs, SASL relayed)."""
    ca = secure_broker.setup.ca
    proxy_cert = ca.issue("proxy-sasl", tmp_path)
    topic = make_topic(secure_broker.broker.bootstrap, 2, prefix="sasl-java")
    path = tmp_path / "java.pcapng"
    proxy = _proxy(
        secure_broker.listener("SASL_SSL"), path,
        "--client-tls-cert", str(proxy_cert.cert), "--client-tls-key", str(proxy_cert.key),
        "--upstream-tls-ca", str(ca.cert),
    )  # fmt: skip
    properties = tmp_path / "java.properties"
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{PASSWORDS["bob"]}";'
    )
    properties.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        f"sasl.jaas.config={jaas}\nssl.truststore.type=PEM\nssl.truststore.location={ca.cert}\n"
    )
    java_client_properties(monkeypatch, properties)
    try:
        assert_java_gets_both_partitions(proxy.bootstrap, topic, "sasl-java")
    finally:
        output = proxy.stop().printed
    capture = read_capture(path)
    assert capture.damage is None
    assert any(f.api_key == ApiKey.SASL_AUTHENTICATE and f.client_id == "sasl-java" for f in capture.frames)
    assert any(f.api_key == ApiKey.JOIN_GROUP and f.client_id == "sasl-java" for f in capture.frames)
    _secrets_absent(path, output)
