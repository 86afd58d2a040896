"""What the proxy costs: the same load direct, through haproxy, through the proxy, and recording.

Not a test: it prints one rich table from one run, with ratios to direct and to haproxy measured
in the same run (the machine is shared; absolute numbers move, ratios less so).

Loads:
  (a) framed synthetic load from bench/proxy_overhead_load.c (C, so neither end is the
      bottleneck): small frames pipelined, small frames one at a time, 64 KiB frames pipelined,
      against its framed echo server. Frames look like Produce v7, so the proxy relays them on its
      opaque fast path (it still parses every frame's size and header prefix and pairs responses).
  (b) a real Kafka broker with Kafka's own ProducerPerformance and ConsumerPerformance
      (kafka-tools from Maven Central). haproxy needs a broker that advertises haproxy's port, so
      the haproxy row runs against a second broker started after the first is stopped.

Relays: haproxy in TCP mode with one thread (the proxy is one asyncio thread; `--haproxy-threads`
changes it), `group-replay proxy`, `group-replay proxy --record` (the default `--record-scope
group`: Produce/Fetch recorded as their headers only) and `--record --record-scope all` (every frame). The
capture column is the file each recording run left (for the broker loads: producer and consumer
runs together, on the producer row).

    python bench/proxy_overhead.py [--seconds 5] [--skip-broker] [--profile proxy.prof]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from harness import paths  # noqa: E402
from harness.maven import DEPENDENCY_PLUGIN, java_path, mvn_path  # noqa: E402

KAFKA_TOOLS_VERSION = "3.9.2"
TOOLS_POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.group-replay</groupId>
  <artifactId>bench-kafka-tools</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>@V@</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>1.7.36</version>
    </dependency>
  </dependencies>
</project>
"""


@dataclass(frozen=True)
class Result:
    load: str
    relay: str
    ops_per_s: float
    mb_per_s: float
    p50_ms: float | None
    p99_ms: float | None
    note: str = ""
    capture_bytes: int | None = None
    round: int = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def load_tool() -> Path:
    source = HERE / "proxy_overhead_load.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    binary = paths.cache_root() / "bench" / f"proxy_overhead_load-{digest}"
    if not binary.exists():
        binary.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cc", "-O2", "-o", str(binary), str(source)], check=True)
    return binary


def kafka_tools_libs() -> Path:
    target = paths.cache_root() / "bench" / f"kafka-tools-{KAFKA_TOOLS_VERSION}"
    libs = target / "libs"
    if (libs / ".complete").exists():
        return libs
    mvn = mvn_path()
    if mvn is None:
        raise RuntimeError("mvn not found")
    target.mkdir(parents=True, exist_ok=True)
    (target / "pom.xml").write_text(TOOLS_POM.replace("@V@", KAFKA_TOOLS_VERSION))
    subprocess.run(
        [mvn, "-B", "-q", "-f", str(target / "pom.xml"), f"{DEPENDENCY_PLUGIN}:copy-dependencies",
         "-DincludeScope=runtime", f"-DoutputDirectory={libs}"],
        check=True,
    )  # fmt: skip
    (libs / ".complete").write_text(KAFKA_TOOLS_VERSION)
    return libs


@contextmanager
def process(
    cmd: list[str], ready_port: int | None = None, **kwargs: object
) -> Iterator[subprocess.Popen[bytes]]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, **kwargs)  # type: ignore[call-overload]
    try:
        if ready_port is not None:
            wait_port(ready_port)
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@contextmanager
def relay(kind: str, upstream_port: int, args: argparse.Namespace, workdir: Path) -> Iterator[int]:
    """Yields the port clients use: upstream itself (direct), haproxy, or the proxy."""
    if kind == "direct":
        yield upstream_port
        return
    port = free_port()
    if kind == "haproxy":
        config = workdir / "haproxy.cfg"
        config.write_text(
            "global\n  maxconn 4096\n"
            f"  nbthread {args.haproxy_threads}\n"
            "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n"
            f"frontend f\n  bind 127.0.0.1:{port}\n  default_backend b\n"
            f"backend b\n  server s1 127.0.0.1:{upstream_port}\n"
        )
        with process([args.haproxy, "-f", str(config), "-db"], port):
            yield port
        return
    cmd = [sys.executable]
    if args.profile and kind == "proxy+record":
        cmd += ["-m", "cProfile", "-o", args.profile]
    cmd += ["-m", "group_replay", "proxy", "--upstream", f"127.0.0.1:{upstream_port}",
            "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR"]  # fmt: skip
    if "+record" in kind:
        cmd += ["--record", str(workdir / "capture.pcapng")]
        if kind.endswith(" all"):
            cmd += ["--record-scope", "all"]
    # "main proxy": the same command from another checkout (--baseline), measured in the same run.
    with process(cmd, port, cwd=Path(args.baseline) if kind.startswith("main ") else ROOT):
        yield port


