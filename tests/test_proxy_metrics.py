"""`--metrics`: a scrape after real traffic shows what the proxy relayed, in Prometheus' format."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from harness.lines import KAFKA_39
from proxy.capture.writer import CaptureWriter
from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
from tests.test_proxy_record_scope import MESSAGES, produce_and_consume

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

_SAMPLE = re.compile(
    r'^(group_replay_proxy_[a-z_]+)(\{((?:[a-z_]+="[^"]*",?)+)\})? (\d+(?:\.\d+)?(?:e[+-]?\d+)?)$'
)
_LABEL = re.compile(r'([a-z_]+)="([^"]*)"')


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return answer.status, answer.headers.get("Content-Type", ""), answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, "", error.read().decode()


def key(name: str, **labels: str) -> str:
    """A sample's key with its labels in one order, whatever order the exposition wrote them in."""
    inner = ",".join(f'{label}="{value}"' for label, value in sorted(labels.items()))
    return f"group_replay_proxy_{name}{{{inner}}}" if labels else f"group_replay_proxy_{name}"


def _samples(text: str) -> dict[str, float]:
    """Every sample line, checked against the exposition format; each family declares its TYPE."""
    typed = set(re.findall(r"^# TYPE (\S+) (?:counter|gauge|summary)$", text, re.MULTILINE))
    samples: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        assert match, f"not a Prometheus sample line: {line!r}"
        name = match.group(1)
        families = {name, re.sub(r"_(sum|count)$", "", name), re.sub(r"_total$", "", name)}
        assert families & typed, f"{name} has no TYPE line"
        labels = dict(_LABEL.findall(match.group(3) or ""))
        samples[key(name.removeprefix("group_replay_proxy_"), **labels)] = float(match.group(4))
    return samples


def test_metrics_count_what_was_relayed(broker_factory, make_topic, tmp_path: Path) -> None:
    broker = broker_factory(KAFKA_39, new_coordinator=False)
    topic = make_topic(broker.bootstrap, 1, prefix="metrics")
    recorder = CaptureWriter(tmp_path / "m.pcapng", upstream=broker.bootstrap)
    config = ProxyConfig(upstream=parse_hostport(broker.bootstrap), metrics=("127.0.0.1", 0))
    proxy = BackgroundProxy(config, recorder)
    try:
        assert proxy.server is not None and proxy.server.metrics_address is not None
        base = "http://{}:{}".format(*proxy.server.metrics_address)
        assert _get(base + "/health/live")[0] == 200 and _get(base + "/health/ready")[0] == 200
        assert _get(base + "/nothing")[0] == 404
        before = _samples(_get(base + "/metrics")[2])
        assert before[key("connections_total")] == 0
        assert produce_and_consume(proxy.bootstrap, topic, f"metrics-{os.getpid()}") == MESSAGES
        status, kind, text = _get(base + "/metrics")
    finally:
        proxy.stop()
    assert status == 200 and kind.startswith("text/plain; version=")
    after = _samples(text)
    produce = key("requests_total", api_key="0", api="Produce")
    fetch = key("responses_total", api_key="1", api="Fetch")
    join = key("requests_total", api_key="11", api="JoinGroup")
    assert after[produce] >= 1 and after[fetch] >= 1 and after[join] >= 1
    produced = after[key("request_bytes_total", api_key="0", api="Produce")]
    assert produced > MESSAGES * 200  # every message's value went through, counted once
    assert after[key("bytes_total", leg="client")] >= produced
    assert after[key("connections_total")] >= 3
    assert after[key("rewrites_total")] >= 1  # Metadata names the brokers
    assert after[key("capture_queued_bytes_total")] > 0
    assert after[key("closed_on_error_total")] == 0
    group = f"metrics-{os.getpid()}"
    assert after[key("group_join_responses_total", group=group)] >= 1
    assert key("capture_queue_items") in after
    assert key("buffered_bytes") in after
    # Latency: every answered Fetch took some time; the sum is positive and the count matches.
    latency_count = key("request_latency_seconds_count", api_key="1", api="Fetch")
    assert after[latency_count] == after[fetch]
    assert after[key("request_latency_seconds_sum", api_key="1", api="Fetch")] > 0


def test_metrics_address_is_checked(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "group_replay", "proxy", "--upstream", "127.0.0.1:9", "--metrics", "nowhere"],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        timeout=60,
    )
    assert result.returncode == 2 and "HOST:PORT" in result.stderr and "Traceback" not in result.stderr
