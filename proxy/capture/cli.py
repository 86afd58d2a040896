"""`group-replay capture show|export FILE`: look at a capture without Wireshark."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from group_replay import parse_args
from proxy.capture.reader import Capture, CaptureFormatError, Exchange, exchanges, read_capture
from proxy.wire import (
    GROUP_API_KEYS,
    ApiKey,
    CodecError,
    FrameError,
    api_name,
    decode_request,
    decode_response,
    group_protocol,
    request_fields,
    response_fields,
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="group-replay capture", description=__doc__)
    sub = parser.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="table of RPCs per connection")
    show.add_argument("file", help="a pcapng capture recorded by `group-replay proxy --record`")
    show.add_argument(
        "--format", choices=["table", "jsonl"], default="table", help="output format (default table)"
    )
    show.add_argument("--all", action="store_true", help="every API, not only the group APIs")
    show.add_argument(
        "--leg",
        choices=["client", "upstream"],
        default="client",
        help="client: what the clients sent and got (default); upstream: what the broker saw",
    )
    export = sub.add_parser("export", help="one JSON object per RPC")
    export.add_argument("file", help="a pcapng capture recorded by `group-replay proxy --record`")
    export.add_argument(
        "--format", choices=["jsonl", "table"], default="jsonl", help="output format (default jsonl)"
    )
    export.add_argument("--all", action="store_true", default=True, help=argparse.SUPPRESS)
    export.add_argument(
        "--leg",
        choices=["client", "upstream"],
        default="client",
        help="client: what the clients sent and got (default); upstream: what the broker saw",
    )
    return parser


def rpc_rows(capture: Capture, leg: str = "client", group_only: bool = False) -> list[dict[str, Any]]:
    """One row per request/response exchange, with group fields decoded through proxy.wire."""
    start = min((f.ts_ns for f in capture.frames), default=0)
    rows: list[dict[str, Any]] = []
    topic_names: dict[str, str] = {}  # topic id -> name, from the Metadata answers recorded
    for exchange in exchanges(capture, leg):
        request = exchange.request
        if request.api_key == ApiKey.METADATA:
            _learn_topic_ids(exchange, topic_names)
        if group_only and request.api_key not in GROUP_API_KEYS:
            continue
        row: dict[str, Any] = {
            "conn": request.conn,
            "t_ms": round((request.ts_ns - start) / 1e6, 3),
            "ts_ns": request.ts_ns,
            "client_id": request.client_id,
            "api": api_name(request.api_key),
            "api_key": request.api_key,
            "api_version": request.api_version,
            "correlation_id": request.correlation_id,
            "group_id": request.group_id,
            "member_id": None,
            "group_instance_id": None,
            "generation_id": None,
            "protocol": group_protocol(request.api_key),  # classic | consumer (KIP-848) | None: both
            "member_epoch": None,
            "assignment": None,
            "error_code": None,
            "rewritten": request.rewritten or bool(exchange.response and exchange.response.rewritten),
            "answered": exchange.response is not None,
        }
        if request.api_key in GROUP_API_KEYS:
            _add_group_fields(exchange, row)
        rows.append(row)
    for row in rows:  # ConsumerGroupHeartbeat assignments by topic id: `topic-partition` strings
        if row["assignment"] is not None:
            row["assignment"] = [
                f"{topic_names.get(topic_id, topic_id)}-{partition}"
                for topic_id, partitions in row["assignment"]
                for partition in partitions
            ]
    return rows


def _learn_topic_ids(exchange: Exchange, topic_names: dict[str, str]) -> None:
    """Metadata v10+ answers name each topic's id (KIP-848 assignments carry only the id)."""
    if exchange.response is None or exchange.request.api_version < 10:
        return
    try:
        _, response = decode_response(
            exchange.response.payload, ApiKey.METADATA, exchange.response.api_version
        )
    except (CodecError, FrameError):
        return
    for topic in response.topics:
        if topic.name is not None and topic.topic_id is not None and topic.topic_id.int != 0:
            topic_names[str(topic.topic_id)] = str(topic.name)


def _add_group_fields(exchange: Exchange, row: dict[str, Any]) -> None:
    api_key = exchange.request.api_key
    try:
        _, request = decode_request(exchange.request.payload)
    except (CodecError, FrameError) as exc:
        row["decode_error"] = f"request: {exc}"
        return
    fields = request_fields(api_key, request)
    row["member_id"] = fields.member_id
    row["group_instance_id"] = fields.group_instance_id
    row["generation_id"] = fields.generation_id
    row["member_epoch"] = fields.member_epoch
    row["assignment"] = fields.assignment
    if exchange.response is None:
        return
    try:
        _, response = decode_response(exchange.response.payload, api_key, exchange.response.api_version)
    except (CodecError, FrameError) as exc:
        row["decode_error"] = f"response: {exc}"
        return
    answer = response_fields(api_key, response)
    row["error_code"] = answer.error_code
    row["member_id"] = row["member_id"] or answer.member_id
    if answer.generation_id is not None:
        row["generation_id"] = answer.generation_id
    if answer.member_epoch is not None:  # ConsumerGroupHeartbeat: the epoch and target it was given
        row["member_epoch"] = answer.member_epoch
        row["assignment"] = answer.assignment


