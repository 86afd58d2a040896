"""Group soak through the recording proxy (issue 18's last figure): a large consumer group and a
small canary group consume through `group-replay proxy --record` from one real Kafka 3.9 broker
for N minutes while mutated group-API frames arrive on other connections. Not a test: it prints
a table from one run.

What runs:
  broker   Kafka 3.9.2 from the harness (harness.broker.start_broker).
  proxy    `group-replay proxy --record FILE` (record scope group) as its own process, so its
           RSS (/proc/PID/status VmRSS) is the proxy's alone.
  group    --members confluent-kafka consumers (threads of this process) in one group on a topic
           with --partitions partitions; a producer keeps --rate messages per second flowing.
  canary   --canary consumers in their own group on the same topic; every on_assign/on_revoke
           after the initial assignment is a rebalance the proxy (or the machine) caused.
  fuzz     --fuzz-threads connections through the proxy send mutated group-API requests
           (every version of every group API, tests/test_wire_bounds.py's frames, the mutations
           of bench/soak_proxy.py) at --fuzz-rate frames per second in all; a connection the
           proxy or broker closes is opened again.

The soak starts once both groups have settled (at least --warmup seconds, every member
assigned, no callback for 20 s); the fuzz starts with it. The proxy's RSS is sampled every 10 s;
"start" is the sample after --fuzz-warmup seconds of fuzz, "end" the last one. Rebalances of the
big group count on_assign callbacks per member during the soak (the most any member saw); the
canary's are every on_assign/on_revoke during the soak (the callbacks of the final close are
after it).

    python bench/soak_group.py [--minutes 30] [--members 50] [--canary 3] [--fuzz-rate 300]
        [--warmup 60] [--partitions 100] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from proxy.wire import FrameDecoder, frame  # noqa: E402


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@dataclass
class Member:
    """One consumer's rebalance callbacks: (monotonic time, "assign"/"revoke", partitions)."""

    name: str
    events: list[tuple[float, str, int]] = field(default_factory=list)
    consumed: int = 0
    errors: list[str] = field(default_factory=list)

    def between(self, since: float, until: float, kind: str) -> int:
        return sum(1 for at, what, _ in self.events if since <= at < until and what == kind)


def _consume(bootstrap: str, group: str, topic: str, member: Member, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": member.name,
            "auto.offset.reset": "latest",
            "enable.auto.commit": True,
            "session.timeout.ms": 45000,
            "heartbeat.interval.ms": 3000,
            "socket.keepalive.enable": True,
        }
    )

    def on_assign(c, partitions) -> None:  # type: ignore[no-untyped-def]
        member.events.append((time.monotonic(), "assign", len(partitions)))

    def on_revoke(c, partitions) -> None:  # type: ignore[no-untyped-def]
        member.events.append((time.monotonic(), "revoke", len(partitions)))

    consumer.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    try:
        while not stop.is_set():
            message = consumer.poll(1.0)
            if message is None:
                continue
            if message.error() is not None:
                if message.error().code() != KafkaError._PARTITION_EOF:
                    member.errors.append(str(message.error()))
                continue
            member.consumed += 1
    finally:
        consumer.close()


