"""Replay CPU, this checkout against another checkout (issue 11's "within noise" measure).

The machine is shared (load average 5-30 while the others' brokers and tests run), so two runs
of the same code minutes apart differ by 20-50%. Here each round runs both sides one after the
other in fresh interpreters, each with its own checkout and virtualenv, and reports CPU seconds
(`time.process_time`) of the replay call only: the plans are built once per side (reading the
capture is not timed) and pickled into `--work`. Cases, all classic and against the reference
coordinator in virtual time:

- the bench capture as recorded, and under the `static-leader-bounce` scenario (bench/replay.py's
  classic rows; the capture is bench/replay.py's, 100 static members over one simulated hour),
- every capture under fixtures/captures/ (the classic corpus) replayed as recorded, `--corpus-repeats`
  times each, summed.

The other side may be any checkout with the same entry points, including the engine era (33506fa:
`replay.engine.build_plan` / `replay_reference`); the corpus is read from this checkout for both.

    .venv/bin/python bench/replay_ab.py --base /path/to/checkout --capture bench100.pcapng [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]

# Run in the side's checkout (cwd) by the side's own interpreter; prints one JSON line.
CHILD = r"""
import gc, glob, json, os, pickle, sys, time
sys.path.insert(0, os.getcwd())
sys.setrecursionlimit(100_000)
try:
    from replay.plan import build_plan
    from replay.run import replay_reference
except ImportError:  # the engine era (33506fa)
    from replay.engine import build_plan, replay_reference
from proxy.capture.reader import read_capture
from replay.scenario import load_builtin

capture, corpus_dir, cache, corpus_repeats, repeats = sys.argv[1:6]
if not os.path.exists(cache):
    corpus = [(path, build_plan(read_capture(path), "corpus"))
              for path in sorted(glob.glob(os.path.join(corpus_dir, "*.pcapng")))]
    with open(cache, "wb") as out:
        pickle.dump((build_plan(read_capture(capture), "bench"), corpus), out, protocol=5)
with open(cache, "rb") as inp:
    plan, corpus = pickle.load(inp)
gc.collect()
gc.freeze()
bounce = load_builtin("static-leader-bounce")
figures = {}
for case, call in (
    ("as recorded", lambda: replay_reference(plan)),
    ("static-leader-bounce", lambda: replay_reference(plan, bounce)),
    ("fixture corpus as recorded",
     lambda: [replay_reference(p) for _ in range(int(corpus_repeats)) for _, p in corpus]),
):
    times = []
    for _ in range(int(repeats)):
        started = time.process_time()
        result = call()
        times.append(time.process_time() - started)
    count = sum(r.rpcs for r in result) if isinstance(result, list) else result.rpcs
    figures[case] = {"cpu_s": sorted(times)[len(times) // 2], "rpcs": count}
print(json.dumps(figures))
"""


def run_side(checkout: Path, args: argparse.Namespace, cache: Path) -> dict[str, dict[str, float]]:
    python = checkout / ".venv" / "bin" / "python"
    argv = [str(python), "-c", CHILD, str(args.capture.resolve()), str(ROOT / "fixtures" / "captures")]
    argv += [str(cache), str(args.corpus_repeats), str(args.repeats)]
    done = subprocess.run(argv, cwd=checkout, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"replay_ab: {checkout} failed:\n{done.stderr[-2000:]}")
    figures: dict[str, dict[str, float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def load_average() -> float:
    return float(Path("/proc/loadavg").read_text(encoding="ascii").split()[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", type=Path, required=True, help="the other checkout (with .venv/)")
    parser.add_argument("--capture", type=Path, required=True, help="bench/replay.py's capture")
    parser.add_argument("--work", type=Path, default=Path("/tmp/replay-ab"), help="plan cache")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3, help="replays per case per round (median)")
    parser.add_argument("--corpus-repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, help="also write every round as JSON")
    args = parser.parse_args(argv)
    if not args.capture.exists() or not (args.base / ".venv" / "bin" / "python").exists():
        print("replay_ab: --capture must exist and --base must hold a .venv", file=sys.stderr)
        return 2
    args.work.mkdir(parents=True, exist_ok=True)
    sides = {"base": args.base.resolve(), "this": ROOT}
    rounds: list[dict[str, object]] = []
    for number in range(args.rounds):
        # Alternate which side goes first, so neither always meets the same moment of the load.
        for side in list(sides) if number % 2 == 0 else list(reversed(sides)):
            load = load_average()
            cache = args.work / f"{side}-{args.capture.stem}.pickle"
            figures = run_side(sides[side], args, cache)
            rounds.append({"round": number + 1, "side": side, "load": load, "figures": figures})
    table = Table(title=f"replay CPU seconds, base = {sides['base']}, this = {ROOT}")
    cases = list(rounds[0]["figures"])  # type: ignore[call-overload]
    for column in ("round", "side", "load", *cases):
        table.add_column(column, justify="right")
    for row in rounds:
        figures = row["figures"]
        table.add_row(
            str(row["round"]),
            str(row["side"]),
            f"{row['load']:.1f}",
            *(f"{figures[case]['cpu_s']:.3f}" for case in cases),  # type: ignore[index]
        )
    medians = {
        side: {
            case: statistics.median(r["figures"][case]["cpu_s"] for r in rounds if r["side"] == side)  # type: ignore[index]
            for case in cases
        }
        for side in sides
    }
    ratios = (f"{medians['this'][c] / medians['base'][c]:.2f}x" for c in cases)
    table.add_row("median", "this / base", "", *ratios)
    Console().print(table)
    if args.json:
        args.json.write_text(json.dumps({"rounds": rounds, "medians": medians}, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
