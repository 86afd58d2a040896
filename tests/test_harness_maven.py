"""Jar fetching: one download per version even when several processes ask, clear Maven errors."""

from __future__ import annotations

import threading

import pytest

from harness import maven, paths
from harness.broker import BrokerError, BrokerSpec, start_broker
from harness.lines import KAFKA_39

needs_tools = pytest.mark.skipif(maven.missing_tools() is not None, reason=f"{maven.missing_tools()}")


@needs_tools
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_concurrent_fetches_download_once(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    calls: list[int] = []
    real_run = maven._run_maven

    def counting_run(*args, **kwargs):
        calls.append(1)
        return real_run(*args, **kwargs)

    monkeypatch.setattr(maven, "_run_maven", counting_run)
    results: list[object] = []
    threads = [threading.Thread(target=lambda: results.append(maven.client_libs("2.4.1"))) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1
    assert len(set(results)) == 1
    libs = results[0]
    assert (libs / maven.COMPLETE_MARKER).exists()  # type: ignore[operator]
    assert any(p.name == "kafka-clients-2.4.1.jar" for p in libs.iterdir())  # type: ignore[attr-defined]
    assert not list(tmp_path.glob("clients/2.4.1/libs.partial-*"))


@needs_tools
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_version_missing_from_maven_central_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path))
    with pytest.raises(maven.MavenError, match=r"kafka-clients:jar:2\.4\.99"):
        maven.client_libs("2.4.99")
    assert not (tmp_path / "clients" / "2.4.99" / "libs").exists()


@needs_tools
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_a_broker_that_cannot_start_reports_its_own_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))  # where start_broker makes its work dir
    with pytest.raises(BrokerError) as caught:
        start_broker(BrokerSpec(KAFKA_39, extra_config={"node.id": "not-a-number"}), ready_timeout_ms=60_000)
    message = str(caught.value)
    assert "ConfigException: Invalid value not-a-number" in message.split("--- output tail ---")[0]
    assert list(tmp_path.iterdir()) == []  # the failed broker's work dir is gone
