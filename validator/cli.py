"""`group-replay validate`: diff expected vs observed rebalances with Spark and report.

Exit codes: 0 no differences beyond noise, 1 differences found or a comparison that could not be
made (a run `not run`, a missing expected run), 2 usage or input error (also when the spark extra
or Java is missing, or when more rows are bad than `--max-bad-rows` allows; the tables and the
report are still written then, so the bad rows can be inspected).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

from rich.console import Console

from group_replay import add_ci_output_options, add_progress_option, parse_args
from replay.events import REFERENCE_RUN
from validator.session import java_problem

EXIT_OK, EXIT_DIFFERENCES, EXIT_INPUT = 0, 1, 2
SPARK_EXTRA_MODULES = ("pyspark", "pyarrow")
INSTALL_SPARK_EXTRA = "pip install 'group-replay[spark]'"


def missing_spark_extra() -> str | None:
    """One line naming the extra to install, or None when pyspark and pyarrow import."""
    missing = [name for name in SPARK_EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if not missing:
        return None
    return f"needs the spark extra ({', '.join(missing)} not installed): {INSTALL_SPARK_EXTRA}"


def build_parser(prog: str = "group-replay validate") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Diff expected vs observed rebalances (events from `group-replay replay`) and write "
        "a compatibility report. Runs `X~2`, `X~3` ... are repeats of run `X`; differences between them "
        "are noise and do not fail the comparison.",
    )
    parser.add_argument(
        "events",
        nargs="+",
        type=Path,
        metavar="EVENTS_DIR",
        help="event files or directories (JSON Lines / Parquet)",
    )
    parser.add_argument(
        "--expected",
        default=REFERENCE_RUN,
        metavar="RUN",
        help="the run every other run is compared against: reference (default) or recorded",
    )
    parser.add_argument("--report", type=Path, help="write the self-contained HTML report here")
    parser.add_argument("--out", type=Path, help="write the Parquet tables under this directory")
    parser.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    add_progress_option(parser, "job stages")
    parser.add_argument(
        "--max-bad-rows",
        type=int,
        default=0,
        metavar="N",
        help="unusable input rows tolerated before exiting 2 (default 0; they are always counted)",
    )
    add_ci_output_options(
        parser, test_case="comparison", summary="counts, every comparison and the exit code"
    )
    return parser


def run(argv: list[str], *, master_from_submit: bool = False) -> int:
    """The command; `master_from_submit` leaves the master to `spark-submit` (spark_main.py)."""
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args
    console = Console(stderr=True)
    problem = missing_spark_extra() or java_problem()
    if problem is not None:
        print(f"group-replay validate: {problem}", file=sys.stderr)
        return EXIT_INPUT
    from validator.jobs import InputError, ValidateOptions, discover_inputs, run_validate
    from validator.report.html import render_html
    from validator.report.terminal import StageProgress, print_summary
    from validator.session import build_session

    # Absolute against the caller's directory: Spark's JVM resolves relative paths against its own
    # working directory, which is not the caller's under spark-submit or a reused session.
    args.events = [path.absolute() for path in args.events]
    args.out = None if args.out is None else args.out.absolute()
    args.report = None if args.report is None else args.report.absolute()
    options = ValidateOptions(
        inputs=tuple(args.events),
        expected_run=args.expected,
        out_dir=args.out,
        max_bad_rows=args.max_bad_rows,
        collect_all=args.junit_xml is not None or args.summary_json is not None,
    )
    try:
        discover_inputs(args.events)  # usage errors before paying for a JVM
    except InputError as exc:
        print(f"group-replay validate: {exc}", file=sys.stderr)
        return EXIT_INPUT
    out = Console()
    with StageProgress(console, enabled=args.progress == "on") as progress:
        with progress.stage("start Spark"):
            spark = build_session(None if master_from_submit else args.master)
        try:
            data = run_validate(spark, options, progress.stage)
        except InputError as exc:
            print(f"group-replay validate: {exc}", file=sys.stderr)
            return EXIT_INPUT
        if args.report is not None:
            with progress.stage(f"write report {args.report}"):
                args.report.parent.mkdir(parents=True, exist_ok=True)
                args.report.write_text(render_html(data), encoding="utf-8")
    print_summary(out, data)
    code = EXIT_DIFFERENCES if data.failing else EXIT_OK
    if data.rows_bad > args.max_bad_rows:
        print(
            f"group-replay validate: {data.rows_bad} bad input rows (more than --max-bad-rows "
            f"{args.max_bad_rows}); see the bad_rows table and the report",
            file=sys.stderr,
        )
        code = EXIT_INPUT
    if data.all_comparisons is not None:
        from validator.ci_outputs import write_validate_outputs

        write_validate_outputs(
            args.junit_xml, args.summary_json, data.all_comparisons, code,
            expected_run=data.expected_run, inputs=data.inputs, rows_total=data.rows_total,
            rows_bad=data.rows_bad, status_counts=data.status_counts, diffs=data.diffs_total,
        )  # fmt: skip
    return code


def main(argv: list[str] | None = None) -> int:
    return run(list(sys.argv[1:] if argv is None else argv))
