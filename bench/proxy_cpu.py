"""CPU seconds the proxy spends per 100,000 exchanges, unrecorded and in each record scope.

On the shared, loaded VM throughput ratios swing several-fold between runs of the same relay
(bench/README.md); CPU time per exchange does not depend on how much of the CPU the proxy was
given. Same synthetic load as bench/proxy_overhead.py (its C load tool: Produce-shaped frames,
echo server), run for `--seconds` against `group-replay proxy`, `--record` (group scope) and
`--record --record-scope all`, alternating the order every round. Measured from /proc: the proxy
process (its event loop: no capture thread since branch rec) and the capture writer process apart.

    python bench/proxy_cpu.py [--seconds 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import ROOT, SYNTHETIC, free_port, load_tool, process, wait_port

RELAYS = {"proxy": [], "group": ["--record-scope", "group"], "all": ["--record-scope", "all"]}
BASELINE = "main group"  # --baseline: group scope from another checkout, in the same rounds
_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """utime + stime of a live process, in seconds (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


def writer_pid(proxy_pid: int) -> int | None:
    for child in Path(f"/proc/{proxy_pid}/task/{proxy_pid}/children").read_text().split():
        if "proxy.capture.writer" in Path(f"/proc/{child}/cmdline").read_text():
            return int(child)
    return None


def measure(tool: Path, upstream: int, load: tuple[str, int, int, int], kind: str, seconds: float,
            workdir: Path, baseline: Path | None = None) -> tuple[int, float, float]:  # fmt: skip
    """(exchanges, proxy CPU s, writer CPU s) of one run."""
    _, conns, window, size = load
    port = free_port()
    cmd = [sys.executable, "-m", "group_replay", "proxy", "--upstream", f"127.0.0.1:{upstream}",
           "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR"]  # fmt: skip
    if kind != "proxy":
        cmd += ["--record", str(workdir / "c.pcapng"), *RELAYS.get(kind, RELAYS["group"])]
    with process(cmd, port, cwd=baseline if kind == BASELINE else ROOT) as proxy:
        writer = writer_pid(proxy.pid) if kind != "proxy" else None
        before = cpu_s(proxy.pid), cpu_s(writer) if writer else 0.0
        out = subprocess.run(
            [str(tool), "client", "127.0.0.1", str(port), str(conns), str(window), str(size), str(seconds)],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        after = cpu_s(proxy.pid), cpu_s(writer) if writer else 0.0
    (workdir / "c.pcapng").unlink(missing_ok=True)
    exchanges = int(json.loads(out.strip().splitlines()[-1])["requests"])
    return exchanges, after[0] - before[0], after[1] - before[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=4.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="a checkout whose group scope runs beside it")
    parser.add_argument("--loads", help="comma-separated indexes into the synthetic loads (default all)")
    args = parser.parse_args()
    relays = [*RELAYS, *([BASELINE] if args.baseline else [])]
    loads = [SYNTHETIC[int(i)] for i in args.loads.split(",")] if args.loads else SYNTHETIC
    tool = load_tool()
    upstream = free_port()
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with (
        tempfile.TemporaryDirectory(prefix="proxy-cpu-") as tmp,
        process([str(tool), "server", str(upstream)], upstream),
    ):
        wait_port(upstream)
        for round_ in range(args.rounds):
            kinds = relays if round_ % 2 == 0 else relays[::-1]
            for load in loads:
                for kind in kinds:
                    run = measure(tool, upstream, load, kind, args.seconds, Path(tmp), args.baseline)
                    exchanges, proxy_s, writer_s = run
                    per = 100_000 / max(exchanges, 1)
                    rows.setdefault((load[0], kind), []).append((proxy_s * per, writer_s * per))
                    print(f"  round {round_} {load[0]} / {kind}: {exchanges:,} exchanges, proxy "
                          f"{proxy_s:.2f} s, writer {writer_s:.2f} s (load {os.getloadavg()[0]:.1f})",
                          file=sys.stderr)  # fmt: skip
    print("| load | relay | proxy CPU s / 100k (median) | x unrecorded | writer CPU s / 100k | rounds |")
    print("|---|---|---:|---:|---:|---:|")
    for (load, kind), values in rows.items():
        proxy_med = statistics.median(v[0] for v in values)
        base = statistics.median(v[0] for v in rows[(load, "proxy")])
        writer_med = statistics.median(v[1] for v in values)
        ratio = proxy_med / base
        print(f"| {load} | {kind} | {proxy_med:.2f} | {ratio:.2f} | {writer_med:.2f} | {len(values)} |")
    print(f"\ncpus: {os.cpu_count()}, load average at the end: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
