"""`group-replay demo group`: the demo group against a running cluster (or the proxy in front of
one), held until its coordinator moves (README's walk-through: kill the coordinator's broker).

    group-replay demo group --bootstrap HOST:PORT [--client-config librdkafka.properties]

1. creates the topic (`--partitions`, the cluster's default replication) if it is missing;
2. starts the demo group (demo.group.DEFAULT_MEMBERS: librdkafka, Java 3.9 and 2.4, kafka-python,
   aiokafka; static and dynamic members), every member with the listener's security settings
   (`--client-config`: the `librdkafka.properties` that `group-replay broker start --security`
   writes; demo.security spells it for each client), and waits until every partition is owned;
3. prints `coordinator: node N` (the broker the kafka-python member found coordinating the
   group: FindCoordinator's answer, seen by a real client), then waits up to `--wait-s` for that
   to change (someone kills that broker: `group-replay broker stop --node N`);
4. prints the new coordinator, waits until the group is settled again (every partition owned, no
   change for twice the session timeout) and prints what each member saw before and after.

Exit 0 when the group settled on a new coordinator, 1 when it did not (a member failed, the
coordinator did not move in time, the group did not settle), 2 for bad input or a missing extra.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

from group_replay import parse_args

DEFAULT_TOPIC = "demo-walkthrough"
DEFAULT_GROUP = "demo-walkthrough-group"
DEFAULT_WAIT_S = 300.0
COORDINATOR_MEMBER = "static-kafka-python"


def build_parser() -> argparse.ArgumentParser:
    from demo.group import DEFAULT_PARTITIONS

    parser = argparse.ArgumentParser(
        prog="group-replay demo group",
        description="run the demo group against a running cluster until its coordinator moves",
    )
    parser.add_argument("--bootstrap", required=True, metavar="HOST:PORT", help="a broker or the proxy")
    parser.add_argument(
        "--client-config",
        type=Path,
        default=None,
        metavar="FILE",
        help="the listener's security settings in librdkafka's names (the librdkafka.properties "
        "`group-replay broker start --security` writes); default PLAINTEXT",
    )
    parser.add_argument("--topic", default=DEFAULT_TOPIC, help="created if missing (default %(default)s)")
    parser.add_argument("--group", default=DEFAULT_GROUP, help="the group id (default %(default)s)")
    parser.add_argument(
        "--partitions", type=int, default=DEFAULT_PARTITIONS, help="a new topic's (default %(default)s)"
    )
    parser.add_argument(
        "--wait-s",
        type=float,
        default=DEFAULT_WAIT_S,
        help="how long to wait for the coordinator to move (default %(default)s)",
    )
    return parser


def _say(text: str) -> None:
    print(text, flush=True)


def _coordinator(
    member: object, after: int, timeout_ms: int, other_than: int | None = None
) -> tuple[int, int]:
    """The first `coordinator` event at or after index `after` naming a node other than
    `other_than`: (node id, its index)."""
    from demo.clients import ConsumerProcess

    assert isinstance(member, ConsumerProcess)
    event = member.wait_for(
        lambda e: e.event == "coordinator" and e.raw.get("node_id") != other_than, timeout_ms, after
    )
    return int(event.raw["node_id"]), member.snapshot().index(event)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from demo.clients import ConsumerProcess, start_consumer
    from demo.group import (
        DEFAULT_MEMBERS,
        DEFAULT_SESSION_TIMEOUT_MS,
        DEFAULT_SETTLE_TIMEOUT_MS,
        GroupRun,
        _observe,
        _spec,
        render_table,
        wait_settled,
    )

    plans = {plan.name: plan for plan in DEFAULT_MEMBERS}
    wanted = {f"{args.topic}-{p}" for p in range(args.partitions)}
    running: dict[str, ConsumerProcess] = {}
    observations = []
    out = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        _say(f"starting {len(plans)} members of group {args.group} on {args.bootstrap}")
        for plan in DEFAULT_MEMBERS:
            spec = _spec(plan, args.bootstrap, args.group, args.topic, DEFAULT_SESSION_TIMEOUT_MS)
            running[plan.name] = start_consumer(replace(spec, client_config=args.client_config))
        wait_settled(running, wanted, DEFAULT_SETTLE_TIMEOUT_MS)
        observations += _observe("settled", plans, running)
        witness = running[COORDINATOR_MEMBER]
        first, index = _coordinator(witness, 0, DEFAULT_SETTLE_TIMEOUT_MS)
        _say(f"group settled; coordinator: node {first}")
        _say(
            f"waiting up to {args.wait_s:.0f} s for the coordinator to move "
            f"(group-replay broker stop --node {first})"
        )
        moved, _ = _coordinator(witness, index + 1, int(args.wait_s * 1000), other_than=first)
        _say(f"coordinator moved: node {first} -> node {moved}")
        wait_settled(running, wanted, DEFAULT_SETTLE_TIMEOUT_MS, quiet_ms=2 * DEFAULT_SESSION_TIMEOUT_MS)
        observations += _observe(f"after the move to node {moved}", plans, running)
        out.print(render_table(GroupRun(args.bootstrap, args.group, args.topic, None, tuple(observations))))
        _say(f"the group settled again on its new coordinator, node {moved}")
    finally:
        for process in running.values():
            process.stop()
    return 0


def main(argv: list[str]) -> int:
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args
    from group_replay import missing_extras

    problem = missing_extras("clients")
    if problem is not None:
        print(f"group-replay demo group: {problem}", file=sys.stderr)
        return 2
    from demo.clients import ClientError
    from demo.security import ClientSecurity
    from harness.admin import AdminError, create_topic

    try:
        security = ClientSecurity() if args.client_config is None else ClientSecurity.read(args.client_config)
    except (OSError, ValueError) as exc:
        print(f"group-replay demo group: {exc}", file=sys.stderr)
        return 2
    started = time.monotonic()
    try:
        settings = security.librdkafka()
        create_topic(args.bootstrap, args.topic, args.partitions, settings=settings, replication=-1)
        code = run(args)
    except (AdminError, ClientError, ValueError) as exc:
        print(f"group-replay demo group: {exc}", file=sys.stderr)
        return 1
    _say(f"done in {time.monotonic() - started:.0f} s")
    return code
