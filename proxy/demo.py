"""`group-replay demo`: the harness's demo group, recorded through the proxy, then the capture.

Starts a real broker (Maven jars), puts the recording proxy in front of it, runs the harness's
mixed static/dynamic group (one static member bounced) against the proxy's address, and shows
what each member saw and then what the capture holds, RPC by RPC.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console

    from harness.admin import create_topic
    from harness.broker import BrokerError, start_broker
    from harness.clients import ClientError
    from harness.demo import DEFAULT_PARTITIONS, render_table, run_group
    from harness.lines import DEFAULT_KAFKA_VERSION
    from harness.maven import MavenError
    from harness.progress import download_progress
    from proxy.capture.cli import show
    from proxy.capture.writer import CaptureWriter
    from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
    from proxy.upstream import describe_upstream_sync

    parser = argparse.ArgumentParser(prog="group-replay demo", description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default=None, help="use this broker instead of starting one")
    parser.add_argument("--version", dest="kafka_version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--new-coordinator", action=argparse.BooleanOptionalAction, default=None)
    parser.add_argument("--partitions", type=int, default=DEFAULT_PARTITIONS)
    parser.add_argument("--record", default="demo-capture.pcapng", help="capture file (default %(default)s)")
    parser.add_argument("--no-bounce", action="store_true")
    parser.add_argument("--all-apis", action="store_true", help="show every RPC, not only the group APIs")
    parser.add_argument("--progress", choices=["on", "off"], default="on")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:
        return int(exc.code or 0) and 2
    console = Console(stderr=True)
    topic = f"demo-{int(time.time())}"
    broker = None
    proxy = None
    try:
        with download_progress(args.progress == "on", "fetching jars") as progress:
            if args.bootstrap is None:
                console.print(f"starting Kafka {args.kafka_version} ...")
                broker = start_broker(args.kafka_version, args.new_coordinator, progress=progress)
            upstream = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
            create_topic(upstream, topic, args.partitions)
            settings = describe_upstream_sync(*parse_hostport(upstream))  # AGREED #2: in the header
            recorder = CaptureWriter(args.record, upstream=upstream, group_settings=settings)
            proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(upstream)), recorder)
            console.print(f"proxy {proxy.bootstrap} -> broker {upstream}, recording to {args.record}")
            run = run_group(
                proxy.bootstrap,
                topic,
                args.partitions,
                bounce=None if args.no_bounce else "static-confluent",
                progress=progress,
                on_phase=lambda msg: console.print(f"[dim]{msg}"),
            )
    except ValueError as exc:
        print(f"group-replay demo: {exc}", file=sys.stderr)
        return 2
    except (BrokerError, MavenError, ClientError, RuntimeError, OSError) as exc:
        print(f"group-replay demo: {exc}", file=sys.stderr)
        return 1
    finally:
        if proxy is not None:
            proxy.stop()  # also closes the capture, so it is complete before it is shown
        if broker is not None:
            broker.stop()
    out = Console()
    if not out.is_terminal:
        out = Console(width=160)
    out.print(render_table(run))
    status = show(str(Path(args.record)), group_only=not args.all_apis, console=out)
    out.print(
        f"\nThe capture opens in Wireshark (`wireshark {args.record}`); "
        f"`group-replay capture export {args.record}` prints it as JSON lines."
    )
    return status
