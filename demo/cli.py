"""`group-replay demo`: the whole loop on this machine, in a few minutes.

1. record: a real Kafka broker (harness, Maven jars) with the recording proxy in front of it, and a
   real consumer group of several client kinds (demo.group: librdkafka, kafka-python, aiokafka and
   two Java clients; static and dynamic members; one static member bounced) joining through it;
2. replay: the capture under two built-in scenarios (`group-replay scenarios list`), each against
   the reference coordinator (virtual time) and against a fresh live broker of the recorded version
   (`broker-<version>`, started with the capture's group settings); the live runs go together;
3. validate: Spark diffs every live run against the reference under the same scenario and writes
   the HTML report;
4. the verdict table, the report's path and what to try next.

Everything lands under `--dir` (default ./group-replay-demo): capture.pcapng, events/<scenario>/,
report.html, tables/. Exit codes: 0 the loop ran (its verdict is in the table), 1 a step failed
(broker, clients, Spark), 2 usage error or a missing extra / tool.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from group_replay import add_progress_option, parse_args

DEFAULT_SCENARIOS: tuple[str, ...] = ("mixed-static-dynamic-group", "dynamic-to-static-rolling-upgrade")
DEFAULT_SPEED = 4.0
"""Live replays compress the idle gaps four times; they go at 1x while one of the broker's own
timers (initial rebalance delay, session and rebalance timeouts) may be measuring, since those run
in real time (`replay.live.BrokerTimerPace`): about a minute of broker time per scenario, not two."""
DEMO_BROKER_SETTINGS: dict[str, str] = {"group.initial.rebalance.delay.ms": "0"}
"""What the demo asks of the broker it starts, beyond Kafka's group defaults: no initial delay, so
the recorded group's first rebalances are not held 3 s. Recorded into the capture header, the 0
applies to the reference and to the fresh brokers of the live runs alike. (It was once needed for
faithful 4x runs: before the live runs were paced, a static member rejoining while its first
JoinGroup was held by a 3 s delay was fenced, which the recording never saw.)"""
DEFAULT_DIR = "group-replay-demo"


@dataclass(frozen=True)
class DemoPaths:
    """Where each output of the loop goes (all absolute, resolved against the caller's directory)."""

    root: Path
    capture: Path
    events: Path
    report: Path
    tables: Path

    @classmethod
    def under(cls, root: Path) -> DemoPaths:
        return cls(root, root / "capture.pcapng", root / "events", root / "report.html", root / "tables")

    def scenario_events(self, scenario: str) -> Path:
        return self.events / scenario / "events.jsonl"


def build_parser() -> argparse.ArgumentParser:
    from demo.group import DEFAULT_PARTITIONS
    from harness.lines import DEFAULT_KAFKA_VERSION

    parser = argparse.ArgumentParser(
        prog="group-replay demo",
        description="record a real consumer group through the proxy, replay it under two built-in "
        "scenarios against the reference coordinator and a live broker, validate with Spark and "
        "print the verdict",
        epilog="`group-replay demo group --help`: the demo group alone, against a running cluster, "
        "until its coordinator moves (README's walk-through)",
    )
    parser.add_argument(
        "--dir",
        type=Path,
        default=Path(DEFAULT_DIR),
        help="where the capture, events, report and tables go (default ./%(default)s)",
    )
    parser.add_argument(
        "--version",
        dest="kafka_version",
        default=DEFAULT_KAFKA_VERSION,
        help="Kafka version to record on and replay against (default %(default)s)",
    )
    parser.add_argument(
        "--bootstrap",
        default=None,
        metavar="HOST:PORT",
        help="record against this running broker instead of starting one (its version should be --version)",
    )
    parser.add_argument(
        "--scenario",
        dest="scenarios",
        action="append",
        metavar="NAME",
        help="scenario to replay under: a built-in name, as-recorded or a YAML file (repeatable; default: "
        + ", ".join(DEFAULT_SCENARIOS)
        + ")",
    )
    parser.add_argument(
        "--speed",
        type=float,
        default=DEFAULT_SPEED,
        help="time scale of the live replays' idle gaps (default %(default)s); the broker's own timers "
        "stay real, so a run goes at 1x while one of them may be measuring",
    )
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="replay against the reference coordinator only (quicker; no live broker runs)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=DEFAULT_PARTITIONS,
        help="partitions of the demo topic (default %(default)s)",
    )
    add_progress_option(parser, "download spinners")
    return parser


class Steps:
    """Numbered step lines on stderr: plain text, so they read the same in a terminal and a log."""

    def __init__(self, total: int) -> None:
        from rich.console import Console

        self.total = total
        self.done = 0
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.started = time.monotonic()

    @contextmanager
    def step(self, text: str) -> Iterator[None]:
        self.done += 1
        self.console.print(f"[bold][{self.done}/{self.total}][/] {text} ...")
        began = time.monotonic()
        yield
        self.console.print(f"[dim]      done in {time.monotonic() - began:.1f} s[/]")

    def note(self, text: str) -> None:
        self.console.print(f"[dim]      {text}[/]")

    def elapsed_s(self) -> float:
        return time.monotonic() - self.started


