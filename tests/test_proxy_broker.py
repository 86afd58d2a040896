"""The proxy in front of a REAL broker: pipelining, a malformed connection, a broker restart.

The restart test stops the session's Kafka 3.9 broker and starts the same launch plan again (same
ports, same data), so the proxy's upstream address stays valid; the fixture's next user gets a
fresh broker from `broker_factory` because the original process is gone.
"""

from __future__ import annotations

import logging
import shutil
import socket
import subprocess
import time
from pathlib import Path

import kio.schema.api_versions.v3.request as av3
import kio.schema.metadata.v12.request as md12
import pytest

from harness.lines import KAFKA_39
from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
from proxy.wire import FrameDecoder, decode_response, encode_request, frame

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _api_versions(cid: int) -> bytes:
    request = av3.ApiVersionsRequest(client_software_name="group-replay-test", client_software_version="1")
    return encode_request(request, correlation_id=cid, client_id="raw")


def _metadata(cid: int) -> bytes:
    request = md12.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
    )
    return encode_request(request, correlation_id=cid, client_id="raw")


def _read_frames(sock: socket.socket, count: int) -> list[bytes]:
    decoder = FrameDecoder()
    frames: list[bytes] = []
    while len(frames) < count:
        data = sock.recv(1 << 16)
        if not data:
            break
        frames += decoder.feed(data)
    return frames


def _connect(address: str) -> socket.socket:
    host, port = parse_hostport(address)
    sock = socket.create_connection((host, port), timeout=30)
    return sock


def _roundtrip_ok(address: str) -> bool:
    try:
        with _connect(address) as sock:
            sock.sendall(_api_versions(1))
            return len(_read_frames(sock, 1)) == 1
    except OSError:
        return False


@pytest.fixture
def broker(broker_factory):
    return broker_factory(KAFKA_39, new_coordinator=False)


def test_pipelined_requests_are_answered_in_order(broker) -> None:
    proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(broker.bootstrap)))
    try:
        with _connect(proxy.bootstrap) as sock:
            sock.sendall(b"".join(_api_versions(i) if i % 2 else _metadata(i) for i in range(200)))
            frames = _read_frames(sock, 200)
        assert [int.from_bytes(f[:4], "big") for f in frames] == list(range(200))
        _, metadata = decode_response(frames[0], 3, 12)
        [advertised] = metadata.brokers
        assert f"{advertised.host}:{advertised.port}" not in (broker.bootstrap, proxy.bootstrap)
        assert _roundtrip_ok(f"{advertised.host}:{advertised.port}")  # the per-broker listener works
    finally:
        proxy.stop()


def test_malformed_connection_leaves_a_real_client_unaffected(broker, caplog) -> None:
    from confluent_kafka.admin import AdminClient

    proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(broker.bootstrap), max_frame_bytes=1 << 20))
    admin = AdminClient({"bootstrap.servers": proxy.bootstrap, "client.id": "survivor"})
    try:
        assert admin.list_topics(timeout=30).brokers
        with caplog.at_level(logging.WARNING, logger="group_replay.proxy"):
            for bad in [(2 << 20).to_bytes(4, "big"), frame(b"\x00\x0b")]:
                with _connect(proxy.bootstrap) as sock:
                    sock.sendall(_api_versions(1) + bad)
                    got = b""
                    while data := sock.recv(1 << 16):
                        got += data
                    assert len(FrameDecoder().feed(got)) <= 1  # at most the good request's answer
        reasons = " ".join(r.getMessage() for r in caplog.records)
        assert "exceeds the maximum" in reasons and "truncated request header" in reasons
        assert admin.list_topics(timeout=30).brokers
    finally:
        proxy.stop()


def test_broker_restart_closes_clients_and_they_reconnect(broker, caplog) -> None:
    proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(broker.bootstrap)))
    relaunched: subprocess.Popen[bytes] | None = None
    work_dir: Path = broker.plan.work_dir
    try:
        sock = _connect(proxy.bootstrap)
        sock.sendall(_api_versions(1))
        assert len(_read_frames(sock, 1)) == 1
        with caplog.at_level(logging.WARNING, logger="group_replay.proxy"):
            broker.stop(remove_data=False)
            assert sock.recv(1) == b""  # the proxy closed the client's connection
            sock.close()
            assert not _roundtrip_ok(proxy.bootstrap)  # accepted, then closed: broker unreachable
        messages = " ".join(r.getMessage() for r in caplog.records)
        assert "closed the connection" in messages and "unreachable" in messages
        with open(broker.plan.log_path, "ab") as log:
            relaunched = subprocess.Popen(
                broker.plan.broker_command(), stdout=log, stderr=subprocess.STDOUT, cwd=work_dir
            )
        deadline = time.monotonic() + 120
        while not _roundtrip_ok(proxy.bootstrap):  # the same proxy, untouched, reaches it again
            assert relaunched.poll() is None, broker.log_tail()
            assert time.monotonic() < deadline, "broker did not come back"
            time.sleep(0.5)
    finally:
        proxy.stop()
        if relaunched is not None:
            relaunched.terminate()
            try:
                relaunched.wait(timeout=30)
            except subprocess.TimeoutExpired:
                relaunched.kill()
                relaunched.wait()
        shutil.rmtree(work_dir, ignore_errors=True)
