"""`group-replay demo`: the whole loop (record through the proxy, replay under scenarios against
the reference and a live broker, validate with Spark, the verdict and the report's path)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from demo.cli import DEFAULT_SCENARIOS, main
from harness.lines import KAFKA_39
from proxy.capture.reader import read_capture
from proxy.wire import ApiKey


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--partitions", "many"]) == 2
    assert main(["--speed", "0"]) == 2
    assert main(["--scenario", "no-such-scenario"]) == 2
    assert "no-such-scenario: no built-in scenario" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("blocked", "extra"), [("pyspark", "spark"), ("confluent_kafka", "clients"), ("aiokafka", "clients")]
)
def test_a_missing_extra_is_one_line_and_exit_2(blocked: str, extra: str, tmp_path: Path) -> None:
    """As after an install without the extra: the module does not import."""
    code = (
        f"import sys; sys.modules[{blocked!r}] = None; "
        "import group_replay; sys.exit(group_replay.main(['demo']))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert blocked in lines[0] and f"group-replay[{extra}" in lines[0], lines[0]
    assert not (tmp_path / "group-replay-demo").exists()  # nothing started, nothing written


def _events(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.timeout(600)
def test_quick_loop_from_another_directory(
    kafka_39, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Record on the session's broker, replay against the reference only, validate: the files land
    under the caller's directory (a relative --dir), and the verdict names what was compared."""
    caller = tmp_path / "elsewhere"
    caller.mkdir()
    monkeypatch.chdir(caller)
    code = main(
        [
            "--bootstrap",
            kafka_39.bootstrap,
            "--no-live",
            "--scenario",
            "as-recorded",
            "--scenario",
            DEFAULT_SCENARIOS[0],
            "--dir",
            "out",
            "--progress",
            "off",
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    root = caller / "out"
    capture = read_capture(root / "capture.pcapng")
    assert capture.damage is None
    joins = [f for f in capture.frames if f.leg == "client" and f.api_key == ApiKey.JOIN_GROUP]
    clients = {f.client_id for f in joins}
    assert {"static-confluent", "static-java-3.9", "static-kafka-python", "dynamic-aiokafka"} <= clients
    # The bounced static member joined from two different connections.
    assert len({f.conn for f in joins if f.client_id == "static-confluent"}) >= 2

    for scenario in ("as-recorded", DEFAULT_SCENARIOS[0]):
        rows = _events(root / "events" / scenario / "events.jsonl")
        assert {r["run"] for r in rows} == {"recorded", "reference"}, scenario
        assert {r["scenario"] for r in rows} == {scenario}
    assert (root / "report.html").stat().st_size > 0
    assert (root / "tables" / "session_verdicts").is_dir()
    out = captured.out
    assert "compatibility matrix" in out and "Verdict:" in out
    assert f"Report: {root / 'report.html'}" in out
    assert "Next: " in out
    # as-recorded: recorded is compared with the reference; the other scenario has no live run.
    assert re.search(r"comparisons\s+│\s+1 \(pass", out), out


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_whole_loop(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The default demo, as README's first command runs it: its own broker, two built-in scenarios,
    each against the reference and a fresh live broker, Spark, the verdict and the report."""
    code = main(["--dir", str(tmp_path / "demo"), "--progress", "off"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    for scenario in DEFAULT_SCENARIOS:
        rows = _events(tmp_path / "demo" / "events" / scenario / "events.jsonl")
        assert {r["run"] for r in rows} == {"recorded", "reference", f"broker-{KAFKA_39}"}, scenario
    # The demo's broker has no initial rebalance delay (live replays at 4x stay faithful), and the
    # capture header carries it to the reference and the live runs' brokers.
    header = read_capture(tmp_path / "demo" / "capture.pcapng").group_settings
    assert header is not None and header.initial_rebalance_delay_ms == 0
    assert header.min_session_timeout_ms == 6000  # otherwise Kafka's defaults
    out = captured.out
    for scenario in DEFAULT_SCENARIOS:
        assert scenario in out
    assert f"broker-{KAFKA_39}" in out and "Verdict:" in out and "report.html" in out
