"""`group-replay broker start|stop|status`: a real Kafka broker for manual work and other tools.

`start` runs the broker detached (it outlives this command) and writes a state file under
`<cache>/run/` with its pid, ports, bootstrap and data dir; `status` and `stop` find it there,
and so can any other process (`harness.broker.find_running`).
"""

from __future__ import annotations

import argparse
import sys
import time

from harness.broker import (
    BrokerError,
    BrokerState,
    find_running,
    start_broker,
    stop_detached,
    write_state,
)
from harness.lines import DEFAULT_KAFKA_VERSION, KAFKA_4X, KAFKA_39, line_for
from harness.maven import MavenError, missing_tools
from harness.progress import download_progress


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="group-replay broker", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    start = sub.add_parser("start", help="start a broker in the background and print its bootstrap")
    start.add_argument(
        "--version",
        dest="kafka_version",
        default=DEFAULT_KAFKA_VERSION,
        help=f"Kafka version (e.g. {KAFKA_39}, {KAFKA_4X}); default {DEFAULT_KAFKA_VERSION}",
    )
    start.add_argument(
        "--new-coordinator",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="choose the group coordinator where the line has both (3.6-4.0)",
    )
    start.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra broker setting (repeatable)",
    )
    start.add_argument("--heap-mb", type=int, default=384)
    start.add_argument("--progress", choices=["on", "off"], default="on")
    stop = sub.add_parser("stop", help="stop a broker started with `start`")
    stop.add_argument("--version", dest="kafka_version", default=None, help="which one (default: all)")
    status = sub.add_parser("status", help="list running brokers")
    status.add_argument("--version", dest="kafka_version", default=None)
    status.add_argument("--format", choices=["table", "json"], default="table")
    return parser


def _settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set wants KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def _print_table(states: list[BrokerState]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Kafka brokers started by group-replay")
    for column in ("version", "bootstrap", "pid", "coordinator", "up", "data dir"):
        table.add_column(column)
    now_ms = int(time.time() * 1000)
    for state in states:
        table.add_row(
            state.kafka_version,
            state.bootstrap,
            str(state.pid),
            "new" if state.new_coordinator else "classic",
            f"{(now_ms - state.started_at_ms) // 1000} s",
            state.data_dir,
        )
    Console().print(table)


def broker_main(argv: list[str]) -> int:
    try:
        args = _parser().parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    match args.action:
        case "start":
            return _start(args)
        case "stop":
            states = find_running(args.kafka_version)
            if not states:
                which = f"Kafka {args.kafka_version}" if args.kafka_version else "any Kafka"
                print(f"no running broker for {which}", file=sys.stderr)
                return 0
            for state in states:
                stop_detached(state)
                print(f"stopped Kafka {state.kafka_version} (pid {state.pid}, {state.bootstrap})")
            return 0
        case "status":
            states = find_running(args.kafka_version)
            if args.format == "json":
                import json
                from dataclasses import asdict

                print(json.dumps([asdict(s) for s in states], indent=2))
            elif states:
                _print_table(states)
            else:
                print("no running brokers")
            return 0
    return 2


def _start(args: argparse.Namespace) -> int:
    reason = missing_tools()
    if reason:
        print(f"group-replay broker: cannot start Kafka: {reason}", file=sys.stderr)
        return 2
    try:
        line_for(args.kafka_version)
        settings = _settings(args.settings)
    except ValueError as exc:
        print(f"group-replay broker: {exc}", file=sys.stderr)
        return 2
    running = find_running(args.kafka_version)
    if running:
        print(f"Kafka {args.kafka_version} already running at {running[0].bootstrap} (pid {running[0].pid})")
        return 0
    try:
        with download_progress(
            args.progress == "on", f"fetching Kafka {args.kafka_version} jars"
        ) as progress:
            broker = start_broker(
                args.kafka_version,
                args.new_coordinator,
                settings,
                heap_mb=args.heap_mb,
                detach=True,
                progress=progress,
            )
    except ValueError as exc:
        print(f"group-replay broker: {exc}", file=sys.stderr)
        return 2
    except (BrokerError, MavenError) as exc:
        print(f"group-replay broker: {exc}", file=sys.stderr)
        return 1
    path = write_state(broker.state())
    print(broker.bootstrap)
    print(
        f"Kafka {broker.kafka_version} pid {broker.pid}; state {path}; log {broker.log_path}", file=sys.stderr
    )
    return 0
