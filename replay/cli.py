"""`group-replay replay` and `group-replay scenarios`.

    group-replay replay CAPTURE... [--scenario NAME|FILE]... [--against reference|HOST:PORT|broker:VERSION]
                        --out DIR [--speed X] [--progress on|off]
    group-replay scenarios list | show NAME|FILE

The reference run and a broker `replay` starts (broker:VERSION) use the recorded broker's group
settings from the capture header, Kafka's defaults where it says nothing; a live run is named
`broker-<version>`, never by its address. A run the target cannot carry out (a JoinGroup v9
scenario against a 2.8 broker) is written as one `not_run` row with the reason.

Exit codes: 0 ok, 1 an expectation failed, 2 usage or input error (bad scenario YAML, unreadable
capture, nothing to replay, a scenario the target cannot run).
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from group_replay import add_ci_output_options, add_progress_option, parse_args
from replay.brokers import group_settings
from replay.events import RECORDED_RUN, REFERENCE_RUN, EventName, RebalanceEvent, write_jsonl, write_parquet
from replay.scenario import ScenarioError, builtin_names, load_builtin, resolve_scenario, scenario_text


def _console(stderr: bool = False) -> Any:
    """A console on stdout or stderr; 160 columns when it is not a terminal (a pipe or a CI log),
    so the summary's columns are not squeezed into 80."""
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, soft_wrap=True, width=160)
    return console


# ---------------------------------------------------------------------------------------------
# scenarios list | show NAME


def scenarios_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="group-replay scenarios", description="the built-in scenario library"
    )
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="names and one-line descriptions")
    show = sub.add_parser("show", help="check one scenario (built-in name or YAML file) and print its YAML")
    show.add_argument(
        "name", metavar="NAME|FILE", help="a built-in name (`group-replay scenarios list`) or a YAML file"
    )
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    if args.action == "list":
        from rich.table import Table

        table = Table(title="built-in scenarios")
        table.add_column("name", style="bold")
        table.add_column("description")
        for name in builtin_names():
            scenario = load_builtin(name)
            table.add_row(name, " ".join(scenario.description.split()))
        _console().print(table)
        return 0
    try:
        text = scenario_text(args.name)
    except ScenarioError as exc:
        print(f"group-replay scenarios: {exc}", file=sys.stderr)
        return 2
    sys.stdout.write(text)
    return 0


# ---------------------------------------------------------------------------------------------
# replay


def _empty_row() -> dict[str, Any]:
    return {"rebalances": 0, "leaders": set(), "fenced": set(), "expired": set(), "errors": Counter()}


def _summary_rows(events: list[RebalanceEvent]) -> dict[tuple[str, str], dict[str, Any]]:
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for e in events:
        row = rows.setdefault((e.session_id, e.run), _empty_row())
        match e.event:
            case EventName.REBALANCE_STARTED:
                row["rebalances"] += 1
            case EventName.MEMBER_FENCED:
                row["fenced"].add(e.member_key)
            case EventName.MEMBER_EXPIRED:
                row["expired"].add(e.member_key)
        if e.event == EventName.MEMBER_JOINED and e.is_leader:
            row["leaders"].add(e.member_key)
        if e.error_code:
            row["errors"][e.error_code] += 1
    return rows


def _error_name(code: int) -> str:
    from kio.schema.errors import ErrorCode

    try:
        return ErrorCode(code).name.upper()
    except ValueError:
        return str(code)


def _compared_with(run: str, scenario_name: str) -> str:
    """What `group-replay validate` compares this run with (AGREED #5)."""
    if run == RECORDED_RUN:
        if scenario_name == "as-recorded":
            return "validate compares every as-recorded run with it"
        return f"validate does not compare it: {scenario_name} changes the group"
    if run == REFERENCE_RUN:
        return f"validate's expected side for {scenario_name}: every other run of it is compared with it"
    if scenario_name == "as-recorded":
        return "validate compares it with recorded and with reference"
    return f"validate compares it with reference under {scenario_name}"


