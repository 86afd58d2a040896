"""`group-replay coordinator`: the command line of the served reference coordinator.

Options map one to one onto Kafka's group coordinator settings; `serve` runs
`replay.server.ReferenceServer` until SIGINT or SIGTERM.
Exit codes: 0 stopped, 2 usage or input error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
from pathlib import Path
from typing import IO, Any

from group_replay import add_enum_option, parse_args, stop_on_signals
from replay.coordinator import CoordinatorConfig, KafkaBehaviour
from replay.coordinator.consumer import ConsumerGroupBehaviour, ConsumerGroupConfig
from replay.coordinator.consumer.group import MigrationPolicy
from replay.server import ReferenceServer
from replay.state_log import LogContents, StateDirError, StateLog


def parse_topics(text: str) -> dict[str, int]:
    """`events:6,orders` -> {"events": 6, "orders": 1}."""
    topics: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, count = item.partition(":")
        if not name:
            raise ValueError(f"empty topic name in {text!r}")
        try:
            partitions = int(count) if count else 1
        except ValueError:
            raise ValueError(f"topic {name!r}: partition count {count!r} is not a number") from None
        if partitions < 1:
            raise ValueError(f"topic {name!r}: partition count must be >= 1")
        topics[name] = partitions
    return topics


def _kafka_int_settings() -> tuple[tuple[str, int, str], ...]:
    """(flag, default, Kafka's setting) of the integer group settings `serve` takes; the defaults
    are the coordinator configs' own (Kafka's), so they are declared once."""
    classic, consumer = CoordinatorConfig(), ConsumerGroupConfig()
    return (
        (
            "--group-min-session-timeout-ms",
            classic.group_min_session_timeout_ms,
            "group.min.session.timeout.ms",
        ),
        (
            "--group-max-session-timeout-ms",
            classic.group_max_session_timeout_ms,
            "group.max.session.timeout.ms",
        ),
        (
            "--group-initial-rebalance-delay-ms",
            classic.group_initial_rebalance_delay_ms,
            "group.initial.rebalance.delay.ms",
        ),
        ("--group-max-size", classic.group_max_size, "group.max.size"),
        (
            "--consumer-group-session-timeout-ms",
            consumer.session_timeout_ms,
            "group.consumer.session.timeout.ms",
        ),
        (
            "--consumer-group-assignment-interval-ms",
            consumer.assignment_interval_ms,
            "group.consumer.assignment.interval.ms (4.3+)",
        ),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="group-replay coordinator",
        description="Serve the reference classic group coordinator over TCP so real clients can join it.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("serve", help="listen for Kafka clients")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default %(default)s)")
    s.add_argument("--port", type=int, default=9092, help="0 picks a free port (printed on stdout)")
    s.add_argument("--topics", default="", help="topics and partition counts: events:6,orders:3")
    add_enum_option(
        s,
        "--behaviour",
        KafkaBehaviour.SCALA_3_9,
        help="which Kafka coordinator to behave as (default %(default)s)",
    )
    for flag, default, kafka_name in _kafka_int_settings():
        s.add_argument(flag, type=int, default=default, help=f"Kafka's {kafka_name} (default %(default)s)")
    add_enum_option(
        s,
        "--consumer-group-behaviour",
        ConsumerGroupBehaviour.KAFKA_4_3,
        help="which Kafka build's KIP-848 consumer group rules to follow (default %(default)s)",
    )
    add_enum_option(
        s,
        "--consumer-group-migration-policy",
        MigrationPolicy.DISABLED,
        help="Kafka's group.consumer.migration.policy: the online classic <-> consumer group "
        "conversion (default %(default)s; Kafka's default is bidirectional)",
    )
    s.add_argument(
        "--state-dir",
        type=Path,
        help="keep the coordinator's records (Kafka's __consumer_offsets: group metadata per generation, "
        "committed offsets) in DIR and load them on start, so that groups survive a restart",
    )
    s.add_argument("--events", type=Path, help="append the coordinator's group events here (JSON Lines)")
    s.add_argument("--log-level", default="WARNING", help="Python logging level (default %(default)s)")
    return parser


def main(argv: list[str]) -> int:
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args
    try:
        topics = parse_topics(args.topics)
    except ValueError as exc:
        print(f"group-replay coordinator: --topics: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(message)s")
    config = CoordinatorConfig(
        group_min_session_timeout_ms=args.group_min_session_timeout_ms,
        group_max_session_timeout_ms=args.group_max_session_timeout_ms,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        group_max_size=args.group_max_size,
        kafka_behaviour=KafkaBehaviour(args.behaviour),
        host=args.host,
        port=args.port,
    )
    state = None
    if args.state_dir is not None:
        try:
            state = StateLog.open(args.state_dir)
        except StateDirError as exc:
            print(f"group-replay coordinator: --state-dir: {exc}", file=sys.stderr)
            return 2
    events_out = args.events.open("a", encoding="utf-8") if args.events else None
    try:
        consumer_config = ConsumerGroupConfig(
            behaviour=ConsumerGroupBehaviour(args.consumer_group_behaviour),
            session_timeout_ms=args.consumer_group_session_timeout_ms,
            assignment_interval_ms=args.consumer_group_assignment_interval_ms,
            migration_policy=MigrationPolicy(args.consumer_group_migration_policy),
            classic_max_size=args.group_max_size,
        )
        asyncio.run(
            serve(
                args.host,
                args.port,
                config,
                topics,
                events_out,
                ready=sys.stdout,
                consumer_config=consumer_config,
                state=state,
            )
        )
    except KeyboardInterrupt:
        return 0
    except OSError as exc:
        print(f"group-replay coordinator: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 2
    finally:
        if events_out is not None:
            events_out.close()
        if state is not None:
            state[0].close()
    return 0


async def serve(
    host: str,
    port: int,
    config: CoordinatorConfig,
    topics: dict[str, int],
    events_out: IO[str] | None = None,
    ready: IO[str] | None = None,
    consumer_config: ConsumerGroupConfig | None = None,
    state: tuple[StateLog, LogContents] | None = None,
) -> None:
    """The asyncio shell around `ReferenceServer`, until SIGINT or SIGTERM (`stop_on_signals`);
    the stop exits 0."""
    server = ReferenceServer(config, topics, events_out, consumer_config=consumer_config, state=state)
    stop = stop_on_signals()  # before the "listening" line supervisors wait for
    asyncio.get_running_loop().set_exception_handler(_quiet_cancel)
    bound_host, bound_port = await server.start(host, port)
    if ready is not None:
        ready.write(json.dumps({"event": "listening", "host": bound_host, "port": bound_port}) + "\n")
        ready.flush()
    assert server.server is not None
    async with server.server:
        await stop.wait()
        await server.stop()


def _quiet_cancel(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """The loop's error report, but for a connection cancelled at shutdown: Python 3.11's streams
    report a cancelled connection task as an error (`task.exception()` in their done callback;
    3.12 checks `cancelled()` first). A client that connected just before the stop, whose task
    had not started when `ReferenceServer.stop` closed the others, is such a task."""
    if not isinstance(context.get("exception"), asyncio.CancelledError):
        loop.default_exception_handler(context)