def take_capture_size(workdir: Path) -> int | None:
    """The size of the capture the last relay left (None: it recorded nothing), then remove it."""
    path = workdir / "capture.pcapng"
    if not path.exists():
        return None
    size = path.stat().st_size
    path.unlink()
    return size


# (name, connections, window, frame bytes)
SYNTHETIC = [
    ("small frames, pipelined (4 conn x 64 in flight, 100 B)", 4, 64, 100),
    ("small frames, one at a time (4 conn x 1, 100 B)", 4, 1, 100),
    ("64 KiB frames, pipelined (2 conn x 4 in flight)", 2, 4, 65536),
]


def _alternating(rounds: int, relays: list[str]) -> Iterator[tuple[int, str, int, int, int, str]]:
    """Every load under every relay, `rounds` times; odd rounds take the relays in reverse, so a
    drift of the machine's load does not always favour the same relay."""
    for round_ in range(rounds):
        order = relays if round_ % 2 == 0 else relays[::-1]
        for name, conns, window, size in SYNTHETIC:
            for kind in order:
                yield round_, name, conns, window, size, kind


def round_ratios(results: list[Result], reference: str = "proxy") -> object:
    """Each relay's throughput over `reference`'s of the same load and round, per round and the
    median: the figure to read on a loaded machine."""
    from rich.table import Table

    rounds = sorted({r.round for r in results})
    out = Table(title=f"throughput x {reference}, same load and round (rounds alternate the relay order)")
    for column in ("load", "relay", *(f"round {n}" for n in rounds), "median"):
        out.add_column(column, justify="left" if column in ("load", "relay") else "right")
    base = {(r.load, r.relay, r.round): r.ops_per_s for r in results}
    for load in dict.fromkeys(r.load for r in results):
        for kind in dict.fromkeys(r.relay for r in results if r.load == load and r.relay != reference):
            ratios = [
                base[(load, kind, n)] / base[(load, reference, n)]
                for n in rounds
                if base.get((load, reference, n)) and (load, kind, n) in base
            ]
            if ratios:
                cells = [f"{value:.2f}" for value in ratios]
                out.add_row(load, kind, *cells, f"{statistics.median(ratios):.2f}")
    return out


def synthetic(args: argparse.Namespace, relays: list[str], workdir: Path) -> list[Result]:
    tool = load_tool()
    upstream = free_port()
    results = []
    with process([str(tool), "server", str(upstream)], upstream):
        for round_, name, conns, window, size, kind in _alternating(args.rounds, relays):
            with relay(kind, upstream, args, workdir) as port:
                out = subprocess.run(
                    [str(tool), "client", "127.0.0.1", str(port), str(conns), str(window), str(size),
                     str(args.seconds)],
                    capture_output=True, text=True, check=True,
                ).stdout  # fmt: skip
            captured = take_capture_size(workdir)
            data = json.loads(out.strip().splitlines()[-1])
            seconds = float(data["seconds"])
            results.append(
                Result(
                    name,
                    kind,
                    data["requests"] / seconds,
                    data["bytes"] / seconds / 1e6,
                    data["p50_us"] / 1000,
                    data["p99_us"] / 1000,
                    capture_bytes=captured,
                    round=round_,
                )
            )
            load = os.getloadavg()[0]
            print(f"  round {round_} {name} / {kind}: {results[-1].ops_per_s:,.0f} req/s (load {load:.1f})",
                  file=sys.stderr)  # fmt: skip
    return results


