"""Instructions the proxy process executes per exchange, unrecorded and in group scope (callgrind).

Wall-clock CPU per exchange (bench/proxy_cpu.py) moves by +-30% between runs of the same code on
the shared 2-core VM; an instruction count does not depend on what else runs. This runs the proxy
under `valgrind --tool=callgrind` (about 50x slower) for the synthetic loads of
bench/proxy_overhead.py, zeroes the counters once it listens, dumps them when the load client is
done, and divides the proxy's user-space instructions by the requests it relayed. Kernel work
(syscalls, wake-ups, the scheduler) is not counted: that part of the CPU figure is not here.

Under callgrind the relay runs ~50x slower while the capture's hand-over stays on a ~2 ms timer,
so each batch carries fewer exchanges than at full speed and the per-batch share of group scope is
counted several times over: the `hand-overs / 1k` column says how many batches it paid (the
`os.writev` calls to the writer process; bench/README.md, "rec4", for the split into per-read and
per-batch costs).

    python bench/proxy_instructions.py [--seconds 10] [--loads 0,1,2] [--baseline DIR]
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from proxy_overhead import ROOT, SYNTHETIC, free_port, load_tool, process, wait_port

_REQUESTS = re.compile(r"\((\d+) requests\)")
_SUMMARY = re.compile(r"^summary: (\d+)$", re.MULTILINE)
# A call to os.writev in the callgrind file: "cfn=(ID)" (name given once per file) then "calls=N ..."
_NAMED = re.compile(r"^c?fn=\((\d+)\) (\S+)$", re.MULTILINE)
STARTUP_S = 600.0  # the proxy's imports under callgrind take a minute or more on a loaded VM


def callgrind_run(
    tool: Path, upstream: int, load: tuple[str, int, int, int], kind: str, seconds: float, workdir: Path,
    baseline: Path | None,
) -> tuple[int, int, int]:  # fmt: skip
    """(requests relayed, instructions, hand-overs to the writer) of one callgrind run."""
    _, conns, window, size = load
    port = free_port()
    out = workdir / f"callgrind.{kind.replace(' ', '-')}.%p"
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
           sys.executable, "-m", "group_replay", "proxy", "--upstream", f"127.0.0.1:{upstream}",
           "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR"]  # fmt: skip
    if kind != "proxy":
        cmd += ["--record", str(workdir / "c.pcapng"), "--record-scope", "group"]
    cwd = baseline if kind == "main group" and baseline is not None else ROOT
    proxy = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        wait_port(port, timeout_s=STARTUP_S)
        time.sleep(1.0)  # the listening socket's first accept and the loop's start-up settle
        subprocess.run(["callgrind_control", "-z", str(proxy.pid)], check=True, capture_output=True)
        subprocess.run(
            [str(tool), "client", "127.0.0.1", str(port), str(conns), str(window), str(size), str(seconds)],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(["callgrind_control", "-d", str(proxy.pid)], check=True, capture_output=True)
    finally:
        proxy.send_signal(signal.SIGINT)
        stdout, _ = proxy.communicate(timeout=STARTUP_S)
    (workdir / "c.pcapng").unlink(missing_ok=True)
    requests = _REQUESTS.search(stdout)
    dumps = sorted(workdir.glob(f"callgrind.{kind.replace(' ', '-')}.{proxy.pid}.*"))
    if requests is None or not dumps:
        raise RuntimeError(f"{kind}: no request count or no callgrind dump (proxy said: {stdout[-500:]})")
    text = dumps[0].read_text()
    summary = _SUMMARY.search(text)
    assert summary is not None, dumps[0]
    for path in workdir.glob("callgrind.*"):
        path.unlink()
    return int(requests.group(1)), int(summary.group(1)), handovers(text)


def handovers(text: str) -> int:
    """Calls of os.writev (the capture's hand-overs: the relay's own sends use send/sendmsg)."""
    ids = {name: ident for ident, name in _NAMED.findall(text)}
    ident = ids.get("os_writev")
    if ident is None:
        return 0
    calls = re.findall(rf"^cfn=\({ident}\)(?: os_writev)?\ncalls=(\d+)", text, re.MULTILINE)
    return sum(map(int, calls))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="load per run (under callgrind)")
    parser.add_argument("--loads", help="comma-separated indexes into the synthetic loads (default all)")
    parser.add_argument("--baseline", type=Path, help="a checkout whose group scope is counted beside it")
    args = parser.parse_args()
    loads = [SYNTHETIC[int(i)] for i in args.loads.split(",")] if args.loads else SYNTHETIC
    kinds = ["proxy", "group", *(["main group"] if args.baseline else [])]
    tool = load_tool()
    upstream = free_port()
    print("| load | relay | requests | instructions / exchange | x unrecorded | hand-overs / 1k exchanges |")
    print("|---|---|---:|---:|---:|---:|")
    with (
        tempfile.TemporaryDirectory(prefix="proxy-instructions-") as tmp,
        process([str(tool), "server", str(upstream)], upstream),
    ):
        for load in loads:
            base = 0.0
            for kind in kinds:
                requests, instructions, batches = callgrind_run(
                    tool, upstream, load, kind, args.seconds, Path(tmp), args.baseline
                )
                per = instructions / max(requests, 1)
                base = base or per
                print(f"| {load[0]} | {kind} | {requests:,} | {per:,.0f} | {per / base:.2f} | "
                      f"{1000 * batches / max(requests, 1):.1f} |", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
