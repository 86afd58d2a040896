"""TLS on both legs of the proxy, in front of a real broker's SSL listeners, with real clients.

The `secure_broker` (tests/conftest.py) has an SSL listener, an MTLS one (client certificate
required) and SASL listeners; its certificates are made with openssl for the session. The proxy
gets its own certificate from the same CA for its client leg.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import kio.schema.api_versions.v3.request as av3
import pytest

from proxy.capture.reader import read_capture
from proxy.capture.writer import CaptureWriter
from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
from proxy.tls import ClientTls, TlsContexts, UpstreamTls
from proxy.wire import ApiKey, FrameDecoder, encode_request
from tests.support.java import assert_java_gets_both_partitions, java_client_properties
from tests.support.proxy import ProxyProcess
from tests.test_proxy_record_scope import MESSAGES, produce_and_consume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(400)]

REPO = Path(__file__).resolve().parents[1]


def _api_versions(cid: int) -> bytes:
    request = av3.ApiVersionsRequest(client_software_name="group-replay-test", client_software_version="1")
    return encode_request(request, correlation_id=cid, client_id="tls-test")


def _tls_connect(address: str, ca: Path) -> ssl.SSLSocket:
    host, port = parse_hostport(address)
    context = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection((host, port), timeout=30)
    return context.wrap_socket(raw, server_hostname=host)


def _round_trip(sock: socket.socket, cid: int) -> bool:
    sock.sendall(_api_versions(cid))
    decoder = FrameDecoder()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            return False
        if decoder.feed(data):
            return True


def _common_name(sock: ssl.SSLSocket) -> str:
    subject = dict(item[0] for item in sock.getpeercert()["subject"])  # type: ignore[index]
    return str(subject["commonName"])


def test_real_clients_over_tls_on_both_legs_recording(
    secure_broker, make_topic, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """confluent-kafka and the Java consumer talk TLS to the proxy; the proxy talks TLS to the
    broker's SSL listener, verifying its host name; the capture is readable."""
    ca = secure_broker.setup.ca
    proxy_cert = ca.issue("proxy", tmp_path)
    upstream = secure_broker.listener("SSL")
    topic = make_topic(secure_broker.broker.bootstrap, 2, prefix="tls")
    path = tmp_path / "tls.pcapng"
    tls = TlsContexts(ClientTls(proxy_cert.cert, proxy_cert.key), UpstreamTls(ca_path=ca.cert))
    recorder = CaptureWriter(path, upstream=upstream)
    proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(upstream), tls=tls), recorder)
    properties = tmp_path / "java.properties"
    properties.write_text(
        f"security.protocol=SSL\nssl.truststore.type=PEM\nssl.truststore.location={ca.cert}\n"
    )
    java_client_properties(monkeypatch, properties)
    try:
        settings = {"security.protocol": "SSL", "ssl.ca.location": str(ca.cert)}
        group = f"tls-{os.getpid()}"
        assert produce_and_consume(proxy.bootstrap, topic, group, settings) == MESSAGES
        assert_java_gets_both_partitions(proxy.bootstrap, topic, "tls-java")
    finally:
        proxy.stop()
    capture = read_capture(path)
    assert capture.damage is None
    joins = [f for f in capture.frames if f.api_key == ApiKey.JOIN_GROUP and f.leg == "client"]
    assert {"tls-java"} <= {f.client_id for f in joins} and len({f.conn for f in joins}) >= 2
    # The clients only ever saw the proxy's TLS listeners, never the broker's.
    assert all(c.upstream != secure_broker.broker.bootstrap for c in capture.connections.values())


def _wait_for_common_name(address: str, ca: Path, expected: str) -> str:
    seen = ""
    for _ in range(100):  # new connections pick the new certificate up; bounded, not timed
        with _tls_connect(address, ca) as sock:
            seen = _common_name(sock)
        if seen == expected:
            break
        time.sleep(0.1)
    return seen


def _install(leaf_cert: Path, leaf_key: Path, cert: Path, key: Path) -> None:
    """Replace the served files the way a certificate manager does: write aside, rename over."""
    for source, target in ((leaf_cert, cert), (leaf_key, key)):
        staged = target.with_suffix(".new")
        shutil.copyfile(source, staged)
        os.replace(staged, target)


