"""`group-replay validate` end to end on synthetic events with known injected differences."""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
]

pyspark = pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from tests.support.spark import shared_test_session  # noqa: E402
from tests.support.synth_events import SCENARIOS, injected_differences, synth_events, write_jsonl_tree  # noqa: E402
from validator.cli import run  # noqa: E402
from validator.schemas import COMPATIBILITY_MATRIX_SCHEMA, REBALANCE_DIFF_SCHEMA  # noqa: E402

SESSIONS, DIFF_RATE, NOISE_RATE = 12, 0.5, 0.5


@pytest.fixture(scope="session")
def spark() -> SparkSession:
    return shared_test_session()


@pytest.fixture(scope="module")
def events_dir(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("events") / "tree" / "synthetic"
    frame = synth_events(spark, SESSIONS, diff_rate=DIFF_RATE, noise_rate=NOISE_RATE)
    assert write_jsonl_tree(frame, out) > 0
    return out.parent


@pytest.fixture(scope="module")
def injected(spark: SparkSession) -> set[tuple[str, str]]:
    rows = injected_differences(spark, SESSIONS, diff_rate=DIFF_RATE, noise_rate=NOISE_RATE).collect()
    assert rows, "the fixture must inject differences for these tests to mean anything"
    return {(r["session_id"], r["observed_run"]) for r in rows}


def _links_resolve(html: str) -> None:
    ids = set(re.findall(r"id='([^']+)'", html))
    hrefs = set(re.findall(r"href='#([^']+)'", html))
    assert hrefs, "the report links its worst sessions"
    assert hrefs <= ids, f"dangling links: {sorted(hrefs - ids)[:5]}"


@pytest.fixture(scope="module")
def validated(events_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[int, Path, Path]:
    """One full validate run (report and tables) shared by the tests that inspect its outputs.
    It runs from another directory than the Spark JVM's, with relative inputs, --out and
    --report, as a user in their own directory does (test_relative_paths_are_the_callers_directory
    checks where they landed; the others read them)."""
    caller = tmp_path_factory.mktemp("validated") / "caller"
    shutil.copytree(events_dir / "synthetic", caller / "ev")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(caller)
        code = run(["ev", "--out", "tables", "--report", "r/report.html", "--progress", "off"])
    return code, caller / "r" / "report.html", caller / "tables"


def test_finds_exactly_the_injected_differences_and_writes_tables_and_report(
    spark: SparkSession, validated: tuple[int, Path, Path], injected: set[tuple[str, str]]
) -> None:
    code, report, out = validated
    assert code == 1

    verdicts = spark.read.parquet(str(out / "session_verdicts")).collect()
    # broker-3.9.1 and broker-4.1.0 vs reference everywhere; recorded only under as-recorded
    # (reference~2 is a repeat, it measures noise).
    as_recorded = sum(1 for s in range(SESSIONS) if SCENARIOS[s % len(SCENARIOS)] == "as-recorded")
    assert len(verdicts) == SESSIONS * 2 + as_recorded
    assert {v["scenario"] for v in verdicts if v["observed_run"] == "recorded"} == {"as-recorded"}
    assert {v["expected_run"] for v in verdicts} == {"reference"}
    assert {(v["session_id"], v["observed_run"]) for v in verdicts if v["status"] != "pass"} == injected
    assert not [v for v in verdicts if v["status"] == "failed"]
    assert sum(v["noise_diffs"] for v in verdicts) > 0, "noise was injected and must be labelled"
    assert all(v["diffs"] == 0 for v in verdicts if v["observed_run"] == "recorded")

    diffs = spark.read.parquet(str(out / "rebalance_diff"))
    assert diffs.schema.fieldNames() == REBALANCE_DIFF_SCHEMA.fieldNames()
    assert diffs.where("not is_noise and observed_run = 'recorded'").count() == 0
    matrix = spark.read.parquet(str(out / "compatibility_matrix"))
    assert matrix.schema.fieldNames() == COMPATIBILITY_MATRIX_SCHEMA.fieldNames()
    cells = matrix.collect()
    assert sum(c["sessions"] for c in cells) == len(verdicts)
    assert sum(c["differs"] for c in cells) == len(injected)
    assert {c["broker_version"] for c in cells} == {"3.9.1", "4.1.0", "recorded"}
    assert spark.read.parquet(str(out / "observed_rebalances")).count() > 0

    html = report.read_text()
    assert html.count("<svg") >= 2  # the matrix and at least one timeline
    assert "http://" not in html.replace("http://www.w3.org/2000/svg", "")  # self-contained
    _links_resolve(html)
    for session_id, _ in injected:
        assert session_id in html


def test_parquet_input_against_recorded_labels_reference_noise(
    spark: SparkSession, events_dir: Path, injected: set[tuple[str, str]], tmp_path: Path
) -> None:
    parquet = tmp_path / "events-parquet"
    spark.read.json(str(events_dir / "synthetic")).write.parquet(str(parquet))  # schema-on-write is not ours
    out = tmp_path / "tables"
    code = run([str(parquet), "--expected", "recorded", "--out", str(out), "--progress", "off"])
    assert code == 1
    verdicts = spark.read.parquet(str(out / "session_verdicts")).collect()
    assert {(v["session_id"], v["observed_run"]) for v in verdicts if v["status"] != "pass"} == injected
    reference = [v for v in verdicts if v["observed_run"] == "reference"]
    assert reference and all(v["status"] == "pass" for v in reference)


def test_no_differences_exits_0_and_bad_rows_are_counted(events_dir: Path, tmp_path: Path) -> None:
    tree = tmp_path / "events"
    tree.mkdir()
    for name in ("recorded.jsonl", "reference.jsonl"):
        shutil.copy(events_dir / "synthetic" / name, tree / name)
    assert run([str(tree), "--progress", "off"]) == 0

    good = (tree / "reference.jsonl").read_text().splitlines()[0]
    bad_lines = [
        "{this is not json",
        good.replace('"session_id":"s000000",', ""),
        good.replace('"event":"member_joined"', '"event":"member_teleported"'),
    ]
    (tree / "nested").mkdir()
    (tree / "nested" / "damaged.jsonl").write_text("\n".join(bad_lines) + "\n")
    out = tmp_path / "tables"
    assert run([str(tree), "--out", str(out), "--progress", "off"]) == 2
    reasons = sorted(r["bad_reason"] for r in shutil_free_read(out / "bad_rows"))
    assert reasons == ["missing session_id", "unknown event member_teleported", "unparseable"]
    assert run([str(tree), "--max-bad-rows", "3", "--progress", "off"]) == 0


def shutil_free_read(path: Path) -> list[dict]:
    return [r.asDict() for r in shared_test_session().read.parquet(str(path)).collect()]


def test_usage_and_input_errors_exit_2(
    events_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run([str(tmp_path / "missing")]) == 2
    assert "no such file or directory" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()
    assert run([str(tmp_path / "empty")]) == 2
    assert "no event files" in capsys.readouterr().err
    assert run([str(events_dir), "--expected", "broker-9.9", "--progress", "off"]) == 2
    assert "no `broker-9.9` run" in capsys.readouterr().err
    assert run(["--bogus"]) == 2


def test_missing_java_is_reported_clearly(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    result = subprocess.run(
        [sys.executable, "-m", "group_replay", "validate", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    assert result.returncode == 2
    assert "Java not found" in result.stderr


def _spark_submit() -> Path:
    return Path(pyspark.__file__).parent / "bin" / "spark-submit"


@pytest.fixture(scope="module")
def own_spark_runs(events_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The two runs that start a Spark of their own (a subprocess each, as a user starts them):
    spark_main.py under spark-submit, and `group-replay validate` from the command line. They run
    at once: each is a local[1] driver, mostly one busy core, so on two cores the pair takes
    little more than the longer one (the tests after them waited for both, one after the other)."""
    out = tmp_path_factory.mktemp("spark-submit") / "tables"
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    main = Path(__file__).resolve().parents[1] / "validator" / "spark_main.py"
    submit = [str(_spark_submit()), "--master", "local[1]", "--driver-memory", "1g", str(main),
              str(events_dir), "--out", str(out), "--progress", "off"]  # fmt: skip
    cli = [sys.executable, "-m", "group_replay", "validate", str(events_dir / "synthetic"),
           "--master", "local[1]"]  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    with ThreadPoolExecutor(2) as pool:
        runs = {
            "spark-submit": pool.submit(
                subprocess.run, submit, capture_output=True, text=True, env=env, timeout=600, check=False
            ),
            "cli": pool.submit(
                subprocess.run, cli, capture_output=True, text=True, timeout=600, check=False, cwd=root
            ),
        }
        return {"out": out, **{name: future.result() for name, future in runs.items()}}


@pytest.mark.slow
def test_spark_main_runs_unchanged_under_spark_submit(own_spark_runs: dict[str, Any]) -> None:
    result, out = own_spark_runs["spark-submit"], own_spark_runs["out"]
    assert result.returncode == 1, result.stderr[-2000:]
    assert (out / "compatibility_matrix").is_dir()
    assert "compatibility matrix" in result.stdout


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="chromium not installed (apt-get install chromium)"
)
def test_report_renders_in_headless_chromium(validated: tuple[int, Path, Path], tmp_path: Path) -> None:
    from tests.support.render_check import render_png

    _, report, _ = validated
    png = render_png(report, tmp_path / "report.png", width=1200, height=1600)
    assert _png_size(png) == (1200, 1600)
    assert png.stat().st_size > 40_000  # a blank page compresses to a few kB


def test_one_capture_under_three_scenarios_gives_three_sections(
    events_dir: Path, injected: set[tuple[str, str]], tmp_path: Path
) -> None:
    """Issue 17: the same session replayed under three scenarios is three sections, not one merged."""
    session = sorted(s for s, run in injected if run == "broker-3.9.1")[0]
    tree = tmp_path / "events"
    tree.mkdir()
    scenarios = ("as-recorded", "static-upgrade", "mixed-static-dynamic")
    for path in sorted((events_dir / "synthetic").glob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        mine = [r for r in rows if r["session_id"] == session]
        with (tree / path.name).open("w") as handle:
            for scenario in scenarios:
                for row in mine:
                    handle.write(json.dumps({**row, "scenario": scenario}) + "\n")
    report, out = tmp_path / "report.html", tmp_path / "tables"
    assert run([str(tree), "--report", str(report), "--out", str(out), "--progress", "off"]) == 1
    html = report.read_text()
    _links_resolve(html)
    sections = re.findall(r"<section class='session' id='([^']+)'>(.*?)</section>", html, re.S)
    assert len(sections) == 3
    for scenario in scenarios:
        (body,) = [body for anchor, body in sections if f"--{scenario}--" in anchor]
        compared = re.findall(r"<td class='key'>([^<]+ vs [^<]+)</td>", body.split("<svg")[0])
        observed = ["broker-3.9.1", "broker-4.1.0"] + (["recorded"] if scenario == "as-recorded" else [])
        assert sorted(compared) == sorted(f"{run} vs reference" for run in observed), scenario
    verdicts = shared_test_session().read.parquet(str(out / "session_verdicts"))
    assert verdicts.count() == 7
    assert verdicts.where("status = 'differs'").select("scenario").distinct().count() == 3


def test_without_the_spark_extra_validate_says_what_to_install(tmp_path: Path) -> None:
    hide_pyspark = (
        "import sys; sys.modules['pyspark'] = None; import group_replay; "
        "sys.exit(group_replay.main(['validate', sys.argv[1]]))"
    )
    result = subprocess.run(
        [sys.executable, "-c", hide_pyspark, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "group-replay validate: needs the spark extra (pyspark not installed): "
        "pip install 'group-replay[spark]'"
    ]


def test_spark_start_up_lines_do_not_reach_the_terminal(own_spark_runs: dict[str, Any]) -> None:
    """The JVM's own stdout/stderr go to a log file, not through the progress display."""
    result = own_spark_runs["cli"]
    assert result.returncode == 1, result.stderr[-2000:]
    for line in result.stderr.splitlines():
        assert "WARN" not in line and "log level" not in line and "incubator" not in line, line
    assert "start Spark" in result.stderr


def test_a_run_that_could_not_be_carried_out_is_reported_not_run(
    events_dir: Path, spark: SparkSession, tmp_path: Path
) -> None:
    """AGREED #1: a `not_run` row is a result: a 'not run' verdict in the Parquet, the report and
    the matrix, never a pass and never an absence; the exit code says a comparison failed."""
    from replay.events import RebalanceEvent
    from validator.schemas import READ_SCHEMA

    tree = tmp_path / "events"
    tree.mkdir()
    for name in ("reference.jsonl", "broker-3.9.1.jsonl"):
        shutil.copy(events_dir / "synthetic" / name, tree / name)
    first = json.loads((tree / "reference.jsonl").read_text().splitlines()[0])
    reason = "JoinGroup v9 needs Kafka 2.3+; broker 2.2.0 answers v4 at most"
    row = RebalanceEvent.not_run(
        first["session_id"], first["scenario"], "broker-2.2.0", first["group_id"], reason
    )
    (tree / "broker-2.2.0.jsonl").write_text(json.dumps(row.to_json_dict()) + "\n")
    report, out = tmp_path / "report.html", tmp_path / "tables"
    assert run([str(tree), "--report", str(report), "--out", str(out), "--progress", "off"]) == 1
    verdicts = (
        spark.read.parquet(str(out / "session_verdicts")).where("observed_run = 'broker-2.2.0'").collect()
    )
    assert [v["status"] for v in verdicts] == ["not run"]
    assert verdicts[0]["not_run_detail"].startswith("broker-2.2.0 not run: ")
    if "detail" in READ_SCHEMA.fieldNames():  # the reason travels once the schema carries `detail`
        assert verdicts[0]["not_run_detail"] == f"broker-2.2.0 not run: {reason}"
    summary = spark.read.parquet(str(out / "run_summary")).where("run = 'broker-2.2.0'").collect()
    assert len(summary) == 1 and summary[0]["not_run_detail"]
    cells = (
        spark.read.parquet(str(out / "compatibility_matrix")).where("observed_run = 'broker-2.2.0'").collect()
    )
    assert sum(c["not_run"] for c in cells) == 1 and sum(c["passed"] for c in cells) == 0
    html = report.read_text()
    assert "broker-2.2.0 not run" in html
    _links_resolve(html)


def test_relative_paths_are_the_callers_directory(validated: tuple[int, Path, Path]) -> None:
    """Run from another directory than the Spark JVM's: inputs, --out and --report relative to it
    (the `validated` run)."""
    code, report, _ = validated
    assert code == 1
    caller = report.parent.parent
    assert (caller / "r" / "report.html").stat().st_size > 0
    assert (caller / "tables" / "session_verdicts").is_dir()
