"""What the proxy learns about its upstream when it starts (AGREED #2, issue 17 proxy side).

Against real brokers: the group settings in the capture header; the `group-replay proxy` command
run from another directory with a relative `--record` path, stopped with Ctrl-C (summary line);
an unreachable upstream reported once, then with backoff. Against a fake upstream: a broker that
refuses DescribeConfigs (an ACL) yields unknown settings, never a failure.
"""

from __future__ import annotations

import asyncio
import datetime
import re
import signal
import socket
from pathlib import Path

import kio.schema.api_versions.v0.response as av0
import kio.schema.describe_configs.v4.response as dc4
import kio.schema.metadata.v9.response as md9
import pytest
from kio.schema.errors import ErrorCode
from kio.schema.types import BrokerId
from kio.static.primitive import i8, i16, i32, i32Timedelta

from harness.lines import KAFKA_39
from proxy.capture.reader import read_capture
from proxy.server import UpstreamHealth, parse_hostport
from proxy.upstream import describe_upstream
from proxy.wire import FrameDecoder, encode_response, frame, peek_request_prefix
from tests.support.proxy import ProxyProcess
from tests.test_proxy_broker import _api_versions, _read_frames

ZERO = i32Timedelta.parse(datetime.timedelta(0))


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_describe_a_real_broker(broker_factory) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    settings = asyncio.run(describe_upstream(*parse_hostport(broker.bootstrap)))
    assert settings.unknown_reason is None
    # The harness starts its brokers with quick-test group settings; the probe reads them back.
    delay = broker.plan.properties["group.initial.rebalance.delay.ms"]
    assert settings.initial_rebalance_delay_ms == int(delay)
    assert settings.min_session_timeout_ms is not None and settings.max_session_timeout_ms is not None
    assert settings.max_size is not None and settings.max_size > 0
    assert settings.new_coordinator is False
    assert settings.broker_version == "3.9"  # the line its ApiVersions imply


