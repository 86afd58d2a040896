"""YAML file fuzz, long version (issue 18 defect 4; quick version: tests/test_yaml_fuzz.py).

Seeded mutations of the built-in scenarios through `group-replay scenarios show FILE` and, for
those that parse, `group-replay replay CAPTURE --scenario FILE` against the reference; mutated
rewrite policies through `group-replay proxy --policy FILE` (those that load are run on real
requests instead: the command would start serving). The rule: exit 0, 1 or 2 with a message,
never a traceback, never longer than --limit seconds. Baseline from the same run: the unmutated
built-in scenarios replayed on the same capture.

    python bench/yaml_fuzz.py [--scenarios 5000] [--policies 1000] [--replays 300] [--seed 18]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from group_replay import main as group_replay
from proxy.rewrite import PolicyError, load_policy
from replay.scenario import builtin_names
from tests.support.synth import synthesize_capture
from tests.support.yaml_fuzz import (
    POLICY_SEEDS,
    Outcome,
    exercise_policy,
    mutations,
    run_in_process,
    scenario_seeds,
    write,
)


def _row(table: Table, label: str, outcomes: list[Outcome]) -> None:
    codes = Counter(o.exit_code for o in outcomes if o.problem is None)
    times = sorted(o.seconds for o in outcomes) or [0.0]
    tracebacks = sum(1 for o in outcomes if o.problem and o.problem.startswith("traceback"))
    hangs = sum(1 for o in outcomes if o.problem and o.problem.startswith("no answer"))
    other = sum(1 for o in outcomes if o.problem) - tracebacks - hangs
    p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
    table.add_row(
        label,
        f"{len(outcomes):,}",
        f"{codes[0]:,} / {codes[1]:,} / {codes[2]:,}",
        str(tracebacks),
        str(hangs),
        str(other),
        f"{statistics.median(times) * 1000:.1f} ms",
        f"{p99 * 1000:.1f} ms",
        f"{times[-1]:.2f} s",
    )


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scenarios", type=int, default=5000)
    parser.add_argument("--policies", type=int, default=1000)
    parser.add_argument("--replays", type=int, default=300)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--limit", type=float, default=60.0, help="seconds after which a case is a hang")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="yaml-fuzz-"))
    capture = tmp / "group.pcapng"
    synthesize_capture(capture, members=3, static=True, join_api_version=5, duration_ms=30_000)
    started = time.perf_counter()

    baseline = [
        run_in_process(
            0,
            "replay",
            lambda n=name: group_replay(
                ["replay", str(capture), "--scenario", n, "--out", str(tmp / "base"), "--progress", "off"]
            ),
            args.limit,
        )
        for name in builtin_names()
    ]
    shows: list[Outcome] = []
    replays: list[Outcome] = []
    for case, content in mutations(scenario_seeds(), args.scenarios, args.seed):
        path = write(tmp / f"scenario-{case % 100}.yaml", content)
        show = run_in_process(
            case, "show", lambda p=path: group_replay(["scenarios", "show", str(p)]), args.limit, str(path)
        )
        shows.append(show)
        if show.exit_code == 0 and len(replays) < args.replays:
            argv = [
                "replay",
                str(capture),
                "--scenario",
                str(path),
                "--out",
                str(tmp / "out"),
                "--progress",
                "off",
            ]
            replays.append(run_in_process(case, "replay", lambda a=argv: group_replay(a), args.limit))
    policies: list[Outcome] = []
    for case, content in mutations(POLICY_SEEDS, args.policies, args.seed):
        path = write(tmp / f"policy-{case % 100}.yaml", content)
        try:
            policy = load_policy(path)
        except PolicyError:
            argv = ["proxy", "--upstream", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--policy", str(path)]
            policies.append(
                run_in_process(case, "proxy", lambda a=argv: group_replay(a), args.limit, str(path))
            )
            continue
        except BaseException as exc:  # the rule is broken: count it through the same path
            policies.append(Outcome(case, "load", None, 0.0, "", f"traceback: {exc!r}"))
            continue
        policies.append(
            run_in_process(case, "policy on requests", lambda p=policy: exercise_policy(p), args.limit)
        )

    table = Table(title=f"YAML fuzz, seed {args.seed} ({time.perf_counter() - started:.0f} s in all)")
    for column in ("what", "cases", "exit 0 / 1 / 2", "tracebacks", "hangs", "other", "median", "p99", "max"):
        table.add_column(column, justify="right" if column != "what" else "left")
    _row(table, "baseline: built-in scenarios replayed", baseline)
    _row(table, "mutated scenarios: scenarios show", shows)
    _row(table, "mutated scenarios that parse: replay", replays)
    _row(table, "mutated policies: proxy --policy / on requests", policies)
    Console().print(table)
    broken = [o for o in [*baseline, *shows, *replays, *policies] if o.problem]
    for o in broken[:5]:
        print(f"case {o.case} ({o.command}): {o.problem}", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
