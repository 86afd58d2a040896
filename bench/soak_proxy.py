"""Proxy reliability figures (issue 18): isolation from a slow reader, memory under the buffer
budget, and fuzz counts. Not a test: it prints a table from one run; the quick versions of each
part run in the suite (tests/test_proxy_server.py, tests/test_wire_bounds.py,
tests/test_capture_fuzz.py).

Parts:
  slow-reader  a canary makes ApiVersions/Heartbeat round trips through the proxy alone
               (baseline), then while another connection pipelines N requests and never reads
               its answers: p50/p99/max of each, same run. Against a real Kafka 3.9 broker
               (`--kafka`) or a fake echo upstream.
  memory       K connections each start a frame of M bytes and stop halfway, the proxy recording
               (so it keeps whole frames): its RSS before, at the peak and after they close,
               with `--max-buffered-bytes` as given.
  fuzz         F mutated group frames decoded (none may abort the process) and C mutated
               captures read (none may raise).

    python bench/soak_proxy.py [--kafka] [--requests 20000] [--seconds 30]
        [--partial 8x100M] [--budget 256M] [--fuzz-frames 100000] [--fuzz-captures 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.soak_group import answer_of  # noqa: E402
from proxy.server import BackgroundProxy, ProxyConfig  # noqa: E402
from proxy.wire import FrameDecoder, frame  # noqa: E402
from tests.test_proxy_broker import _api_versions  # noqa: E402
from tests.test_proxy_session import _heartbeat  # noqa: E402

_ECHO = """
import asyncio, sys
sys.path.insert(0, %r)
from tests.test_proxy_server import _echo
async def main():
    server = await asyncio.start_server(_echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _round_trips(address: tuple[str, int], request: bytes, seconds: float) -> list[float]:
    sock = socket.create_connection(address, timeout=60)
    decoder = FrameDecoder()
    times: list[float] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        started = time.perf_counter()
        sock.sendall(request)
        got: list[bytes] = []
        while not got:
            got = decoder.feed(sock.recv(65536))
        times.append((time.perf_counter() - started) * 1000)
    sock.close()
    return times


def _stats(times: list[float]) -> str:
    p99 = statistics.quantiles(times, n=100)[98]
    median = statistics.median(times)
    return f"p50 {median:.2f} ms, p99 {p99:.2f} ms, max {max(times):.1f} ms ({len(times)} trips)"


def slow_reader(args: argparse.Namespace) -> list[tuple[str, str]]:
    broker = None
    echo = None
    if args.kafka:
        from harness.broker import BrokerSpec, start_broker
        from harness.lines import KAFKA_39

        broker = start_broker(BrokerSpec(KAFKA_39, new_coordinator=False), progress=None)
        upstream = broker.bootstrap.rsplit(":", 1)
        port = int(upstream[1])
        make = _api_versions
    else:
        echo = subprocess.Popen([sys.executable, "-c", _ECHO % str(ROOT)], stdout=subprocess.PIPE, text=True)
        assert echo.stdout is not None
        port = int(echo.stdout.readline())
        make = _heartbeat
    proxy = BackgroundProxy(ProxyConfig(upstream=("127.0.0.1", port)))
    host, proxy_port = proxy.bootstrap.rsplit(":", 1)
    address = (host, int(proxy_port))
    try:
        baseline = _round_trips(address, make(1), args.seconds / 2)
        stop = threading.Event()

        def flood() -> None:
            sock = socket.create_connection(address)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            with contextlib.suppress(OSError):
                sock.sendall(b"".join(make(i) for i in range(args.requests)))
            stop.wait()
            sock.close()

        thread = threading.Thread(target=flood, daemon=True)
        thread.start()
        time.sleep(0.2)
        loaded = _round_trips(address, make(2), args.seconds / 2)
        stop.set()
        thread.join()
    finally:
        proxy.stop()
        if broker is not None:
            broker.stop()
        if echo is not None:
            echo.kill()
    upstream_name = "Kafka 3.9" if args.kafka else "fake echo"
    ratio = statistics.quantiles(loaded, n=100)[98] / statistics.quantiles(baseline, n=100)[98]
    return [
        (f"canary alone ({upstream_name})", _stats(baseline)),
        (f"canary with a slow reader pipelining {args.requests}", _stats(loaded)),
        ("canary p99 / its baseline p99", f"{ratio:.2f}x"),
    ]


def memory(args: argparse.Namespace) -> list[tuple[str, str]]:
    count_text, size_text = args.partial.split("x")
    count, size = int(count_text), _size(size_text)
    budget = _size(args.budget)
    script = f"""
import sys, time, asyncio
sys.path.insert(0, {str(ROOT)!r})
from proxy.server import ProxyConfig, ProxyServer
from proxy.capture.writer import CaptureWriter
async def main():
    recorder = CaptureWriter({str(Path(tempfile.gettempdir()) / "soak.pcapng")!r}, upstream="x")
    config = ProxyConfig(upstream=("127.0.0.1", int(sys.argv[1])), max_buffered_bytes={budget})
    server = ProxyServer(config, recorder)
    host, port = await server.start()
    print(port, flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""
    echo = subprocess.Popen([sys.executable, "-c", _ECHO % str(ROOT)], stdout=subprocess.PIPE, text=True)
    assert echo.stdout is not None
    upstream_port = int(echo.stdout.readline())
    proxy = subprocess.Popen(
        [sys.executable, "-c", script, str(upstream_port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert proxy.stdout is not None
    port = int(proxy.stdout.readline())
    try:
        time.sleep(0.5)
        before = _rss_mb(proxy.pid)
        head = (11).to_bytes(2, "big") + (5).to_bytes(2, "big") + (1).to_bytes(4, "big") + b"\xff\xff"
        chunk = b"\x00" * (1 << 20)
        socks = []
        closed = 0
        peak = before
        for _ in range(count):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(size.to_bytes(4, "big") + head)
            try:
                for _ in range(size // 2 // len(chunk)):
                    sock.sendall(chunk)
            except OSError:
                closed += 1
            socks.append(sock)
            peak = max(peak, _rss_mb(proxy.pid))
        time.sleep(1.0)
        peak = max(peak, _rss_mb(proxy.pid))
        for sock in socks:
            sock.close()
        time.sleep(2.0)
        after = _rss_mb(proxy.pid)
    finally:
        proxy.kill()
        echo.kill()
    return [
        (
            f"proxy RSS, {count} x {size_text} frames stopped halfway, budget {args.budget}",
            f"{before:.0f} MB before, {peak:.0f} MB peak, {after:.0f} MB after they closed "
            f"({closed} connections refused by the budget while sending)",
        )
    ]


def fuzz(args: argparse.Namespace) -> list[tuple[str, str]]:
    from proxy.wire import CodecError, FrameError, decode_request, decode_response
    from tests.test_wire_bounds import _group_frames

    rng = random.Random(18)
    frames = _group_frames()
    refused = 0
    started = time.monotonic()
    for number in range(args.fuzz_frames):
        api_key, api_version, original, is_request = frames[number % len(frames)]
        data = bytearray(original)
        for _ in range(rng.randint(1, 3)):
            at = rng.randrange(len(data))
            data[at : at + 4] = rng.choice([b"\xff\xff\xff\xff", b"\x80\x80\x80\x80\x10", rng.randbytes(2)])
        try:
            if is_request:
                decode_request(bytes(data))
            else:
                decode_response(bytes(data), api_key, api_version)
        except (CodecError, FrameError):
            refused += 1
    frame_seconds = time.monotonic() - started
    rows = [
        (
            "mutated group frames decoded (no abort)",
            f"{args.fuzz_frames} ({refused} refused) in {frame_seconds:.1f} s",
        )
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = (
        "import sys, random, tempfile, pathlib, time\n"
        "from tests.test_capture_fuzz import _exercise, _mutate_bytes, _mutate_comment, _mutate_packet\n"
        "from tests.test_capture import _write\n"
        "d = pathlib.Path(tempfile.mkdtemp()); base = d / 'b.pcapng'; _write(base)\n"
        "data = base.read_bytes()\n"
        "rng = random.Random(7); n = int(sys.argv[1]); out = {}; t = time.monotonic()\n"
        "for i in range(n):\n"
        "    f = [_mutate_comment, _mutate_packet, _mutate_bytes][i % 3]\n"
        "    (d / 'm.pcapng').write_bytes(f(rng, data)); o = _exercise(d / 'm.pcapng')\n"
        "    out[o] = out.get(o, 0) + 1\n"
        "print(n, out, round(time.monotonic() - t, 1))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(args.fuzz_captures)],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    result = done.stdout.strip() if done.returncode == 0 else f"FAILED: {done.stderr[-500:]}"
    rows.append(("mutated captures read (count, outcomes, seconds)", result))
    return rows


def _answer(address: tuple[str, int], wire: bytes) -> str:
    """ "answered" when a response frame comes back, else "closed" (or "silent" after 5 s)."""
    try:
        with socket.create_connection(address, timeout=5) as sock:
            return answer_of(sock, FrameDecoder(), wire)
    except TimeoutError:
        return "silent"
    except OSError:
        return "closed"


def transparency(args: argparse.Namespace) -> list[tuple[str, str]]:
    """Mutated group-API frames sent to a real broker directly and through the proxy, one
    connection each: how often the proxy closed a connection the broker answered (issue 18
    defect 6: it may close only frames it must change)."""
    from harness.broker import BrokerSpec, start_broker
    from harness.lines import KAFKA_39
    from tests.test_wire_bounds import _group_frames

    broker = start_broker(BrokerSpec(KAFKA_39, new_coordinator=False), progress=None)
    host, port = broker.bootstrap.rsplit(":", 1)
    direct = (host, int(port))
    proxy = BackgroundProxy(ProxyConfig(upstream=direct))
    proxy_host, proxy_port = proxy.bootstrap.rsplit(":", 1)
    through = (proxy_host, int(proxy_port))
    requests = [f for f in _group_frames() if f[3]]
    rng = random.Random(6)
    counts: dict[str, int] = {}
    try:
        for number in range(args.transparency):
            _, _, original, _ = requests[number % len(requests)]
            data = bytearray(original)
            match rng.randrange(3):
                case 0:
                    data += rng.randbytes(rng.randint(1, 8))  # trailing bytes
                case 1:
                    at = rng.randrange(10, len(data))
                    data[at] = 0xFF  # invalid UTF-8 (or a wrong length)
                case _:
                    at = rng.randrange(10, len(data))
                    data[at : at + 2] = b"\xff\xfe"  # a negative length
            wire = frame(bytes(data))
            outcome = (_answer(direct, wire), _answer(through, wire))
            counts[f"{outcome[0]}/{outcome[1]}"] = counts.get(f"{outcome[0]}/{outcome[1]}", 0) + 1
    finally:
        proxy.stop()
        broker.stop()
    worse = counts.get("answered/closed", 0) + counts.get("answered/silent", 0)
    return [
        (f"mutated group frames, broker direct / through the proxy ({args.transparency})", str(counts)),
        ("closed by the proxy although the broker answered", str(worse)),
    ]


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kafka", action="store_true", help="slow-reader part against a real Kafka 3.9")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument(
        "--seconds", type=float, default=10.0, help="canary time (half baseline, half loaded)"
    )
    parser.add_argument("--partial", default="8x100M", help="COUNTxSIZE partial frames for the memory part")
    parser.add_argument("--budget", default="256M", help="--max-buffered-bytes for the memory part")
    parser.add_argument("--fuzz-frames", type=int, default=100_000)
    parser.add_argument("--fuzz-captures", type=int, default=5_000)
    parser.add_argument("--transparency", type=int, default=1000, help="mutated frames for that part")
    parser.add_argument("--parts", default="slow-reader,memory,fuzz,transparency")
    args = parser.parse_args()
    rows: list[tuple[str, str]] = []
    parts = {"slow-reader": slow_reader, "memory": memory, "fuzz": fuzz, "transparency": transparency}
    for name in args.parts.split(","):
        rows += parts[name](args)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    load = os.getloadavg()[0]
    print(f"cpus: {os.cpu_count()}, load average: {load:.1f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