def _preflight(args: argparse.Namespace) -> str | None:
    """One line saying what is missing before anything starts (extras, java, mvn), or None."""
    from group_replay import missing_extras
    from harness.maven import missing_tools
    from validator.session import java_problem

    problem = missing_extras("clients", "spark")
    if problem is not None:
        return problem
    if args.bootstrap is None or not args.no_live:
        tools = missing_tools()
        if tools is not None:
            return f"cannot start Kafka: {tools} (a JDK 17+ and Maven are needed)"
    if shutil.which("javac") is None:
        return "javac not found on PATH: the demo's Java clients need a JDK 17+"
    return java_problem()


def _record(args: argparse.Namespace, paths: DemoPaths, steps: Steps) -> Any:
    """Steps 1-2: a broker (unless --bootstrap), the proxy recording in front of it, the group."""
    from demo.group import render_table, run_group
    from harness.admin import create_topic
    from harness.broker import BrokerSpec, start_broker
    from harness.cli import KAFKA_GROUP_DEFAULTS
    from harness.progress import download_progress
    from proxy.capture.writer import CaptureWriter
    from proxy.server import BackgroundProxy, ProxyConfig, parse_hostport
    from proxy.upstream import describe_upstream_sync

    broker = None
    proxy = None
    try:
        spinner = args.progress == "on" and sys.stderr.isatty()  # a log gets the step lines only
        with download_progress(spinner, "fetching jars") as progress:
            if args.bootstrap is None:
                with steps.step(f"starting Kafka {args.kafka_version} (no initial rebalance delay)"):
                    spec = BrokerSpec(
                        args.kafka_version, extra_config=KAFKA_GROUP_DEFAULTS | DEMO_BROKER_SETTINGS
                    )
                    broker = start_broker(spec, progress=progress)
                    steps.note(f"broker {broker.bootstrap}")
            upstream = args.bootstrap or broker.bootstrap  # type: ignore[union-attr]
            topic = f"demo-{int(time.time())}"
            with steps.step(f"recording a consumer group through the proxy into {paths.capture}"):
                create_topic(upstream, topic, args.partitions)
                settings = describe_upstream_sync(*parse_hostport(upstream))  # AGREED #2: in the header
                recorder = CaptureWriter(str(paths.capture), upstream=upstream, group_settings=settings)
                proxy = BackgroundProxy(ProxyConfig(upstream=parse_hostport(upstream)), recorder)
                steps.note(f"proxy {proxy.bootstrap} -> broker {upstream}")
                run = run_group(
                    proxy.bootstrap, topic, args.partitions, progress=progress, on_phase=steps.note
                )
    finally:
        if proxy is not None:
            proxy.stop()  # also closes the capture, so it is complete before it is read
        if broker is not None:
            broker.stop()
    return render_table(run)


class _LiveRun:
    """One scenario's live replay (its own fresh broker), running in a thread beside the others:
    the runs wait on broker timers, not on the CPU, so the scenarios' live runs take about as long
    together as the longest alone. The step that shows a run shows its latest progress."""

    def __init__(self, pool: ThreadPoolExecutor, plan: Any, scenario: Any, args: argparse.Namespace) -> None:
        from replay.live import replay_broker_version

        self.latest: tuple[int, int] | None = None
        self.future = pool.submit(
            replay_broker_version,
            plan,
            scenario,
            kafka_version=args.kafka_version,
            speed=args.speed,
            progress=self._progress,
        )

    def _progress(self, now_ms: int, end_ms: int) -> None:
        self.latest = (now_ms, end_ms)

    def result(self, report: Callable[[int, int], None] | None) -> Any:
        """The run's result (its exception, re-raised), showing its progress meanwhile."""
        while True:
            try:
                return self.future.result(timeout=0.5)
            except TimeoutError:
                if report is not None and self.latest is not None:
                    report(*self.latest)