def _describe_refusing_upstream(error: ErrorCode) -> asyncio.Server:
    """Answers ApiVersions v0 and Metadata v9 like a 3.9 broker, DescribeConfigs v4 with `error`."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        decoder = FrameDecoder()
        port = writer.get_extra_info("sockname")[1]
        while data := await reader.read(65536):
            for request in decoder.feed(data):
                api_key, api_version, correlation_id = peek_request_prefix(request)
                if api_key == 18:
                    keys = tuple(
                        av0.ApiVersion(api_key=i16(k), min_version=i16(0), max_version=i16(v))
                        for k, v in ((18, 3), (3, 12), (32, 4))
                    )
                    body = av0.ApiVersionsResponse(error_code=ErrorCode.none, api_keys=keys)
                elif api_key == 3:
                    assert api_version == 9
                    node = md9.MetadataResponseBroker(node_id=BrokerId(7), host="127.0.0.1", port=i32(port))
                    body = md9.MetadataResponse(
                        throttle_time=ZERO,
                        brokers=(node,),
                        cluster_id="c",
                        controller_id=BrokerId(7),
                        topics=(),
                    )
                else:
                    result = dc4.DescribeConfigsResult(
                        error_code=error,
                        error_message="denied",
                        resource_type=i8(4),
                        resource_name="7",
                        configs=(),
                    )
                    body = dc4.DescribeConfigsResponse(throttle_time=ZERO, results=(result,))
                writer.write(encode_response(body, correlation_id))
            await writer.drain()
        writer.close()

    return handle  # type: ignore[return-value]


def test_refused_describe_is_unknown_not_a_failure() -> None:
    async def main() -> None:
        server = await asyncio.start_server(
            _describe_refusing_upstream(ErrorCode.cluster_authorization_failed), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        settings = await describe_upstream("127.0.0.1", port)
        assert settings.unknown_reason is not None
        assert "CLUSTER_AUTHORIZATION_FAILED" in settings.unknown_reason.upper()
        assert settings.initial_rebalance_delay_ms is None and settings.broker_version is not None

        async def slam(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()  # what a SASL listener does to an unauthenticated ApiVersions... eventually

        closer = await asyncio.start_server(slam, "127.0.0.1", 0)
        closed = await describe_upstream("127.0.0.1", closer.sockets[0].getsockname()[1])
        assert closed.unknown_reason is not None and closed.broker_version is None
        server.close()
        closer.close()

    asyncio.run(main())


def test_unreachable_upstream_is_reported_with_backoff() -> None:
    health = UpstreamHealth()
    lines = [health.failed(t / 10, "b:1", "refused") for t in range(0, 100)]  # 10 s of client retries
    reported = [line for line in lines if line is not None]
    assert 2 <= len(reported) <= 5  # at 0 s, 1 s, 3 s, 7 s: not 100
    assert "attempts failed since the last report" in reported[1]
    assert health.succeeded("b:1") == "upstream b:1 reachable again"
    assert health.succeeded("b:1") is None


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_proxy_command_records_relative_path_from_another_directory(broker_factory, tmp_path: Path) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proxy = ProxyProcess("--upstream", broker.bootstrap, "--record", "cap.pcapng", cwd=elsewhere)
    address = proxy.bootstrap
    try:
        with socket.create_connection(parse_hostport(address), timeout=30) as sock:
            sock.sendall(_api_versions(1) + _api_versions(2))
            assert len(_read_frames(sock, 2)) == 2
    finally:
        stopped = proxy.stop(signal.SIGINT)
    out, err = stopped.stdout, stopped.stderr
    assert stopped.returncode == 0, err
    assert "Traceback" not in err
    assert re.search(r"4 frames \(2 requests\), 0 group API requests, 0 rewrites", out), out
    assert "cap.pcapng" in out and "bytes)" in out
    capture = read_capture(elsewhere / "cap.pcapng")
    assert len([f for f in capture.frames if f.leg == "client"]) == 4
    assert capture.group_settings is not None and capture.group_settings.unknown_reason is None
    assert capture.group_settings.max_session_timeout_ms is not None


def test_unreachable_upstream_at_start_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    proxy = ProxyProcess("--upstream", f"127.0.0.1:{dead}", cwd=tmp_path)
    address = proxy.bootstrap
    try:
        for _ in range(20):  # a client retrying
            with socket.create_connection(parse_hostport(address), timeout=30) as sock:
                try:
                    sock.sendall(frame(b"\x00\x12\x00\x00\x00\x00\x00\x01\xff\xff"))
                    assert sock.recv(10) == b""
                except ConnectionResetError:
                    pass  # closed by the proxy: what a client sees of an unreachable broker
    finally:
        stopped = proxy.stop(signal.SIGINT)
    out, err = stopped.stdout, stopped.stderr
    assert stopped.returncode == 0, err
    assert "Traceback" not in err
    assert 1 <= err.count("unreachable") <= 3, err  # at start, then at most a report or two
    assert "20 connections" in out


def test_release_lines_from_api_versions() -> None:
    from proxy.upstream import _FINGERPRINT_APIS, broker_version_label

    def ranges(*maxima: int) -> dict[int, tuple[int, int]]:
        return {int(api): (0, high) for api, high in zip(_FINGERPRINT_APIS, maxima, strict=True)}

    assert broker_version_label(ranges(9, 12, 6, 11, 8, 7, 3, 7, 3, 7)) == "2.8"
    assert broker_version_label(ranges(9, 13, 7, 12, 8, 8, 4, 9, 3, 7)) == "3.2-3.4"
    assert broker_version_label(ranges(11, 17, 9, 12, 9, 9, 6, 9, 4, 7)) == "3.9"
    assert broker_version_label(ranges(12, 17, 10, 13, 9, 10, 6, 9, 4, 7)) == "3.9+"  # 4.0-4.2
    assert broker_version_label(ranges(13, 18, 11, 13, 10, 10, 6, 9, 4, 7)) == "4.3"
    assert broker_version_label(ranges(14, 19, 11, 13, 10, 10, 6, 9, 4, 7)) == "4.3+"
    assert broker_version_label({}) == "unknown"