def test_certificates_rotate_without_dropping_connections(secure_broker, tmp_path: Path) -> None:
    """SIGHUP, and a change of the files alone, make new connections see the new certificate;
    a connection opened before keeps working on the certificate it negotiated."""
    ca = secure_broker.setup.ca
    first, second, third = (
        ca.issue(name, tmp_path / name, common_name=name) for name in ("proxy-a", "proxy-b", "proxy-c")
    )
    served_cert, served_key = tmp_path / "served.pem", tmp_path / "served.key"
    _install(first.cert, first.key, served_cert, served_key)
    proxy = ProxyProcess(
        "--upstream", secure_broker.listener("SSL"),
        "--client-tls-cert", str(served_cert), "--client-tls-key", str(served_key),
        "--upstream-tls-ca", str(ca.cert),
    )  # fmt: skip
    address = proxy.bootstrap
    try:
        old = _tls_connect(address, ca.cert)
        assert _common_name(old) == "proxy-a" and _round_trip(old, 1)
        # Rotation 1: new files, then SIGHUP.
        _install(second.cert, second.key, served_cert, served_key)
        proxy.send_signal(signal.SIGHUP)
        assert _wait_for_common_name(address, ca.cert, "proxy-b") == "proxy-b"
        # Rotation 2: the files alone (the proxy watches them).
        _install(third.cert, third.key, served_cert, served_key)
        assert _wait_for_common_name(address, ca.cert, "proxy-c") == "proxy-c"
        # The connection from before both rotations is still up, on its own certificate.
        assert _round_trip(old, 2) and _common_name(old) == "proxy-a"
        old.close()
        # A broken file keeps the current certificate (and says so).
        served_key.write_text("not a key\n")
        time.sleep(1.5)
        with _tls_connect(address, ca.cert) as sock:
            assert _common_name(sock) == "proxy-c" and _round_trip(sock, 3)
    finally:
        err = proxy.stop().stderr
    assert "TLS certificates reloaded" in err
    assert "TLS reload failed, keeping the previous certificates" in err
    assert "Traceback" not in err


def test_mtls_cluster_refuses_the_proxy_and_the_log_says_what_works(
    secure_broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A listener that requires client certificates refuses a proxy without one, and the log
    says a decoding proxy cannot forward the client's certificate and what to do instead; with
    a certificate of its own the proxy is let in."""
    ca = secure_broker.setup.ca
    upstream = secure_broker.listener("MTLS")
    caplog.set_level(logging.WARNING, logger="group_replay.proxy")
    proxy = BackgroundProxy(
        ProxyConfig(upstream=parse_hostport(upstream), tls=TlsContexts(None, UpstreamTls(ca_path=ca.cert)))
    )
    try:
        host, port = parse_hostport(proxy.bootstrap)
        with socket.create_connection((host, port), timeout=30) as sock:
            sock.sendall(_api_versions(1))
            assert sock.recv(1 << 16) == b""  # closed: the broker refused the proxy
    finally:
        proxy.stop()
    assert "cannot forward the client's certificate" in caplog.text
    assert "SASL" in caplog.text and "PLAINTEXT listener" in caplog.text

    client = secure_broker.setup.client
    own = TlsContexts(None, UpstreamTls(ca_path=ca.cert, cert_path=client.cert, key_path=client.key))
    proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(upstream), tls=own))
    try:
        host, port = parse_hostport(proxy.bootstrap)
        with socket.create_connection((host, port), timeout=30) as sock:
            assert _round_trip(sock, 1)
    finally:
        proxy.stop()


def test_tls_flags_are_checked_before_anything_starts(tmp_path: Path) -> None:
    """A missing certificate file or a key without a certificate: exit 2 with the reason."""
    for flags, reason in (
        (["--client-tls-cert", str(tmp_path / "missing.pem")], "no such file"),
        (["--client-tls-key", str(tmp_path / "k.pem")], "--client-tls-key needs --client-tls-cert"),
        (["--upstream-tls-key", str(tmp_path / "k.pem")], "no such file"),
    ):
        result = subprocess.run(
            [sys.executable, "-m", "group_replay", "proxy", "--upstream", "127.0.0.1:9", *flags],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=60,
        )
        assert result.returncode == 2, result.stderr
        assert reason in result.stderr and "Traceback" not in result.stderr
