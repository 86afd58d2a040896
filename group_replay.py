"""The `group-replay` console script (and `python -m group_replay`).

Each subcommand lives in its stage's own command module and is imported only when it runs, so
`group-replay broker status` never pays for pyspark or scapy. Every command module exposes
`main(argv: list[str]) -> int` with its own argparse parser. Exit codes: 0 ok, 1 differences
found, 2 usage or input error.
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import argparse
    import asyncio
    from enum import Enum

# subcommand -> (module, function, one-line help)
COMMANDS: dict[str, tuple[str, str, str]] = {
    "broker": (
        "harness.cli",
        "broker_main",
        "start, stop or inspect a real Kafka broker built from Maven jars",
    ),
    "demo": (
        "demo.cli",
        "main",
        "the whole loop in a few minutes: record a real group, replay it under two scenarios, validate",
    ),
    "proxy": ("proxy.cli", "main", "transparent Kafka proxy that records group traffic and can rewrite it"),
    "capture": ("proxy.capture.cli", "main", "show or export a pcapng capture recorded by the proxy"),
    "coordinator": ("replay.serve_cli", "main", "serve the reference group coordinator over TCP"),
    "replay": ("replay.cli", "replay_main", "replay a capture against the reference coordinator or a broker"),
    "scenarios": ("replay.cli", "scenarios_main", "list or show the built-in scenario library"),
    "validate": ("validator.cli", "main", "diff expected vs observed rebalances with Spark; write a report"),
}


# Optional extras (pyproject [project.optional-dependencies]) and the modules each brings.
EXTRAS: dict[str, tuple[str, ...]] = {
    "spark": ("pyspark", "pyarrow"),
    "clients": ("confluent_kafka", "kafka", "aiokafka"),
    "containers": ("testcontainers",),
}
EXTRA_OF_MODULE: dict[str, str] = {module: extra for extra, modules in EXTRAS.items() for module in modules}


def install_hint(extras: list[str] | tuple[str, ...]) -> str:
    return f"pip install 'group-replay[{','.join(sorted(set(extras)))}]'"


def missing_extras(*extras: str) -> str | None:
    """One line naming what to install when a module of these extras is missing, else None (a
    module set to None in sys.modules, the tests' way of removing an installed extra, counts as
    missing: `find_spec` returns None for it)."""
    import importlib.util

    missing = []
    for extra in extras:
        for module in EXTRAS[extra]:
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if not found:
                missing.append((extra, module))
    if not missing:
        return None
    wanted = [extra for extra, _ in missing]
    names = ", ".join(module for _, module in missing)
    extras_named = " and ".join(sorted(set(wanted))) + (" extra" if len(set(wanted)) == 1 else " extras")
    return f"needs the {extras_named} ({names} not installed): {install_hint(wanted)}"


def parse_args(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace | int:
    """`parser.parse_args(argv)`, or the exit code where argparse would exit instead: 0 after
    `--help`, 2 on a usage error (argparse has printed why). Every command module's `main` starts
    with it, so a command returns its code rather than raising SystemExit."""
    try:
        return parser.parse_args(argv)
    except SystemExit as exc:
        return 0 if exc.code in (0, None) else 2


def add_enum_option(parser: argparse.ArgumentParser, flag: str, default: Enum, help: str) -> None:
    """`flag` takes one of the values of `default`'s enum, `default` when not given; the parsed value
    is the string (the enum's constructor gives back the member)."""
    parser.add_argument(
        flag, choices=[str(member.value) for member in type(default)], default=str(default.value), help=help
    )


def add_progress_option(parser: argparse.ArgumentParser, shows: str) -> None:
    """Every long command's `--progress on|off` (on by default; off for CI logs): `shows` says what."""
    parser.add_argument("--progress", choices=("on", "off"), default="on", help=f"show {shows} (default on)")


def add_ci_output_options(parser: argparse.ArgumentParser, *, test_case: str, summary: str) -> None:
    """`--junit-xml FILE` and `--summary-json FILE` of replay and validate (replay.ci_report writes
    both): `test_case` says what one JUnit test case is, `summary` what the JSON holds."""
    from pathlib import Path

    parser.add_argument(
        "--junit-xml", type=Path, metavar="FILE", help=f"JUnit XML: one test case per {test_case} (for CI)"
    )
    parser.add_argument("--summary-json", type=Path, metavar="FILE", help=f"{summary} as JSON")


def stop_on_signals() -> asyncio.Event:
    """An event SIGINT or SIGTERM sets on the running loop: a long-running command's (the proxy's,
    `coordinator serve`'s) stop, so that a supervisor's stop (systemd, Kubernetes, `docker stop`)
    is a clean shutdown, as Ctrl-C is, and a background job whose shell ignores SIGINT still stops.
    Call it before printing the line supervisors wait for."""
    import asyncio
    import contextlib
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):  # not on Windows' event loop
            loop.add_signal_handler(signum, stop.set)
    return stop


def _missing_module_line(name: str, exc: ModuleNotFoundError) -> str | None:
    """The one line for a command that failed on an optional extra's module, else None."""
    top = (exc.name or "").split(".")[0]
    extra = EXTRA_OF_MODULE.get(top)
    if extra is None:
        return None
    return f"group-replay {name}: needs the {extra} extra ({top} not installed): {install_hint([extra])}"


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
        return int(getattr(module, func_name)(rest) or 0)
    except ModuleNotFoundError as exc:
        # An optional extra that is not installed: say which one, in one line, exit 2.
        line = _missing_module_line(name, exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