def _produce(bootstrap: str, topic: str, rate: float, stop: threading.Event, sent: list[int]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    next_at = time.monotonic()
    while not stop.is_set():
        producer.produce(topic, value=b"x" * 100, key=str(sent[0]).encode())
        sent[0] += 1
        producer.poll(0)
        next_at = _pace(next_at, 1.0 / rate)
    producer.flush(10)


FuzzCounts = Counter[str]
"""One fuzz thread's counts: "sent", each outcome of `answer_of` and "connect_failures"."""
OUTCOMES = ("answered", "closed", "silent")


def _mutate(rng: random.Random, original: bytes) -> bytes:
    """bench/soak_proxy.py's mutations: trailing bytes, a byte set to 0xFF, a negative length,
    or 1-3 overwritten runs (length claims of 2^32-1, varint overflows, random bytes)."""
    data = bytearray(original)
    match rng.randrange(4):
        case 0:
            data += rng.randbytes(rng.randint(1, 8))
        case 1:
            data[rng.randrange(10, len(data))] = 0xFF
        case 2:
            at = rng.randrange(10, len(data))
            data[at : at + 2] = b"\xff\xfe"
        case _:
            for _ in range(rng.randint(1, 3)):
                at = rng.randrange(8, len(data))
                data[at : at + 4] = rng.choice(
                    [b"\xff\xff\xff\xff", b"\x80\x80\x80\x80\x10", rng.randbytes(2)]
                )
    return bytes(data)


def answer_of(sock: socket.socket, decoder: FrameDecoder, wire: bytes) -> str:
    """Send one frame and read until a whole response frame: "answered", "closed" (by the proxy
    or the broker) or "silent" (the socket's timeout passed). bench/soak_proxy.py uses it too."""
    try:
        sock.sendall(wire)
        while True:
            data = sock.recv(65536)
            if not data:
                return "closed"
            if decoder.feed(data):
                return "answered"
    except TimeoutError:
        return "silent"  # e.g. an old JoinGroup parked by the broker: start afresh
    except OSError:
        return "closed"


def _exchange(sock: socket.socket, decoder: FrameDecoder, wire: bytes, counts: FuzzCounts) -> str:
    """Send one mutated frame, counted: its outcome as `answer_of` says."""
    counts["sent"] += 1
    return answer_of(sock, decoder, wire)


def _pace(next_at: float, interval: float) -> float:
    next_at += interval
    delay = next_at - time.monotonic()
    if delay > 0:
        time.sleep(delay)
    elif delay < -5:  # far behind (loaded machine): do not burst to catch up
        next_at = time.monotonic()
    return next_at


def _fuzz(
    address: tuple[str, int], rate: float, seed: int, stop: threading.Event, counts: FuzzCounts
) -> None:
    from tests.test_wire_bounds import _group_frames

    requests = [f[2] for f in _group_frames() if f[3]]
    rng = random.Random(seed)
    sock: socket.socket | None = None
    decoder = FrameDecoder()
    next_at = time.monotonic()
    while not stop.is_set():
        if sock is None:
            try:
                sock = socket.create_connection(address, timeout=5)
            except OSError:
                counts["connect_failures"] += 1
                time.sleep(1)
                continue
            sock.settimeout(1.0)
            decoder = FrameDecoder()
        outcome = _exchange(sock, decoder, frame(_mutate(rng, rng.choice(requests))), counts)
        counts[outcome] += 1
        if outcome != "answered":
            sock.close()
            sock = None
        next_at = _pace(next_at, 1.0 / rate)
    if sock is not None:
        sock.close()


def _start_proxy(upstream: str, capture: Path, log: Path) -> tuple[subprocess.Popen[str], str]:
    command = [
        sys.executable,
        str(ROOT / "group_replay.py"),
        "proxy",
        "--upstream",
        upstream,
        "--listen",
        "127.0.0.1:0",
        "--record",
        str(capture),
        "--record-scope",
        "group",
        "--log-level",
        "WARNING",
    ]
    stderr = log.open("w")
    proxy = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT)
    assert proxy.stdout is not None
    line = proxy.stdout.readline()
    found = re.search(r"listening on (\S+) ->", line)
    if found is None:
        proxy.kill()
        raise SystemExit(f"proxy did not start: {line!r} {log.read_text()[-1000:]}")
    return proxy, found.group(1)


def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])
    for future in futures.values():
        future.result(60)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="soak after the warm-up")
    parser.add_argument("--members", type=int, default=50)
    parser.add_argument("--canary", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=100)
    parser.add_argument("--rate", type=float, default=200.0, help="messages produced per second")
    parser.add_argument(
        "--fuzz-rate", type=float, default=300.0, help="mutated frames per second, all threads"
    )
    parser.add_argument("--fuzz-threads", type=int, default=4)
    parser.add_argument(
        "--warmup", type=float, default=60.0, help="seconds (at least) before the groups count as settled"
    )
    parser.add_argument(
        "--fuzz-warmup", type=float, default=60.0, help="seconds of fuzz before the RSS start sample"
    )
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--keep", type=Path, help="copy the capture and the proxy/broker logs here")
    return parser