_PRODUCER = re.compile(
    r"(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th"
)


def kafka_tool(libs: Path, main: str, *tool_args: str) -> str:
    java = java_path() or "java"
    cmd = [java, "-Xmx256m", "-XX:+UseSerialGC", "-cp", f"{libs}/*", main, *tool_args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600).stdout


def broker_loads(args: argparse.Namespace, relays: list[str], workdir: Path) -> list[Result]:
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker

    libs = kafka_tools_libs()
    results: list[Result] = []
    records = args.records

    def run(kind: str, bootstrap: str) -> None:
        topic = f"bench-{kind.replace('+', '-').replace(' ', '-')}-{int(time.time() * 1000)}"
        create_topic(bootstrap, topic, 1)
        out = kafka_tool(
            libs, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(records), "--record-size", "100", "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=5",
        )  # fmt: skip
        match = _PRODUCER.findall(out)
        if not match:
            raise RuntimeError(f"ProducerPerformance output not understood:\n{out[-2000:]}")
        _, rate, mb, _, _, p50, _, p99 = match[-1]
        results.append(
            Result(
                "Kafka ProducerPerformance (100 B, acks=1)",
                kind,
                float(rate),
                float(mb),
                float(p50),
                float(p99),
            )
        )
        out = kafka_tool(
            libs, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
            "--topic", topic, "--messages", str(records), "--timeout", "60000",
        )  # fmt: skip
        row = [line for line in out.splitlines() if line and line[0].isdigit()][-1].split(",")
        results.append(
            Result("Kafka ConsumerPerformance (fetch)", kind, float(row[5]), float(row[3]), None, None,
                   note="no latency reported")
        )  # fmt: skip
        print(f"  broker / {kind}: producer {float(rate):,.0f} rec/s", file=sys.stderr)

    # Broker 1: direct and the proxy (which rewrites broker addresses itself).
    broker = start_broker(BrokerSpec(KAFKA_TOOLS_VERSION), progress=None)
    try:
        port = broker.plan.port
        for kind in [r for r in relays if r != "haproxy"]:
            with relay(kind, port, args, workdir) as relay_port:
                run(kind, f"127.0.0.1:{relay_port}")
            captured = take_capture_size(workdir)
            if captured is not None:
                producer = results[-2]
                results[-2] = Result(**{**producer.__dict__, "capture_bytes": captured})
    finally:
        broker.stop()
    # Broker 2: advertises haproxy's port, so clients stay on haproxy after bootstrapping.
    if "haproxy" in relays:
        haproxy_port = free_port()
        broker = start_broker(
            BrokerSpec(
                KAFKA_TOOLS_VERSION,
                extra_config={"advertised.listeners": f"PLAINTEXT://127.0.0.1:{haproxy_port}"},
            ),
            progress=None,
        )
        try:
            config = workdir / "haproxy-broker.cfg"
            config.write_text(
                f"global\n  maxconn 4096\n  nbthread {args.haproxy_threads}\n"
                "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n"
                f"frontend f\n  bind 127.0.0.1:{haproxy_port}\n  default_backend b\n"
                f"backend b\n  server s1 127.0.0.1:{broker.plan.port}\n"
            )
            with process([args.haproxy, "-f", str(config), "-db"], haproxy_port):
                run("haproxy", f"127.0.0.1:{haproxy_port}")
        finally:
            broker.stop()
    return results


