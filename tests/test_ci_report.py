"""CI-native outputs (issue 15): `replay` and `validate` write JUnit XML (one case per session x
scenario x run, failures carrying the differences) and a JSON summary with the exit code."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from group_replay import main as group_replay
from replay.ci_report import CaseStatus, TestCase, junit_xml, summary_document
from tests.support.synth import synthesize_capture
from validator.session import java_problem

ROOT = Path(__file__).resolve().parents[1]


def _cases(xml_text: str) -> list[ET.Element]:
    return ET.fromstring(xml_text).findall("./testsuite/testcase")


def test_junit_xml_is_well_formed_and_counts_what_it_holds() -> None:
    cases = [
        TestCase("s1.as-recorded", "reference", CaseStatus.PASSED),
        TestCase(
            "s1.as-recorded",
            "broker-3.9",
            CaseStatus.FAILED,
            "2 differences",
            "leader: a -> b\nbell \x07 <&>",
        ),
        TestCase("s2.as-recorded", "broker-2.2", CaseStatus.ERROR, "not run: JoinGroup v9 needs 2.3+"),
    ]
    root = ET.fromstring(junit_xml("suite", cases))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")
    failure = root.find("./testsuite/testcase[@name='broker-3.9']/failure")
    assert failure is not None and failure.get("message") == "2 differences"
    assert failure.text == "leader: a -> b\nbell \ufffd <&>"  # control characters cannot be XML
    error = root.find("./testsuite/testcase[@name='broker-2.2']/error")
    assert error is not None and "JoinGroup v9" in (error.get("message") or "")
    document = summary_document("replay", 1, cases, scenario="as-recorded")
    assert document["counts"] == {"passed": 1, "failed": 1, "error": 1}
    assert document["cases"][1]["details"] == ["leader: a -> b", "bell \x07 <&>"]


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("captures") / "ci-group.pcapng"
    synthesize_capture(path, members=3, static=False, duration_ms=30_000)
    return path


def test_replay_writes_one_case_per_run_with_the_unmet_expectations(capture: Path, tmp_path: Path) -> None:
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: wrong\ndescription: d\nrolling: {start_ms: 1000}\nexpect: {rebalances: 0}\n")
    junit, summary = tmp_path / "ci" / "replay.xml", tmp_path / "ci" / "replay.json"
    argv = [
        "replay",
        str(capture),
        "--scenario",
        str(wrong),
        "--out",
        str(tmp_path / "out"),
        "--progress",
        "off",
    ]
    assert group_replay([*argv, "--junit-xml", str(junit), "--summary-json", str(summary)]) == 1
    [case] = _cases(junit.read_text())
    assert (case.get("classname"), case.get("name")) == ("ci-group.wrong", "reference")
    failure = case.find("failure")
    assert failure is not None and "rebalances" in (failure.text or "")
    document = json.loads(summary.read_text())
    assert document["exit_code"] == 1 and document["counts"]["failed"] == 1
    assert document["scenario"] == "wrong" and document["events"] > 0

    passing = ["replay", str(capture), "--scenario", "static-leader-bounce", "--out", str(tmp_path / "ok")]
    assert group_replay([*passing, "--progress", "off", "--junit-xml", str(junit)]) == 0
    assert [c.find("failure") for c in _cases(junit.read_text())] == [None]


def test_several_scenarios_in_one_run_write_each_ones_files_and_the_worst_exit_code(
    capture: Path, tmp_path: Path
) -> None:
    """`--scenario` more than once (docs/ci/replay-corpus.sh): each scenario's events, JUnit and
    summary land where its own command would write them ({scenario} in the paths), each summary
    carries that scenario's exit code, and the command exits with the worst."""
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("name: wrong\ndescription: d\nrolling: {start_ms: 1000}\nexpect: {rebalances: 0}\n")
    names = ["static-leader-bounce", "wrong", "as-recorded"]
    scenario_args = [arg for name in names for arg in ("--scenario", str(wrong) if name == "wrong" else name)]
    ci = tmp_path / "ci"
    argv = ["replay", str(capture), *scenario_args, "--out", str(tmp_path / "events"), "--progress", "off"]
    reports = [
        "--junit-xml",
        str(ci / "replay-{scenario}.xml"),
        "--summary-json",
        str(ci / "{scenario}.json"),
    ]
    assert group_replay([*argv, *reports]) == 1
    for name, code in zip(names, [0, 1, 0], strict=True):
        rows = (tmp_path / "events" / name / "events.jsonl").read_text().splitlines()
        assert rows and {json.loads(row)["scenario"] for row in rows} == {name}
        [case] = _cases((ci / f"replay-{name}.xml").read_text())
        assert case.get("classname") == f"ci-group.{name}"
        assert (case.find("failure") is not None) == (code == 1)
        document = json.loads((ci / f"{name}.json").read_text())
        assert (document["scenario"], document["exit_code"]) == (name, code)
    # Several scenarios cannot share one report file, nor run one scenario twice: usage errors.
    assert group_replay([*argv, "--junit-xml", str(ci / "one.xml")]) == 2
    assert group_replay(["replay", str(capture), "--scenario", "as-recorded", "--scenario", "as-recorded",
                         "--out", str(tmp_path / "twice")]) == 2  # fmt: skip
    assert not (ci / "one.xml").exists() and not (tmp_path / "twice").exists()


@pytest.mark.spark
@pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}")
def test_validate_writes_every_comparison_with_its_differences(tmp_path: Path) -> None:
    from pyspark.sql import SparkSession

    from replay.events import RebalanceEvent
    from validator.cli import run

    tree = tmp_path / "events"
    shutil.copytree(ROOT / "fixtures" / "events" / "synthetic", tree)
    first = json.loads((tree / "reference.jsonl").read_text().splitlines()[0])
    reason = "JoinGroup v9 needs Kafka 2.3+; broker 2.2.0 answers v4 at most"
    row = RebalanceEvent.not_run(
        first["session_id"], first["scenario"], "broker-2.2.0", first["group_id"], reason
    )
    (tree / "broker-2.2.0.jsonl").write_text(json.dumps(row.to_json_dict()) + "\n")
    junit, summary, out = tmp_path / "validate.xml", tmp_path / "validate.json", tmp_path / "tables"
    argv = [
        str(tree),
        "--out",
        str(out),
        "--progress",
        "off",
        "--junit-xml",
        str(junit),
        "--summary-json",
        str(summary),
    ]
    assert run(argv) == 1

    cases = _cases(junit.read_text())
    spark = SparkSession.builder.getOrCreate()
    verdicts = spark.read.parquet(str(out / "session_verdicts")).collect()
    assert len(cases) == len(verdicts)  # one case per comparison
    by_status: dict[str, int] = {}
    for v in verdicts:
        by_status[v["status"]] = by_status.get(v["status"], 0) + 1
    failures = [c.find("failure") for c in cases if c.find("failure") is not None]
    errors = [c.find("error") for c in cases if c.find("error") is not None]
    assert len(failures) == by_status.get("differs", 0) + by_status.get("failed", 0) > 0
    assert len(errors) == by_status["not run"] == 1
    assert reason in (errors[0].get("message") or "")  # type: ignore[union-attr]
    assert all(f.text and "expected" in f.text and "observed" in f.text for f in failures)  # type: ignore[union-attr]
    document = json.loads(summary.read_text())
    assert document["exit_code"] == 1 and document["counts"]["error"] == 1
    assert sum(document["counts"].values()) == len(verdicts)