@dataclass
class Soak:
    """One run's state and figures."""

    args: argparse.Namespace
    members: list[Member]
    canaries: list[Member]
    fuzz: list[FuzzCounts]
    stop: threading.Event = field(default_factory=threading.Event)
    threads: list[threading.Thread] = field(default_factory=list)
    sent: list[int] = field(default_factory=lambda: [0])
    started: float = field(default_factory=time.monotonic)
    warm: float = 0.0  # the groups settled: the soak (and the fuzz) starts
    stopped: float = 0.0
    before_fuzz: float = float("nan")
    samples: list[tuple[float, float]] = field(default_factory=list)  # (seconds since warm, RSS MB)
    fuzz_sent: int = 0

    def settle(self) -> None:
        """At least --warmup seconds, and every member assigned with no callback for 20 s."""
        everyone = self.members + self.canaries
        while True:
            time.sleep(2)
            now = time.monotonic()
            last = max((m.events[-1][0] for m in everyone if m.events), default=now)
            assigned = all(m.events and m.events[-1][1] == "assign" for m in everyone)
            if now - self.started >= self.args.warmup and assigned and now - last >= 20:
                break
            if now - self.started > self.args.warmup + 600:
                print("warning: the groups did not settle within 10 minutes of warm-up", flush=True)
                break
        self.warm = time.monotonic()
        print(f"groups settled after {self.warm - self.started:.0f} s; soaking", flush=True)

    def start_fuzz(self, address: tuple[str, int]) -> None:
        args = self.args
        for number, counts in enumerate(self.fuzz):
            rate = args.fuzz_rate / args.fuzz_threads
            thread = threading.Thread(
                target=_fuzz, args=(address, rate, args.seed + number, self.stop, counts)
            )
            thread.start()
            self.threads.append(thread)

    def sample(self, proxy: subprocess.Popen[str]) -> None:
        self.before_fuzz = _rss_mb(proxy.pid)
        time.sleep(self.args.fuzz_warmup)  # the proxy's caches and buffers fill under the fuzz first
        self.samples.append((time.monotonic() - self.warm, _rss_mb(proxy.pid)))
        end = self.warm + self.args.minutes * 60
        while time.monotonic() < end and proxy.poll() is None:
            time.sleep(min(10, max(0.0, end - time.monotonic())))
            with contextlib.suppress(OSError):
                self.samples.append((time.monotonic() - self.warm, _rss_mb(proxy.pid)))
            if len(self.samples) % 30 == 0:
                canary = sum(len(c.events) for c in self.canaries)
                print(
                    f"{self.samples[-1][0] / 60:.1f} min: RSS {self.samples[-1][1]:.1f} MB, "
                    f"fuzz {sum(c['sent'] for c in self.fuzz)}, canary callbacks {canary}, "
                    f"load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
        if proxy.poll() is not None:
            print(f"proxy exited with {proxy.returncode}", flush=True)
        self.stopped = time.monotonic()
        self.fuzz_sent = sum(c["sent"] for c in self.fuzz)
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


def _stop_proxy(proxy: subprocess.Popen[str] | None) -> str:
    """SIGINT (the proxy prints its summary line), SIGKILL after 60 s."""
    if proxy is None:
        return ""
    if proxy.poll() is not None:
        return proxy.stdout.read() if proxy.stdout else ""
    proxy.send_signal(signal.SIGINT)
    try:
        return proxy.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proxy.kill()
        return ""


def _rows(run: Soak, summary: str, proxy_log: Path, capture: Path) -> list[tuple[str, str]]:
    args, warm, stopped = run.args, run.warm, run.stopped
    soak_seconds = stopped - warm
    rss = [mb for _, mb in run.samples] or [float("nan")]
    initial = [sum(1 for e in m.events if e[0] < warm and e[1] == "assign") for m in run.canaries]
    canary = sum(
        m.between(warm, stopped, "assign") + m.between(warm, stopped, "revoke") for m in run.canaries
    )
    group = max(m.between(warm, stopped, "assign") for m in run.members)
    revokes = sum(m.between(warm, stopped, "revoke") for m in run.members)
    closed_on_error = re.search(r"(\d+) connections closed on bad input", summary)
    lines = proxy_log.read_text(errors="replace").splitlines() if proxy_log.exists() else []
    errors = sum(1 for line in lines if " ERROR " in line or line.startswith("Traceback"))
    warnings = sum(1 for line in lines if " WARNING " in line)
    everyone = run.members + run.canaries
    fuzz = run.fuzz
    size = capture.stat().st_size if capture.exists() else 0
    return [
        (
            "soak after the groups settled",
            f"{soak_seconds / 60:.1f} min (settling took {warm - run.started:.0f} s)",
        ),
        ("members / canary / partitions", f"{args.members} / {args.canary} / {args.partitions}"),
        ("messages produced / consumed", f"{run.sent[0]} / {sum(m.consumed for m in everyone)}"),
        ("canary rebalance callbacks during the soak", f"{canary} (initial assigns per member {initial})"),
        (
            "group rebalances during the soak (most on_assign of a member)",
            f"{group} ({revokes} revokes in all)",
        ),
        (
            "proxy RSS MB start / end / max",
            f"{rss[0]:.1f} / {rss[-1]:.1f} / {max(rss):.1f} (end/start {rss[-1] / rss[0]:.3f}, "
            f"{len(rss)} samples; {run.before_fuzz:.1f} before the fuzz)",
        ),
        ("fuzz frames sent (rate)", f"{run.fuzz_sent} ({run.fuzz_sent / soak_seconds:.0f}/s)"),
        (
            "fuzz outcomes answered / closed / silent",
            " / ".join(str(sum(c[k] for c in fuzz)) for k in OUTCOMES),
        ),
        ("proxy: connections closed on bad input", closed_on_error.group(1) if closed_on_error else "?"),
        ("proxy log ERROR lines / WARNING lines", f"{errors} / {warnings}"),
        ("consumer errors reported", str(sum(len(m.errors) for m in everyone))),
        ("capture size", f"{size / 1e6:.1f} MB"),
    ]


def main() -> int:
    args = _parser().parse_args()
    if min(args.members, args.canary, args.partitions, args.fuzz_threads) < 1 or args.minutes <= 0:
        _parser().error("counts and --minutes must be positive")

    from harness.broker import BrokerSpec, start_broker
    from harness.lines import KAFKA_39

    scratch = Path(tempfile.mkdtemp(prefix="soak-group-"))
    capture, proxy_log = scratch / "soak.pcapng", scratch / "proxy.log"
    broker = start_broker(BrokerSpec(KAFKA_39), progress=None)
    proxy = None
    run = Soak(
        args,
        [Member(f"m{i}") for i in range(args.members)],
        [Member(f"c{i}") for i in range(args.canary)],
        [Counter() for _ in range(args.fuzz_threads)],
    )
    try:
        _create_topic(broker.bootstrap, "soak", args.partitions)
        proxy, bootstrap = _start_proxy(broker.bootstrap, capture, proxy_log)
        host, port = bootstrap.rsplit(":", 1)
        produce = threading.Thread(target=_produce, args=(bootstrap, "soak", args.rate, run.stop, run.sent))
        run.threads.append(produce)
        for group_id, members in (
            (f"canary-{uuid.uuid4().hex[:6]}", run.canaries),
            (f"soak-{uuid.uuid4().hex[:6]}", run.members),
        ):
            for member in members:
                run.threads.append(
                    threading.Thread(target=_consume, args=(bootstrap, group_id, "soak", member, run.stop))
                )
        for thread in run.threads:
            thread.start()
            time.sleep(0.05)
        run.settle()
        run.start_fuzz((host, int(port)))
        run.sample(proxy)
    finally:
        run.stop.set()
        summary = _stop_proxy(proxy)
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
            for path in (capture, proxy_log):
                if path.exists():
                    shutil.copy(path, args.keep / path.name)
            ignore = shutil.ignore_patterns("data")
            shutil.copytree(broker.plan.work_dir, args.keep / "broker", dirs_exist_ok=True, ignore=ignore)
        broker.stop()

    rows = _rows(run, summary, proxy_log, capture)
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label:<{width}}  {value}")
    print(f"proxy summary: {summary.strip()}")
    print(f"cpus: {os.cpu_count()}, load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    wall = time.time() - time.monotonic()
    for member in run.canaries:  # UTC times, to find them in the broker log and the capture
        stamps = [
            (time.strftime("%H:%M:%S", time.gmtime(wall + at)), what, n) for at, what, n in member.events
        ]
        print(f"canary {member.name}: {stamps}")
    shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