def _table(capture: Capture, rows: list[dict[str, Any]], title: str, console: Any = None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=title)
    for column in (
        "conn",
        "t (ms)",
        "client",
        "API",
        "v",
        "group",
        "member id",
        "instance id",
        "gen / epoch",
        "error",
    ):
        table.add_column(column, overflow="fold")
    previous = None
    for row in rows:
        if previous is not None and row["conn"] != previous:
            table.add_section()
        previous = row["conn"]
        error = row["error_code"]
        table.add_row(
            str(row["conn"]),
            f"{row['t_ms']:.1f}",
            row["client_id"] or "",
            row["api"] + (" *" if row["rewritten"] else ""),
            str(row["api_version"]),
            row["group_id"] or "",
            row["member_id"] or "",
            row["group_instance_id"] or "",
            _generation_cell(row),
            ("" if error is None else ("-" if error == 0 else f"[red]{error}[/red]"))
            + ("" if row["answered"] else " (no response)")
            + (" [yellow]undecodable[/yellow]" if "decode_error" in row else ""),
        )
    console.print(table)
    for line in protocol_lines(rows):
        console.print(line)
    traffic = _traffic_line(capture)
    if traffic:
        console.print(traffic)
    console.print(_frames_line(capture))
    if capture.damage:
        console.print(f"[yellow]capture damaged: {capture.damage}; shown up to the damage[/yellow]")


def protocol_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Per group, its members by the protocol they spoke (a migration capture holds both): a member
    is its group instance id, else its member id; one seen in both protocols switched."""
    members: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        protocol, group = row["protocol"], row["group_id"]
        key = row["group_instance_id"] or row["member_id"]
        if protocol is None or not group or not key or row["api_key"] == ApiKey.CONSUMER_GROUP_DESCRIBE:
            continue
        members.setdefault(group, {}).setdefault(protocol, set()).add(key)
    lines = []
    for group, by_protocol in sorted(members.items()):
        classic, consumer = by_protocol.get("classic", set()), by_protocol.get("consumer", set())
        parts = [
            f"{len(found)} {name}" for name, found in (("classic", classic), ("consumer", consumer)) if found
        ]
        both = classic & consumer
        switched = f"; {len(both)} spoke both (switched protocol)" if both else ""
        lines.append(f"group {group}: {' and '.join(parts)} protocol members{switched}")
    return lines


def _generation_cell(row: dict[str, Any]) -> str:
    """A classic generation as a number, a consumer-protocol member epoch as `epoch N`."""
    if row.get("member_epoch") is not None:
        return f"epoch {row['member_epoch']}"
    return "" if row["generation_id"] is None else str(row["generation_id"])


def _traffic_line(capture: Capture) -> str:
    """What the connections carried against what the capture holds (format 3 close comments)."""
    carried = [
        (c.client_bytes or 0) + (c.upstream_bytes or 0)
        for c in capture.connections.values()
        if c.client_bytes is not None or c.upstream_bytes is not None
    ]
    if not carried:
        return ""
    recorded = sum(len(f.payload) + 4 for f in capture.frames if f.leg == "client")
    return (
        f"record scope {capture.record_scope}: {len(carried)} closed connections carried "
        f"{sum(carried):,} bytes; {recorded:,} bytes of frames recorded (client leg)"
    )


def _frames_line(capture: Capture, leg: str = "client") -> str:
    """Requests per API on one leg, every recorded one: whole, or header only (record scope group,
    formats 4 and 5), so a group-scoped capture still says how much Produce/Fetch traffic there was."""
    whole: Counter[int] = Counter()
    header_only: Counter[int] = Counter()
    for frame in capture.frames:
        if frame.leg == leg and frame.direction == "request":
            (header_only if frame.header_only else whole)[frame.api_key] += 1
    parts = []
    for api_key in sorted(whole.keys() | header_only.keys(), key=api_name):
        count = whole[api_key] + header_only[api_key]
        if header_only[api_key] == count:
            parts.append(f"{api_name(api_key)} {count} (header only)")
        elif header_only[api_key]:
            parts.append(f"{api_name(api_key)} {count} ({header_only[api_key]} header only)")
        else:
            parts.append(f"{api_name(api_key)} {count}")
    return f"requests per API ({leg} leg): " + (", ".join(parts) or "none")


def _settings_line(capture: Capture) -> str:
    """The recorded broker's group settings, for the table's title (AGREED #2)."""
    settings = capture.group_settings
    if settings is None:
        return ""
    if settings.unknown_reason is not None and settings.initial_rebalance_delay_ms is None:
        return f"\nbroker group settings unknown: {settings.unknown_reason}"
    coordinator = {True: "new", False: "classic", None: "?"}[settings.new_coordinator]
    return (
        f"\nKafka {settings.broker_version or '?'}, {coordinator} coordinator, initial rebalance delay "
        f"{settings.initial_rebalance_delay_ms} ms, session timeout {settings.min_session_timeout_ms}-"
        f"{settings.max_session_timeout_ms} ms, group.max.size {settings.max_size}"
    )


def show(
    path: str, *, leg: str = "client", group_only: bool = True, fmt: str = "table", console: Any = None
) -> int:
    try:
        capture = read_capture(path)
    except (OSError, CaptureFormatError) as exc:
        print(f"group-replay capture: {exc}", file=sys.stderr)
        return 2
    rows = rpc_rows(capture, leg, group_only)
    if fmt == "jsonl":
        for row in rows:
            sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")
        if capture.damage:
            print(f"group-replay capture: damaged capture read up to: {capture.damage}", file=sys.stderr)
    else:
        header = capture.header
        title = (
            f"{path}: upstream {header.get('upstream')}, policy {header.get('policy')}, "
            f"record scope {capture.record_scope}, {leg} leg"
        )
        title += _settings_line(capture)
        rows.sort(key=lambda row: (row["conn"], row["ts_ns"]))  # grouped per connection
        _table(capture, rows, title, console)
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(_parser(), argv)
    if isinstance(args, int):
        return args
    group_only = not args.all if args.action == "show" else False
    return show(args.file, leg=args.leg, group_only=group_only, fmt=args.format)