def _print_summary(
    events: list[RebalanceEvent], results: list[tuple[str, Any]], scenario_name: str, settings: dict[str, str]
) -> None:
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"replay summary - scenario {scenario_name}")
    for column in (
        "session",
        "run",
        "rebalances",
        "leaders",
        "fenced",
        "expired",
        "errors",
        "rpcs",
        "expectations",
    ):
        table.add_column(column, overflow="fold")
    by_run = {(session, result.run): result for session, result in results}
    rows = _summary_rows(events)
    for session, result in results:  # a run without events still gets its row
        rows.setdefault((session, result.run), _empty_row())
    for (session, run), row in sorted(rows.items()):
        result = by_run.get((session, run))
        verdict = "-"
        if result is not None and result.not_run is not None:
            verdict = f"[yellow]not run[/]: {escape(result.not_run)}"
        elif result is not None:
            verdict = (
                "[green]pass[/]"
                if not result.failures
                else "[red]FAIL[/]: " + escape("; ".join(result.failures))
            )
        table.add_row(
            session,
            run,
            str(row["rebalances"]),
            ", ".join(sorted(row["leaders"])),
            ", ".join(sorted(row["fenced"])) or "-",
            ", ".join(sorted(row["expired"])) or "-",
            ", ".join(f"{_error_name(code)} x{count}" for code, count in sorted(row["errors"].items()))
            or "-",
            str(result.rpcs) if result is not None else "-",
            verdict,
        )
    console = _console()
    console.print(table)
    for session, described in sorted(settings.items()):
        console.print(f"{session}: replayed with group settings {described}")
    for run in sorted({run for _, run in rows}):
        console.print(f"  {run}: {_compared_with(run, scenario_name)}")
    for session, result in results:
        if result.steps:
            console.print(_migration_table(session, result))


