"""The `group-replay` console script (and `python -m group_replay`).

Each subcommand lives in its stage's own command module and is imported only when it runs, so
`group-replay broker status` never pays for pyspark or scapy. Every command module exposes
`main(argv: list[str]) -> int` with its own argparse parser. Exit codes: 0 ok, 1 differences
found, 2 usage or input error.
"""

from __future__ import annotations

import importlib
import sys

# subcommand -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "broker": (
        "harness.cli",
        "broker_main",
        "start, stop or inspect a real Kafka broker built from Maven jars",
    ),
    "demo": (
        "proxy.demo",
        "main",
        "record a demo consumer group (static and dynamic members) through the proxy; show the capture",
    ),
    "proxy": ("proxy.cli", "main", "transparent Kafka proxy that records group traffic and can rewrite it"),
    "capture": ("proxy.capture.cli", "main", "show or export a pcapng capture recorded by the proxy"),
    "coordinator": ("replay.server", "main", "serve the reference group coordinator over TCP"),
    "replay": ("replay.cli", "replay_main", "replay a capture against the reference coordinator or a broker"),
    "scenarios": ("replay.cli", "scenarios_main", "list or show the built-in scenario library"),
    "validate": ("validator.cli", "main", "diff expected vs observed rebalances with Spark; write a report"),
}


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: group-replay COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_text}" for name, (_, _, help_text) in COMMANDS.items()]
    lines += ["", "Run `group-replay COMMAND --help` for the options of one command."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if args else 2
    if args[0] in ("-V", "--version"):
        from importlib.metadata import version

        print(f"group-replay {version('group-replay')}")
        return 0
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"group-replay: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module_name, func_name, _ = COMMANDS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        # A stage that is not built yet, or an optional extra that is not installed.
        print(f"group-replay {name}: not available ({exc})", file=sys.stderr)
        return 2
    func = getattr(module, func_name)
    try:
        return int(func(rest) or 0)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
