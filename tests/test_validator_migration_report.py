"""The validator's migration view on real migration events: built-in migration scenarios replayed
against the reference (virtual time) from a fixture capture of Java 4.3.1 consumers on Kafka
4.3.1. Its steps agree with replay's own per-step table; migration facts are compared across runs
(a difference is explained, a run's disagreement with its repeat is noise); the matrix has a
protocol axis; and end to end, `group-replay replay` then `group-replay validate` give an HTML
report whose migration view renders in headless Chromium without overlaps."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.timeout(1500),  # a validate of 4 groups takes minutes on a loaded 2-core machine
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
]

pytest.importorskip("pyspark")

from group_replay import main as group_replay  # noqa: E402
from proxy.capture.reader import read_capture  # noqa: E402
from replay.events import RebalanceEvent, write_jsonl  # noqa: E402
from replay.plan import build_plan  # noqa: E402
from replay.run import RunResult, replay_reference  # noqa: E402
from replay.scenario import load_builtin  # noqa: E402
from tests.support.render_check import find_chromium, render_png  # noqa: E402
from tests.support.spark import shared_test_session  # noqa: E402
from tests.test_migration_scenarios import CAPTURE  # noqa: E402
from validator.jobs import ReportData, ValidateOptions, run_validate  # noqa: E402
from validator.report.html import render_html  # noqa: E402

UPGRADE = "classic-to-consumer-rolling-upgrade"
STATIC = "classic-to-consumer-rolling-upgrade-static"
DOWNGRADE = "consumer-to-classic-rolling-downgrade"
BROKER = "broker-4.3.1"
NOISE = "noise"


def _as(
    events: tuple[RebalanceEvent, ...], scenario: str, run: str, session: str | None = None
) -> list[RebalanceEvent]:
    """`events` (one reference replay) as run `run` of `scenario` (and of session `session`)."""
    out = []
    for e in events:
        row = {**e.to_json_dict(), "scenario": scenario, "run": run}
        out.append(RebalanceEvent.from_json_dict({**row, "session_id": session or e.session_id}))
    return out


@pytest.fixture(scope="module")
def replays() -> dict[str, RunResult]:
    plan = build_plan(read_capture(CAPTURE), CAPTURE.stem)
    return {name: replay_reference(plan, load_builtin(name)) for name in (UPGRADE, STATIC, DOWNGRADE)}


@pytest.fixture(scope="module")
def validated(
    replays: dict[str, RunResult], tmp_path_factory: pytest.TempPathFactory
) -> tuple[ReportData, Path]:
    """Reference runs of three scenarios, plus observed runs made of real replays: under the
    dynamic upgrade a `broker-4.3.1` that behaved as the static upgrade does (other rejoins and
    moves), under the downgrade a `broker-4.3.1` that behaved as the reference (a pass), and under
    the static upgrade a repeat `reference~2` that behaved as the dynamic one (noise)."""
    root = tmp_path_factory.mktemp("migration-events")
    events: list[RebalanceEvent] = []
    for name, result in replays.items():
        events += _as(result.events, name, "reference")
    events += _as(replays[STATIC].events, UPGRADE, BROKER)
    events += _as(replays[DOWNGRADE].events, DOWNGRADE, BROKER)
    events += _as(replays[UPGRADE].events, STATIC, "reference~2")
    # session NOISE: the upgrade observed on a broker that behaved as the static upgrade, whose
    # reference repeat behaved the same: every migration fact they differ on is noise
    events += _as(replays[UPGRADE].events, UPGRADE, "reference", NOISE)
    events += _as(replays[STATIC].events, UPGRADE, "reference~2", NOISE)
    events += _as(replays[STATIC].events, UPGRADE, BROKER, NOISE)
    with (root / "events.jsonl").open("w", encoding="utf-8") as out:
        write_jsonl(events, out)
    data = run_validate(shared_test_session(), ValidateOptions(inputs=(root,), out_dir=root / "tables"))
    return data, root / "tables"


def _steps(data: ReportData, scenario: str, run: str) -> list[dict[str, Any]]:
    (key,) = [k for k in data.migration_steps if k[1] == scenario and k[0] != NOISE]
    return [s for s in data.migration_steps[key] if s["run"] == run]


@pytest.mark.parametrize("scenario", [UPGRADE, STATIC])
def test_steps_agree_with_replays_own_step_table(
    validated: tuple[ReportData, Path], replays: dict[str, RunResult], scenario: str
) -> None:
    """Replay counts the steps of a rolling restart from its first bounce (0); the validator's step
    0 is the group before any switch, so replay's step k is the validator's k + 1. Not under the
    downgrade: a consumer-protocol static member's leave is not observed from a stopped process,
    so the validator's step begins at its first classic request, 2 s after replay's bounce, and
    the moves in between count in the step before (5 partitions instead of replay's 3)."""
    data, _ = validated
    steps = _steps(data, scenario, "reference")
    expected = replays[scenario].steps
    assert len(steps) == len(expected) + 1
    for ours, theirs in zip(steps[1:], expected, strict=True):
        assert ours["switched"] == [f"{theirs.bounced}:{'classic' if scenario == DOWNGRADE else 'consumer'}"]
        assert ours["group_type"] == theirs.group_type
        assert ours["partitions_moved"] == theirs.partitions_moved
        assert {r["member_key"]: r["rejoins"] for r in ours["rejoins"]} == {
            k: v for k, v in theirs.rejoins.items() if v
        }
    assert steps[0]["group_type"] == "classic"


def test_migration_facts_are_compared_and_explained_and_the_matrix_has_a_protocol_axis(
    validated: tuple[ReportData, Path],
) -> None:
    import pyarrow.parquet as pq

    data, tables = validated
    diffs = pq.read_table(tables / "rebalance_diff").to_pylist()
    upgrade = [d for d in diffs if d["scenario"] == UPGRADE and d["session_id"] != NOISE]
    aspects = {d["aspect"] for d in upgrade}
    assert {"rejoins", "partitions_moved"} <= aspects
    rejoins = [d for d in upgrade if d["aspect"] == "rejoins"]
    assert all(not d["is_noise"] and "fewer time(s) in step" in d["cause"] for d in rejoins), rejoins
    assert all(d["next_step"] for d in upgrade if d["aspect"] in ("rejoins", "partitions_moved"))
    rows = pq.read_table(tables / "session_verdicts").to_pylist()
    verdicts = {(v["scenario"], v["observed_run"]): v for v in rows if v["session_id"] != NOISE}
    assert verdicts[(UPGRADE, BROKER)]["status"] == "differs"
    assert verdicts[(DOWNGRADE, BROKER)]["status"] == "pass"
    matrix = pq.read_table(tables / "compatibility_matrix").to_pylist()
    assert {(c["scenario"], c["protocol"]) for c in matrix} == {
        (UPGRADE, "classic -> consumer"),
        (DOWNGRADE, "consumer -> classic"),
    }
    steps = pq.read_table(tables / "migration_steps").to_pylist()
    assert {s["run"] for s in steps} == {"reference", "reference~2", BROKER}
    assert data.migration_groups == 4
    view = render_html(data).split("<h2 id='migration'>", 1)[1]
    assert view.count("<section class='migration'") == 4 and f"<td class='key'>{BROKER}</td>" in view


def test_a_repeat_that_disagrees_makes_the_migration_facts_noise(validated: tuple[ReportData, Path]) -> None:
    """Session NOISE: the reference's repeat behaved as the observed broker, so every migration
    fact they differ on is unstable, labelled noise, and the comparison passes."""
    import pyarrow.parquet as pq

    _, tables = validated
    verdicts = pq.read_table(tables / "session_verdicts").to_pylist()
    assert [v["status"] for v in verdicts if v["session_id"] == NOISE] == ["pass"]
    diffs = [d for d in pq.read_table(tables / "rebalance_diff").to_pylist() if d["session_id"] == NOISE]
    noise = [d for d in diffs if d["aspect"] in ("rejoins", "partitions_moved")]
    assert noise and all(d["is_noise"] for d in noise), diffs


@pytest.mark.slow
@pytest.mark.skipif(find_chromium() is None, reason="chromium not installed (apt-get install chromium)")
def test_replay_then_validate_gives_a_report_with_the_migration_view(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.test_validator_report import layout_problems, png_size

    events = tmp_path / "events"
    for scenario in (UPGRADE, "as-recorded"):
        argv = ["replay", str(CAPTURE), "--scenario", scenario, "--against", "reference"]
        assert group_replay([*argv, "--out", str(events / scenario), "--progress", "off"]) == 0
    report = tmp_path / "report.html"
    argv = ["validate", str(events), "--report", str(report), "--out", str(tmp_path / "tables")]
    assert group_replay([*argv, "--progress", "off", "--master", "local[2]"]) == 0
    printed = capsys.readouterr().out
    assert "migration steps -" in printed  # the terminal's table (its width folds the rest)
    html = report.read_text()
    assert "<h2 id='migration'>Protocol migration</h2>" in html
    view = html[html.index("<h2 id='migration'>") :]
    rows = re.findall(r"<tr><td class='num'>(\d+)</td><td class='key'>reference</td>", view)
    assert rows == ["0", "1", "2", "3"]  # step 0 and one step per member switched
    assert view.count("stroke-dasharray") == 3  # where steps 1-3 began
    assert "consumer group" in view and "classic group" in view
    assert "<th>protocol</th>" in html
    assert layout_problems(report) == []
    png = render_png(report, tmp_path / "report.png", width=1400, height=2400)
    assert png_size(png) == (1400, 2400)
    assert png.stat().st_size > 40_000  # a blank page compresses to a few kB
    assert {"migration_steps", "migration_timeline"} <= {p.name for p in (tmp_path / "tables").iterdir()}
