"""Microbenchmarks of group scope's recording path, this tree against a baseline, same run.

Two measures, each the best of 7 repetitions, in a fresh process per tree, the trees alternating:
- `writer`: the capture writer process's `Synthesizer.batch` on header-only runs (marshalled
  batches of 64 runs, as the proxy sends them: packed into one bytes item where the tree has
  `layouts.HEADER_RUN`) of 1 frame (a client one request at a time) and
  of 64 frames (a pipelining client), CPU per request/response pair.
- `relay`: the proxy's event loop (`proxy.server._ClientSide` with stand-in transports, a real
  `CaptureWriter` and its writer process, inside a running asyncio loop), process CPU per
  request/response pair (every thread of the proxy process; the writer process apart),
  unrecorded and in group scope, at 1 and 64 frames per read.

    python bench/capture_micro.py [--baseline DIR] [--rounds 3] [--writer-only]

Where the tree has the C builder of header-only packets built (`proxy.capture._snapped`), the
writer measures run with each builder (`python`, `native`) in the same process; the shapes are
runs of heads (bigger frames) and of whole frames (what the pipelined load hands over).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import marshal
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _produce(correlation_id: int) -> bytes:
    payload = struct.pack(">hhih", 0, 7, correlation_id, 3) + b"abc" + b"x" * 80
    return struct.pack(">i", len(payload)) + payload


def _response(correlation_id: int) -> bytes:
    payload = struct.pack(">i", correlation_id) + b"y" * 92
    return struct.pack(">i", len(payload)) + payload


def _run_frames(frames: int, i: int, whole: bool) -> tuple[bytes, bytes]:
    """A run's requests and responses as the pipelined synthetic load sends them (104-byte
    requests, 12-byte responses: `bench/proxy_overhead.py`), whole or as their heads."""
    from proxy.layouts import REQUEST_HEADS, RESPONSE_HEADS

    ids = range(i * frames, (i + 1) * frames)
    if whole:
        return (
            b"".join(REQUEST_HEADS.pack(100, 0, 7, c) + b"r" * 92 for c in ids),
            b"".join(RESPONSE_HEADS.pack(8, c) + b"s" * 4 for c in ids),
        )
    return (
        b"".join(REQUEST_HEADS.pack(120, 0, 7, c) for c in ids),
        b"".join(RESPONSE_HEADS.pack(96, c) for c in ids),
    )


def writer_us(frames: int, pairs: int, whole: bool = False, builder: str | None = None) -> float:
    """`builder`: "python" or "native" forces `snapped.run_blocks` where the tree has it."""
    from proxy.capture import snapped
    from proxy.capture.packets import Synthesizer
    from proxy.layouts import HEADERS, OPEN

    if builder is not None:
        snapped.run_blocks = getattr(snapped, f"{builder}_run_blocks")  # type: ignore[attr-defined]
    runs: list[tuple[object, ...]] = []
    for i in range(pairs // frames):
        requests, responses = _run_frames(frames, i, whole)
        runs.append((HEADERS, 1 + i % 4, 1000 + i, "request", "c", requests))
        runs.append((HEADERS, 1 + i % 4, 1001 + i, "response", "c", responses))
    from proxy import layouts

    if hasattr(layouts, "HEADER_RUN"):  # runs packed into one bytes item per batch, as the proxy sends them
        run_head = layouts.HEADER_RUN
        flag = (whole,) if hasattr(layouts, "WHOLE_FRAMES") else ()

        def packed(chunk: list[tuple[object, ...]]) -> list[bytes]:
            return [
                b"".join(
                    run_head.pack(conn, ts, len(heads) if direction == "request" else -len(heads), *flag)
                    + heads
                    for _, conn, ts, direction, _, heads in chunk  # type: ignore[misc]
                )
            ]

        batches = [marshal.dumps(packed(runs[i : i + 64])) for i in range(0, len(runs), 64)]
    else:
        batches = [marshal.dumps(runs[i : i + 64]) for i in range(0, len(runs), 64)]
    best = float("inf")
    for _ in range(7):
        synthesizer = Synthesizer()
        synthesizer.batch([(OPEN, conn, 1, "127.0.0.1:1", "b:9092") for conn in range(1, 5)])
        start = time.thread_time_ns()
        for data in batches:
            synthesizer.batch(marshal.loads(data))
        best = min(best, (time.thread_time_ns() - start) / pairs / 1000)
        assert synthesizer.error is None, synthesizer.error
    return best


class _Transport:
    def write(self, data: bytes) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


async def relay_us(scope: str, frames: int, reads: int) -> float:
    from proxy.capture.header import RecordScope
    from proxy.capture.writer import CaptureWriter
    from proxy.server import ProxyConfig, ProxyServer, _ClientSide

    recorder = None
    if scope != "proxy":
        recorder = CaptureWriter(
            tempfile.mkdtemp() + "/c.pcapng", upstream="b:1", record_scope=RecordScope(scope)
        )
        recorder.wait_ready()
    side = _ClientSide(ProxyServer(ProxyConfig(upstream=("127.0.0.1", 9)), recorder), ("127.0.0.1", 9))
    side.client = side.upstream = _Transport()  # type: ignore[assignment]
    requests = [b"".join(_produce(i * frames + j) for j in range(frames)) for i in range(64)]
    responses = [b"".join(_response(i * frames + j) for j in range(frames)) for i in range(64)]
    best = float("inf")
    for _ in range(7):
        start = time.process_time_ns()
        for _ in range(reads // 64):
            for i in range(64):
                side.data_received(requests[i])
                side.upstream_data(responses[i])
            await asyncio.sleep(0)
        best = min(best, (time.process_time_ns() - start) / reads / frames / 1000)
        await asyncio.sleep(0.003)
    if recorder is not None:
        recorder.close()
    return best


def measure_here() -> dict[str, float]:
    from proxy.capture import snapped

    builders: list[str | None] = [None]
    if getattr(snapped, "_build", None) is not None:  # the C builder is built: both, same process
        builders = ["python", "native"]
    results = {}
    for whole in (False, True):
        for n in (1, 64):
            for builder in builders:
                name = f"writer{'' if builder is None else ' ' + builder}, {n} frame(s) per run"
                results[name + (", whole" if whole else "")] = writer_us(
                    n, 10_000 if n == 1 else 100_000, whole, builder
                )
    if builders[0] is not None:
        snapped.run_blocks = snapped.native_run_blocks  # type: ignore[attr-defined]
    if os.environ.get("CAPTURE_MICRO_WRITER_ONLY"):
        return results
    for frames in (1, 64):
        for scope in ("proxy", "group"):
            reads = 64 * (300 if frames == 1 else 20)
            results[f"relay {scope}, {frames} frame(s) per read"] = asyncio.run(
                relay_us(scope, frames, reads)
            )
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, help="a checkout (git archive) measured alternately")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--writer-only", action="store_true", help="only the writer measures")
    parser.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # one tree, JSON out
    args = parser.parse_args()
    if args.here:
        print(json.dumps(measure_here()))
        return 0
    trees = {"this tree": ROOT, **({"baseline": args.baseline.resolve()} if args.baseline else {})}
    rows: dict[str, dict[str, list[float]]] = {}
    only = {"CAPTURE_MICRO_WRITER_ONLY": "1"} if args.writer_only else {}
    for round_ in range(args.rounds):
        for name, tree in trees.items() if round_ % 2 == 0 else reversed(trees.items()):
            out = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--here"], cwd=tree, check=True,
                capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(tree), **only},
            ).stdout  # fmt: skip
            for measure, value in json.loads(out).items():
                rows.setdefault(measure, {}).setdefault(name, []).append(value)
            print(f"  round {round_} {name} (load {os.getloadavg()[0]:.1f})", file=sys.stderr)
    print("| us per request/response pair (median of rounds) | " + " | ".join(trees) + " |")
    print("|---|" + "---:|" * len(trees))
    for measure, values in rows.items():
        print(
            f"| {measure} | "
            + " | ".join(
                f"{statistics.median(values[name]):.2f}" if name in values else "-" for name in trees
            )
            + " |"
        )
    print(f"\ncpus {os.cpu_count()}, load average at the end {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
