"""YAML file fuzz (issue 18 defect 4): seeded mutations of the built-in scenarios and of rewrite
policies through the real command line. The rule: exit 0, 1 or 2 with a message (naming the file
when the file is at fault), never a traceback, never a hang. Most cases call `group_replay.main`
in-process for speed; a few go through a subprocess like a user's shell. The long version with
figures: bench/yaml_fuzz.py."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from group_replay import main as group_replay
from proxy.rewrite import PolicyError, load_policy
from tests.support.synth import synthesize_capture
from tests.support.yaml_fuzz import (
    POLICY_SEEDS,
    Outcome,
    exercise_policy,
    mutations,
    rule_problem,
    run_in_process,
    scenario_seeds,
    write,
)

SCENARIO_CASES = 600
POLICY_CASES = 200
REPLAYS = 30  # mutated scenarios that parse are also replayed against the reference, up to this many
LIMIT_S = 60.0  # a hang guard, not a timing: a case past it is a hang
ROOT = Path(__file__).resolve().parents[1]
QUIET = ("--progress", "off")


@pytest.fixture(scope="module")
def capture(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("captures") / "fuzz-group.pcapng"
    synthesize_capture(path, members=3, static=True, join_api_version=5, duration_ms=30_000)
    return path


def _report(broken: list[Outcome]) -> str:
    return "\n\n".join(f"case {o.case} ({o.command}): {o.problem}" for o in broken[:3])


def test_mutated_scenarios_through_the_cli(tmp_path: Path, capture: Path) -> None:
    outcomes: list[Outcome] = []
    replays = 0
    for case, content in mutations(scenario_seeds(), SCENARIO_CASES, seed=18):
        path = write(tmp_path / f"scenario-{case}.yaml", content)
        show = run_in_process(
            case,
            "scenarios show",
            lambda p=path: group_replay(["scenarios", "show", str(p)]),
            LIMIT_S,
            str(path),
        )
        outcomes.append(show)
        if show.exit_code == 0 and replays < REPLAYS:
            replays += 1
            argv = ["replay", str(capture), "--scenario", str(path), "--out", str(tmp_path / f"out-{case}")]
            outcomes.append(
                run_in_process(
                    case, "replay", lambda a=argv: group_replay([*a, "--progress", "off"]), LIMIT_S
                )
            )
    broken = [o for o in outcomes if o.problem]
    assert not broken, _report(broken)
    shown = Counter(o.exit_code for o in outcomes if o.command == "scenarios show")
    assert shown[2] > SCENARIO_CASES // 2 and shown[0] > 0, shown  # the mutations reach both sides
    assert replays == REPLAYS


def test_mutated_policies_through_the_proxy_cli(tmp_path: Path) -> None:
    """A policy that does not load must make `group-replay proxy` exit 2 before it listens; one
    that loads is run on real requests (the CLI would start serving)."""
    outcomes: list[Outcome] = []
    loaded = 0
    for case, content in mutations(POLICY_SEEDS, POLICY_CASES, seed=18):
        path = write(tmp_path / f"policy-{case}.yaml", content)
        try:
            policy = load_policy(path)
        except PolicyError:
            argv = ["proxy", "--upstream", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--policy", str(path)]
            outcomes.append(run_in_process(case, "proxy", lambda a=argv: group_replay(a), LIMIT_S, str(path)))
            continue
        loaded += 1
        outcomes.append(
            run_in_process(case, "policy on requests", lambda p=policy: exercise_policy(p), LIMIT_S)
        )
    broken = [o for o in outcomes if o.problem]
    assert not broken, _report(broken)
    assert 0 < loaded < POLICY_CASES


def test_a_few_through_a_subprocess(tmp_path: Path, capture: Path) -> None:
    """The same rule with the console script's own process: exit code, stderr, no traceback.
    The seven processes are independent (each its own output directory) and run together."""
    picked: dict[bool, list[Path]] = {True: [], False: []}
    for case, content in mutations(scenario_seeds(), 200, seed=181):
        path = write(tmp_path / f"scenario-{case}.yaml", content)
        parses = run_in_process(
            case, "check", lambda p=path: group_replay(["scenarios", "show", str(p)]), LIMIT_S
        )
        if len(picked[parses.exit_code == 0]) < 3:
            picked[parses.exit_code == 0].append(path)
        if len(picked[True]) == len(picked[False]) == 3:
            break  # the first three of each kind are picked; the later cases would not change them
    assert len(picked[True]) == len(picked[False]) == 3
    runs = [["scenarios", "show", str(p)] for p in picked[False]]
    runs += [
        ["replay", str(capture), "--scenario", str(p), "--out", str(tmp_path / f"out-{i}"), *QUIET]
        for i, p in enumerate(picked[True])
    ]
    bad_policy = write(tmp_path / "policy.yaml", POLICY_SEEDS[1][:40])
    runs.append(
        ["proxy", "--upstream", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--policy", str(bad_policy)]
    )

    def run(argv: list[str]) -> str | None:
        done = subprocess.run(
            [sys.executable, "-m", "group_replay", *argv],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=LIMIT_S,
            check=False,
        )
        return rule_problem(done.returncode, done.stderr, argv[-1] if argv[0] != "replay" else None)

    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        problems = list(pool.map(run, runs))
    assert problems == [None] * len(runs), list(zip(runs, problems, strict=True))