def _replay(
    args: argparse.Namespace, paths: DemoPaths, steps: Steps, scenarios: Sequence[Any]
) -> list[tuple[str, Any]]:
    """Step 3: every scenario against the reference and (unless --no-live) a fresh broker; the
    live runs go together (`_LiveRun`), each step shows and writes one scenario's."""
    from proxy.capture.reader import read_capture
    from replay.brokers import group_settings
    from replay.cli import run_progress, speed_warning
    from replay.events import write_jsonl
    from replay.plan import build_plan, recorded_events
    from replay.run import replay_reference

    capture = read_capture(paths.capture)
    if capture.damage:
        steps.note(f"capture damaged ({capture.damage}); replaying what was read")
    plan = build_plan(capture, "demo")
    delay_ms = group_settings(plan.group_settings).config.group_initial_rebalance_delay_ms
    if not args.no_live and args.speed > 1 and delay_ms > 0:  # a --bootstrap broker's settings
        steps.note(speed_warning(args.speed, delay_ms))
    results: list[tuple[str, Any]] = []
    with ThreadPoolExecutor(max_workers=max(len(scenarios), 1)) as pool:
        live = {} if args.no_live else {s.name: _LiveRun(pool, plan, s, args) for s in scenarios}
        for scenario in scenarios:
            targets = "the reference" + ("" if args.no_live else f" and Kafka {args.kafka_version}")
            with steps.step(f"replaying under {scenario.name} against {targets}"):
                events = list(recorded_events(plan, scenario.name))
                runs = [replay_reference(plan, scenario)]  # virtual time: done in a moment
                steps.note(_run_line(runs[0]))
                if scenario.name in live:
                    label = f"      broker:{args.kafka_version} at speed {args.speed:g}"
                    with run_progress(True, label) as report:
                        runs.append(live[scenario.name].result(report))
                    steps.note(_run_line(runs[1]))
                for result in runs:
                    events.extend(result.events)
                    results.append((scenario.name, result))
                target = paths.scenario_events(scenario.name)
                target.parent.mkdir(parents=True, exist_ok=True)
                with target.open("w", encoding="utf-8") as handle:
                    write_jsonl(events, handle)
    return results


def _run_line(result: Any) -> str:
    if result.not_run is not None:
        return f"{result.run}: not run ({result.not_run})"
    from replay.events import EventName

    rebalances = sum(1 for e in result.events if e.event == EventName.REBALANCE_STARTED)
    expectations = "expectations met" if not result.failures else "; ".join(result.failures)
    return f"{result.run}: {rebalances} rebalances, {result.rpcs} requests, {expectations}"


def _validate(paths: DemoPaths, steps: Steps) -> Any:
    """Step 4: the validator (Spark) over every scenario's events; the report and tables."""
    from validator.jobs import ValidateOptions, run_validate
    from validator.report.html import render_html
    from validator.session import build_session

    with steps.step("validating with Spark (every live run vs the reference under its scenario)"):
        spark = build_session("local[2]")
        options = ValidateOptions(inputs=(paths.events,), out_dir=paths.tables)
        data = run_validate(spark, options)
        paths.report.write_text(render_html(data), encoding="utf-8")
    return data


def _next_step(paths: DemoPaths, kafka_version: str) -> str:
    return (
        f"Next: open the report; replay the capture under another scenario (`group-replay scenarios list`): "
        f"`group-replay replay {_shown(paths.capture)} --scenario NAME --against broker:{kafka_version} "
        f"--out events/`, or record your own group: `group-replay proxy --upstream HOST:PORT --record "
        f"capture.pcapng`."
    )


def _shown(path: Path) -> str:
    """`path` relative to the caller's directory when it is below it (shorter to copy)."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["group"]:  # `group-replay demo group`: the demo group alone (demo.group_cli)
        from demo.group_cli import main as group_main

        return group_main(argv[1:])
    return _loop(argv)


def _loop(argv: list[str]) -> int:
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args
    if args.speed <= 0 or args.partitions < 1:
        print("group-replay demo: --speed must be > 0 and --partitions >= 1", file=sys.stderr)
        return 2
    from replay.scenario import ScenarioError, resolve_scenario

    try:
        scenarios = [resolve_scenario(name) for name in (args.scenarios or DEFAULT_SCENARIOS)]
    except ScenarioError as exc:
        print(f"group-replay demo: {exc}", file=sys.stderr)
        return 2
    problem = _preflight(args)
    if problem is not None:
        print(f"group-replay demo: {problem}", file=sys.stderr)
        return 2

    from rich.console import Console

    from demo.clients import ClientError
    from harness.broker import BrokerError
    from harness.maven import MavenError

    paths = DemoPaths.under(Path(os.path.abspath(args.dir)))  # the caller's directory, not the package's
    if paths.events.exists():
        shutil.rmtree(paths.events)  # a previous demo's events would be validated again
    paths.root.mkdir(parents=True, exist_ok=True)
    steps = Steps(total=(1 if args.bootstrap is None else 0) + 1 + len(scenarios) + 1)
    out = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        members = _record(args, paths, steps)
        out.print(members)
        _replay(args, paths, steps, scenarios)
        data = _validate(paths, steps)
    except ValueError as exc:
        print(f"group-replay demo: {exc}", file=sys.stderr)
        return 2
    except (BrokerError, MavenError, ClientError, RuntimeError, OSError) as exc:
        print(f"group-replay demo: {exc}", file=sys.stderr)
        return 1

    from validator.report.terminal import print_summary

    print_summary(out, data)
    if not data.comparisons:
        verdict = "nothing was compared (no live run, and no as-recorded scenario)"
    elif data.failing:
        verdict = f"{data.failing} of {data.comparisons} comparisons are not a pass (see why above)"
    else:
        verdict = f"all {data.comparisons} comparisons pass"
    out.print(f"\nVerdict: {verdict}. Whole loop in {steps.elapsed_s():.0f} s.")
    out.print(f"Report: {paths.report}")
    out.print(_next_step(paths, args.kafka_version))
    return 0


if __name__ == "__main__":
    sys.exit(main())