def tls_loads(args: argparse.Namespace, workdir: Path) -> list[Result]:
    """The real-broker loads over TLS (`--tls`): Kafka's tools speak SSL to the broker's SSL
    listener directly, to haproxy in TLS mode (terminates with the relay's certificate,
    originates to the broker verifying its chain), and to the proxy (--client-tls-*,
    --upstream-tls-ca; without and with recording, group scope)."""
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, SecureListener, start_broker
    from harness.certs import make_ca

    libs = kafka_tools_libs()
    ca = make_ca(workdir / "tls")
    broker_leaf, relay_leaf = ca.issue("broker"), ca.issue("relay")
    ssl_props = ["security.protocol=SSL", "ssl.truststore.type=PEM", f"ssl.truststore.location={ca.cert}"]
    consumer_config = workdir / "tls-consumer.properties"
    consumer_config.write_text("\n".join(ssl_props) + "\n")
    results: list[Result] = []

    def run(kind: str, bootstrap: str, plaintext: str) -> None:
        topic = f"bench-tls-{kind.replace('+', '-')}-{int(time.time() * 1000)}"
        create_topic(plaintext, topic, 1)
        out = kafka_tool(
            libs, "org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
            "--num-records", str(args.records), "--record-size", "100", "--throughput", "-1",
            "--producer-props", f"bootstrap.servers={bootstrap}", "acks=1", "linger.ms=5", *ssl_props,
        )  # fmt: skip
        match = _PRODUCER.findall(out)
        if not match:
            raise RuntimeError(f"ProducerPerformance output not understood:\n{out[-2000:]}")
        _, rate, mb, _, _, p50, _, p99 = match[-1]
        load = "Kafka ProducerPerformance over TLS (100 B, acks=1)"
        results.append(Result(load, kind, float(rate), float(mb), float(p50), float(p99)))
        out = kafka_tool(
            libs, "org.apache.kafka.tools.ConsumerPerformance", "--bootstrap-server", bootstrap,
            "--topic", topic, "--messages", str(args.records), "--timeout", "60000",
            "--consumer.config", str(consumer_config),
        )  # fmt: skip
        row = [line for line in out.splitlines() if line and line[0].isdigit()][-1].split(",")
        results.append(
            Result(
                "Kafka ConsumerPerformance over TLS (fetch)", kind, float(row[5]), float(row[3]), None, None
            )
        )
        print(f"  broker TLS / {kind}: producer {float(rate):,.0f} rec/s", file=sys.stderr)

    listener = SecureListener("SSL", keystore_pem=str(broker_leaf.bundle), truststore_pem=str(ca.cert))
    broker = start_broker(BrokerSpec(KAFKA_TOOLS_VERSION, secure_listeners=(listener,)), progress=None)
    try:
        ssl_address = broker.listener_bootstrap("SSL")
        run("direct", ssl_address, broker.bootstrap)
        for kind in ("proxy", "proxy+record"):
            port = free_port()
            cmd = [sys.executable, "-m", "group_replay", "proxy", "--upstream", ssl_address,
                   "--listen", f"127.0.0.1:{port}", "--log-level", "ERROR",
                   "--client-tls-cert", str(relay_leaf.cert), "--client-tls-key", str(relay_leaf.key),
                   "--upstream-tls-ca", str(ca.cert)]  # fmt: skip
            if kind == "proxy+record":
                cmd += ["--record", str(workdir / "capture.pcapng")]
            with process(cmd, port, cwd=ROOT):
                run(kind, f"127.0.0.1:{port}", broker.bootstrap)
            captured = take_capture_size(workdir)
            if captured is not None:
                results[-2] = Result(**{**results[-2].__dict__, "capture_bytes": captured})
    finally:
        broker.stop()
    if args.haproxy is not None:
        haproxy_port = free_port()
        advertised = SecureListener(
            "SSL",
            keystore_pem=str(broker_leaf.bundle),
            truststore_pem=str(ca.cert),
            advertised_port=haproxy_port,
        )
        broker = start_broker(BrokerSpec(KAFKA_TOOLS_VERSION, secure_listeners=(advertised,)), progress=None)
        try:
            ssl_port = broker.listener_bootstrap("SSL").rsplit(":", 1)[1]
            config = workdir / "haproxy-tls.cfg"
            config.write_text(
                f"global\n  maxconn 4096\n  nbthread {args.haproxy_threads}\n"
                "defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n"
                f"frontend f\n  bind 127.0.0.1:{haproxy_port} ssl crt {relay_leaf.bundle}\n"
                "  default_backend b\n"
                f"backend b\n  server s1 127.0.0.1:{ssl_port} ssl verify required ca-file {ca.cert}\n"
            )
            with process([args.haproxy, "-f", str(config), "-db"], haproxy_port):
                run("haproxy", f"127.0.0.1:{haproxy_port}", broker.bootstrap)
        finally:
            broker.stop()
    return results


