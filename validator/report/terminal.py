"""Rich progress for the job stages and the terminal summary tables."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from validator.jobs import ReportData
from validator.report.html import compared_label, comparisons_made, members_named, run_sort_key

STATUS_STYLE = {"pass": "green", "differs": "yellow", "failed": "bold red", "not run": "magenta"}


class StageProgress:
    """One rich progress line per job stage (spinner while Spark works, elapsed time when done).

    With `enabled=False` (`--progress off`, CI) it prints nothing.
    """

    def __init__(self, console: Console, *, enabled: bool) -> None:
        self._enabled = enabled
        self._progress = Progress(
            SpinnerColumn(finished_text="[green]✓"),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        )
        self.timings: list[tuple[str, float]] = []

    def __enter__(self) -> StageProgress:
        if self._enabled:
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._enabled:
            self._progress.stop()

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        task = self._progress.add_task(name, total=1) if self._enabled else None
        try:
            yield
        finally:
            self.timings.append((name, time.perf_counter() - started))
            if task is not None:
                self._progress.update(task, completed=1)


def print_summary(console: Console, data: ReportData) -> None:
    """Inputs, bad rows, what was compared with what, the matrix and the worst comparisons."""
    head = Table(title="group-replay validate", show_header=False, title_justify="left")
    head.add_row("expected run", f"{data.expected_run} (per scenario, see below)")
    head.add_row("runs", ", ".join(data.runs))
    head.add_row("event rows", f"{data.rows_total:,}")
    head.add_row("bad rows", f"[red]{data.rows_bad:,}[/red]" if data.rows_bad else "0")
    statuses = ", ".join(f"[{STATUS_STYLE[s]}]{s} {data.status_counts.get(s, 0)}[/]" for s in STATUS_STYLE)
    head.add_row("comparisons", f"{data.comparisons} ({statuses})")
    head.add_row("differences", f"{data.diffs_total:,} (+{data.noise_total:,} labelled noise)")
    if data.tables_written:
        head.add_row("parquet tables", ", ".join(data.tables_written))
    console.print(head)

    if data.bad_by_reason:
        bad = Table(title="bad rows (not used, see bad_rows table)", title_justify="left")
        bad.add_column("reason")
        bad.add_column("rows", justify="right")
        for reason, count in sorted(data.bad_by_reason.items(), key=lambda kv: -kv[1]):
            bad.add_row(reason, f"{count:,}")
        console.print(bad)

    compared = Table(title="what was compared", title_justify="left")
    for column in ("scenario", "observed run", "compared with", "sessions"):
        compared.add_column(column)
    for scenario, expected, observed, sessions in comparisons_made(data.matrix):
        compared.add_row(scenario, observed, expected, f"{sessions:,}")
    console.print(compared)
    console.print(matrix_table(data))

    failing = [w for w in data.worst if w["status"] != "pass"]
    if failing:
        worst = Table(title=f"worst comparisons (top {len(failing)})", title_justify="left", expand=True)
        worst.add_column("session/group (scenario)", overflow="fold", ratio=2)
        worst.add_column("compared", overflow="fold", ratio=2)
        worst.add_column("status", overflow="fold", ratio=1)
        worst.add_column("member_key", overflow="fold", ratio=2)
        worst.add_column("why", overflow="fold", ratio=4)
        for w in failing:
            delta = w["rebalance_count_delta"]
            status = f"[{STATUS_STYLE[w['status']]}]{w['status']}[/] ({w['diffs']})"
            if delta:
                status += f" Δ{delta:+d}"
            worst.add_row(
                f"{w['session_id']}/{w['group_id']} ({w['scenario']})",
                compared_label(w["expected_run"], w["observed_run"]),
                status,
                ", ".join(members_named(w)),
                w.get("explanation") or w["worst_aspect"] or "",
            )
        console.print(worst)
    print_migration(console, data)


MIGRATION_GROUPS_IN_TERMINAL = 6
MIGRATION_COLUMNS = (
    ("run", 2),
    ("step", 1),
    ("from s", 1),
    ("switched", 3),
    ("group type", 2),
    ("classic rejoins (most)", 3),
    ("moved", 1),
    ("longest without partitions", 3),
)


def print_migration(console: Console, data: ReportData) -> None:
    """The protocol migration step by step (validator.migration), per group and run: who switched,
    the group's type, the most JoinGroups a remaining classic member sent and by whom (the
    rebalance-storm risk), partitions moved and the longest time a member held nothing."""
    shown = list(data.migration_steps.items())[:MIGRATION_GROUPS_IN_TERMINAL]
    for (session_id, scenario, group_id), steps in shown:
        table = Table(
            title=f"migration steps - {session_id}/{group_id} ({scenario})", title_justify="left", expand=True
        )
        for column, ratio in MIGRATION_COLUMNS:
            table.add_column(column, overflow="fold", ratio=ratio)
        ordered = sorted(
            steps, key=lambda s: (s["run"].split("~")[0] != data.expected_run, run_sort_key(s["run"]))
        )
        for s in sorted(ordered, key=lambda s: s["step"]):
            most = max(s["rejoins"] or [], key=lambda r: (r["rejoins"], r["member_key"]), default=None)
            gap = max(
                s["unassigned"] or [], key=lambda u: (u["unassigned_ms"], u["member_key"]), default=None
            )
            table.add_row(
                escape(s["run"]),
                str(s["step"]),
                f"{(s['start_ms'] or 0) / 1000:.1f}",
                escape(", ".join(s["switched"] or []) or "-"),
                escape(s["group_type"] or "-"),
                escape(f"{most['rejoins']} ({most['member_key']})") if most else "0",
                str(s["partitions_moved"]),
                escape(f"{gap['unassigned_ms'] / 1000:.1f}s ({gap['member_key']})") if gap else "0",
            )
        console.print(table)
    if data.migration_groups > len(shown):
        console.print(
            f"migration steps: {len(shown)} of {data.migration_groups} groups shown; every one is in the "
            "HTML report (up to 30) and the migration_steps table (--out)"
        )


def matrix_table(data: ReportData) -> Table:
    """scenario x client rows, one column per observed run, cells `pass/differs/failed/not run`."""
    runs = sorted({c["observed_run"] for c in data.matrix}, key=run_sort_key)
    cells = {
        (c["scenario"], c["client"], c.get("protocol") or "classic", c["observed_run"]): c
        for c in data.matrix
    }
    expected_of = {c["scenario"]: c.get("expected_run") or "" for c in data.matrix}
    table = Table(
        title="compatibility matrix (sessions pass/differs/failed/not run)",
        title_justify="left",
        show_lines=False,
    )
    table.add_column("scenario (vs)", overflow="fold")
    table.add_column("client", overflow="fold")
    table.add_column("protocol", overflow="fold")
    for run in runs:
        table.add_column(run, justify="center", overflow="fold")
    for scenario, client, protocol in sorted({(s, c, p) for s, c, p, _ in cells}):
        row = [f"{scenario} (vs {expected_of[scenario]})", client, protocol]
        for run in runs:
            cell = cells.get((scenario, client, protocol, run))
            if cell is None:
                row.append("")
                continue
            not_run = cell.get("not_run") or 0
            style = (
                "bold red"
                if cell["failed"]
                else ("magenta" if not_run else ("yellow" if cell["differs"] else "green"))
            )
            row.append(f"[{style}]{cell['passed']}/{cell['differs']}/{cell['failed']}/{not_run}[/]")
        table.add_row(*row)
    return table
