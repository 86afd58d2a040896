"""The CI jobs in docs/ci (GitHub Actions, GitLab CI) run what this test runs: their group-replay
step is docs/ci/replay-corpus.sh, which replays the corpus as recorded and under every built-in
scenario against the reference, validates, and writes the JUnit reports they publish."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
import yaml

from replay.scenario import builtin_names
from tests.support.corpus import REPO_ROOT, load_manifest
from validator.session import java_problem

CI_DIR = REPO_ROOT / "docs" / "ci"
SCRIPT = "docs/ci/replay-corpus.sh"


def _github_steps() -> list[dict[str, Any]]:
    workflow = yaml.safe_load((CI_DIR / "github-actions.yml").read_text(encoding="utf-8"))
    (job,) = workflow["jobs"].values()
    return list(job["steps"])


def _gitlab_job() -> dict[str, Any]:
    pipeline = yaml.safe_load((CI_DIR / "gitlab-ci.yml").read_text(encoding="utf-8"))
    (job,) = pipeline.values()
    return dict(job)


def _commands(lines: list[str]) -> list[list[str]]:
    """The shell lines that run the corpus (the group-replay work is all in the script)."""
    return [shlex.split(line) for line in lines if SCRIPT in line]


def test_both_jobs_install_group_replay_run_the_script_and_publish_its_junit() -> None:
    steps = _github_steps()
    runs = [step["run"] for step in steps if "run" in step]
    assert any("pip install" in run and ".[spark]" in run for run in runs)
    (github,) = _commands(runs)
    published = [s["with"]["report_paths"] for s in steps if "junit" in s.get("uses", "")]
    assert published == [f"{github[2]}/junit/*.xml"]

    job = _gitlab_job()
    assert any("pip install" in line and ".[spark]" in line for line in job["before_script"])
    (gitlab,) = _commands(job["script"])
    assert job["artifacts"]["reports"]["junit"] == f"{gitlab[2]}/junit/*.xml"
    assert github == gitlab == [SCRIPT, "fixtures/captures", "group-replay-ci"]


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}")
def test_the_ci_command_replays_the_corpus_and_writes_junit(tmp_path: Path) -> None:
    """The jobs' command, run from a checkout-shaped directory with the installed group-replay."""
    for part in ("fixtures", "docs"):
        (tmp_path / part).symlink_to(REPO_ROOT / part)
    (command,) = _commands([step["run"] for step in _github_steps() if "run" in step])
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    result = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800)
    output = result.stdout[-4000:] + result.stderr[-4000:]
    out = tmp_path / command[2]
    scenarios = ["as-recorded", *builtin_names()]
    assert sorted(p.name for p in (out / "junit").glob("*.xml")) == sorted(
        [*(f"replay-{s}.xml" for s in scenarios), "validate.xml"]
    ), output
    captures = sum(e.protocol == "classic" for e in load_manifest())  # the job replays *.pcapng
    for scenario in scenarios:
        suite = ET.parse(out / "junit" / f"replay-{scenario}.xml").getroot()
        cases = suite.findall(".//testcase")
        assert len(cases) == captures, (scenario, output)  # each capture's reference run
    validate = ET.parse(out / "junit" / "validate.xml").getroot().findall(".//testcase")
    assert len(validate) == captures  # as-recorded: each recorded run vs its reference replay
    assert (out / "report.html").stat().st_size > 0
    assert result.returncode in (0, 1), output  # 1: differences, each a failing test case
    failing = [c for c in validate if c.find("failure") is not None]
    assert (result.returncode == 1) == bool(failing), output