def table(results: list[Result]) -> object:
    from rich.table import Table

    out = Table(title="proxy overhead (one run; ratios against the same load in the same run)")
    columns = ("load", "relay", "ops/s", "MB/s", "p50 ms", "p99 ms", "x direct", "x haproxy", "capture MB")
    for column in columns:
        out.add_column(column, justify="left" if column in ("load", "relay") else "right")
    base = {(r.load, r.relay): r for r in results}
    previous = None
    for r in results:
        first = r.load != previous
        if previous is not None and first:
            out.add_section()
        previous = r.load
        direct = base.get((r.load, "direct"))
        haproxy = base.get((r.load, "haproxy"))

        def ratio(reference: Result | None, r: Result = r) -> str:
            if reference is None or not reference.ops_per_s:
                return "-"
            text = f"{r.ops_per_s / reference.ops_per_s:.2f}"
            if r.p50_ms is not None and reference.p50_ms:
                text += f" (p50 {r.p50_ms / reference.p50_ms:.1f})"
            return text

        out.add_row(
            r.load if first else "",
            r.relay,
            f"{r.ops_per_s:,.0f}",
            f"{r.mb_per_s:,.1f}",
            "-" if r.p50_ms is None else f"{r.p50_ms:.2f}",
            "-" if r.p99_ms is None else f"{r.p99_ms:.2f}",
            ratio(direct),
            ratio(haproxy),
            "-" if r.capture_bytes is None else f"{r.capture_bytes / 1e6:,.2f}",
        )
    return out


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured seconds per synthetic run")
    parser.add_argument("--records", type=int, default=500_000, help="records per Kafka perf run")
    parser.add_argument("--skip-broker", action="store_true", help="only the synthetic loads")
    parser.add_argument("--skip-synthetic", action="store_true")
    parser.add_argument(
        "--tls", action="store_true", help="also the real-broker loads over TLS (haproxy in TLS mode)"
    )
    parser.add_argument("--haproxy-threads", type=int, default=1)
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="also run the proxy from this checkout (e.g. `git worktree add DIR main`): before/after rows",
    )
    parser.add_argument("--profile", metavar="FILE", help="cProfile the recording proxy into FILE")
    parser.add_argument(
        "--rounds", type=int, default=1, help="synthetic loads: repeat every relay this often, alternating"
    )
    parser.add_argument(
        "--relays", help="comma-separated subset of direct,haproxy,proxy,proxy+record,proxy+record all"
    )
    args = parser.parse_args(argv)
    args.haproxy = shutil.which("haproxy")
    relays = ["direct", "haproxy", "proxy", "proxy+record", "proxy+record all"]
    if args.baseline:
        relays[2:2] = ["main proxy", "main proxy+record"]
    if args.relays:
        relays = [kind for kind in relays if kind in args.relays.split(",")]
    if args.haproxy is None and "haproxy" in relays:
        print("haproxy not installed (apt-get install haproxy): its rows are left out", file=sys.stderr)
        relays.remove("haproxy")
    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="proxy-bench-") as tmp:
        workdir = Path(tmp)
        if not args.skip_synthetic:
            results += synthetic(args, relays, workdir)
        if not args.skip_broker:
            results += broker_loads(args, relays, workdir)
        if args.tls:
            results += tls_loads(args, workdir)
    loads = list(dict.fromkeys(r.load for r in results))
    order = {name: index for index, name in enumerate(relays)}
    results.sort(key=lambda r: (loads.index(r.load), order[r.relay]))
    console = Console(width=max(Console().width, 150))
    console.print(table([r for r in results if r.round == 0]))
    if args.rounds > 1 or args.relays:
        console.print(round_ratios(results))
    console.print(f"cpus: {os.cpu_count()}, load average before the table: {os.getloadavg()[0]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