def _migration_table(session: str, result: Any) -> Any:
    """The protocol migration step by step: who was bounced, the group's type after it, the
    most JoinGroups any remaining classic member sent (the rebalance-storm risk) and by whom,
    and the partitions that changed hands."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"migration steps - {session} ({result.run})")
    for column in ("step", "from s", "bounced", "group type", "classic rejoins (most)", "partitions moved"):
        table.add_column(column, overflow="fold")
    for step in result.steps:
        most = max(step.rejoins.items(), key=lambda kv: (kv[1], kv[0]), default=None)
        table.add_row(
            str(step.index),
            f"{step.start_ms / 1000:.1f}",
            escape(step.bounced or "-"),
            step.group_type or "-",
            f"{most[1]} ({escape(most[0])})" if most else "0",
            str(step.partitions_moved),
        )
    return table


def _parse_against(value: str) -> tuple[str, str | None]:
    """('reference', None) | ('address', 'HOST:PORT') | ('broker', VERSION)."""
    if value == "reference":
        return "reference", None
    if value.startswith("broker:"):
        version = value.split(":", 1)[1]
        if not version:
            raise ValueError("broker:VERSION needs a version, e.g. broker:3.9.2")
        return "broker", version
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--against {value!r}: expected reference, HOST:PORT or broker:VERSION")
    return "address", value


def replay_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="group-replay replay",
        description="replay captured consumer groups against the reference coordinator or a live broker",
    )
    parser.add_argument(
        "captures", nargs="+", type=Path, metavar="CAPTURE", help="pcapng captures from the proxy"
    )
    parser.add_argument(
        "--scenario",
        action="append",
        help="built-in scenario name or YAML file (default as-recorded); give it more than once to replay "
        f"the captures under each in one run: {SCENARIO_FIELD} in --out, --junit-xml and --summary-json "
        "stands for the scenario's name (--out without it gets one directory per scenario)",
    )
    parser.add_argument("--against", default="reference", help="reference | HOST:PORT | broker:VERSION")
    parser.add_argument(
        "--out", type=Path, required=True, help="directory for events.jsonl (+ events.parquet)"
    )
    parser.add_argument(
        "--speed", type=float, default=1.0, help="time scale for live runs (2 = twice as fast)"
    )
    parser.add_argument(
        "--format",
        choices=("jsonl", "parquet"),
        default="jsonl",
        help="events.jsonl, or events.parquet (needs pyarrow); one file, since the validator reads every "
        "event file under a directory",
    )
    add_progress_option(parser, "each run's progress")
    add_ci_output_options(
        parser, test_case="session x run", summary="the runs, their verdicts and the exit code"
    )
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    err = _console(stderr=True)
    try:
        scenarios = [resolve_scenario(name) for name in args.scenario or ["as-recorded"]]
        _check_several(args, [scenario.name for scenario in scenarios])
        target, target_arg = _parse_against(args.against)
        if args.speed <= 0:
            raise ValueError("--speed must be > 0")
    except (ScenarioError, ValueError) as exc:
        err.print(f"group-replay replay: {exc}", markup=False)
        return 2

    from proxy.capture.reader import CaptureFormatError, read_capture
    from replay.plan import ReplayInputError, build_plan

    plans = []
    for path in args.captures:
        try:
            capture = read_capture(path)
            plan = build_plan(capture, path.stem)
        except FileNotFoundError:
            err.print(f"group-replay replay: {path}: no such file", markup=False)
            return 2
        except (CaptureFormatError, ReplayInputError, OSError) as exc:
            err.print(f"group-replay replay: {path}: {exc}", markup=False)
            return 2
        if capture.damage:
            err.print(f"[yellow]{path}: capture damaged ({capture.damage}); replaying what was read[/]")
        plans.append(plan)

    if target != "reference" and args.speed > 1:
        delay_ms = max(
            group_settings(plan.group_settings).config.group_initial_rebalance_delay_ms for plan in plans
        )
        if delay_ms > 0:
            err.print(f"[yellow]{speed_warning(args.speed, delay_ms)}[/]")

    # The plans live for the whole run: keep the collector from walking their ~1M objects again.
    gc.collect()
    gc.freeze()
    # Each scenario runs and writes as its own command would; the exit code is the worst of theirs.
    return max(_replay_scenario(args, scenario, plans, target, target_arg) for scenario in scenarios)


SCENARIO_FIELD = "{scenario}"


def _check_several(args: argparse.Namespace, names: list[str]) -> None:
    """Several --scenario: each needs its own files, so a report path must name the scenario."""
    if len(set(names)) < len(names):
        raise ValueError(f"--scenario: a scenario given twice ({', '.join(sorted(names))})")
    if len(names) == 1:
        return
    for option, path in (("--junit-xml", args.junit_xml), ("--summary-json", args.summary_json)):
        if path is not None and SCENARIO_FIELD not in str(path):
            raise ValueError(f"{option} {path}: with several --scenario the file name needs {SCENARIO_FIELD}")


def _scenario_path(path: Path | None, name: str, several: bool) -> Path | None:
    """`path` for scenario `name`: its {scenario} replaced; else `path` (one scenario) or, for
    --out with several, a directory per scenario under it."""
    if path is None or SCENARIO_FIELD in str(path):
        return None if path is None else Path(str(path).replace(SCENARIO_FIELD, name))
    return path / name if several else path


def _replay_scenario(
    args: argparse.Namespace, scenario: Any, plans: list[Any], target: str, target_arg: str | None
) -> int:
    """Every plan under `scenario`: its events file, summary, JUnit/JSON and exit code."""
    from replay.plan import recorded_events

    err = _console(stderr=True)
    several = len(args.scenario or ()) > 1
    out = _scenario_path(args.out, scenario.name, several)
    assert out is not None
    events: list[RebalanceEvent] = []
    results: list[tuple[str, Any]] = []
    progress_on = args.progress == "on"
    for plan in plans:
        events.extend(recorded_events(plan, scenario.name))
        try:
            with run_progress(progress_on, f"{plan.session_id} {args.against}") as report:
                result = _run_one(plan, scenario, target, target_arg, args.speed, report)
        except (ValueError, OSError, RuntimeError) as exc:
            err.print(f"group-replay replay: {plan.session_id}: {exc}", markup=False)
            return 2
        events.extend(result.events)
        results.append((plan.session_id, result))

    out.mkdir(parents=True, exist_ok=True)
    if args.format == "parquet":
        target_file = out / "events.parquet"
        try:
            write_parquet(events, target_file)
        except ImportError:
            err.print(
                "group-replay replay: --format parquet needs pyarrow (pip install 'group-replay[spark]')"
            )
            return 2
    else:
        target_file = out / "events.jsonl"
        with target_file.open("w", encoding="utf-8") as handle:
            write_jsonl(events, handle)
    settings = {plan.session_id: group_settings(plan.group_settings).describe() for plan in plans}
    _print_summary(events, results, scenario.name, settings)
    _console().print(f"wrote {len(events)} events to {target_file}")
    from rich.markup import escape  # scenario globs and reasons are text, never markup

    not_run = [(session, r) for session, r in results if r.not_run is not None]
    for session, r in not_run:
        err.print(f"[yellow]{session} {r.run}: scenario {scenario.name} cannot apply: {escape(r.not_run)}[/]")
    failed = [(session, r) for session, r in results if r.failures]
    for session, r in failed:
        for failure in r.failures:
            err.print(f"[red]{session} {r.run}: expectation failed: {escape(failure)}[/]")
    # not run: the scenario cannot apply to this target, a usage error (kept as not_run rows)
    code = 2 if not_run else 1 if failed else 0
    junit = _scenario_path(args.junit_xml, scenario.name, several)
    summary = _scenario_path(args.summary_json, scenario.name, several)
    if junit is not None or summary is not None:
        from replay.ci_report import write_replay_outputs

        write_replay_outputs(
            junit, summary, results, scenario.name, code,
            against=args.against, events_file=str(target_file), events=len(events),
        )  # fmt: skip
    return code


def speed_warning(speed: float, delay_ms: int) -> str:
    """Why a live run faster than recorded takes longer than the group's time / speed: it goes at
    1x while a broker timer may be measuring (replay.live.BrokerTimerPace). Compressing those
    spans too replayed another group (demo's capture: a static member fenced at 2x and 4x against
    a 3 s initial delay; members gone without LeaveGroup kept 4 x 6 s in the group)."""
    return (
        f"note: --speed {speed:g} compresses the recorded gaps only where no broker timer runs: the "
        f"broker's timers are real time (initial rebalance delay {delay_ms} ms, session and rebalance "
        "timeouts), so the run goes at 1x while one may be measuring"
    )


def _run_one(
    plan: Any,
    scenario: Any,
    target: str,
    target_arg: str | None,
    speed: float,
    progress: Callable[[int, int], None] | None,
) -> Any:
    """One plan against the chosen target: the reference, an address, or a broker `replay` starts."""
    from replay.live import replay_broker_version, replay_live
    from replay.run import replay_reference

    match target:
        case "reference":
            return replay_reference(plan, scenario, progress=progress)
        case "address":
            assert target_arg is not None
            return replay_live(plan, scenario, address=target_arg, speed=speed, progress=progress)
        case _:
            assert target_arg is not None
            return replay_broker_version(
                plan, scenario, kafka_version=target_arg, speed=speed, progress=progress
            )


PLAIN_PROGRESS_STEPS = 10
"""Without a terminal, a run's progress is one plain line per tenth of its time."""


@contextmanager
def run_progress(enabled: bool, label: str) -> Iterator[Callable[[int, int], None] | None]:
    """A `progress(now_ms, end_ms)` callback for one run: a bar on a terminal, plain lines on a pipe
    or in a CI log (so a live replay is never silent), None when disabled."""
    if not enabled:
        yield None
        return
    console = _console(stderr=True)
    if not console.is_terminal:
        shown = [-1]

        def plain(now_ms: int, end_ms: int) -> None:
            step = min(now_ms * PLAIN_PROGRESS_STEPS // max(end_ms, 1), PLAIN_PROGRESS_STEPS)
            if step > shown[0]:
                shown[0] = step
                console.print(f"{label}: {now_ms / 1000:.0f}/{end_ms / 1000:.0f} s of the group's time")

        yield plain
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[sim]}"),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        task = progress.add_task(label, total=1, sim="")

        def report(now_ms: int, end_ms: int) -> None:
            progress.update(
                task, total=max(end_ms, 1), completed=now_ms, sim=f"{now_ms / 1000:.0f}s simulated"
            )

        yield report


__all__ = ["replay_main", "run_progress", "scenarios_main", "speed_warning"]
