"""The self-contained HTML report: summary, matrix heatmap, worst comparisons, session timelines.

Plots are hand-written inline SVG (no JavaScript, no network, no plotting dependency), so the file
opens anywhere and can be attached to a ticket as is.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from validator.jobs import ReportData, session_anchor

PASS, DIFFERS, FAILED, NOISE = "#2f9e5a", "#e8a33a", "#c8413b", "#8a8fa3"
EXPECTED = "#2f5fa8"
FONT = "font-family='DejaVu Sans, Helvetica, Arial, sans-serif'"

CSS = """
body{font-family:'DejaVu Sans',Helvetica,Arial,sans-serif;margin:24px;color:#1d2330;max-width:1320px}
h1{font-size:24px;margin:0 0 4px} h2{font-size:19px;margin:28px 0 8px;border-bottom:1px solid #d6dae3}
h3{font-size:15px;margin:18px 0 6px} .muted{color:#667}
table{border-collapse:collapse;font-size:13px;margin:6px 0}
th,td{border:1px solid #d6dae3;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f0f2f6} td.num{text-align:right}
.pass{color:#1f7a44;font-weight:bold} .differs{color:#a86200;font-weight:bold}
.failed{color:#b0302a;font-weight:bold} .noise{color:#8a8fa3}
.cards{display:flex;gap:12px;flex-wrap:wrap}
.card{border:1px solid #d6dae3;border-radius:6px;padding:8px 14px}
.card b{display:block;font-size:22px} section.session{border-top:1px dashed #d6dae3;margin-top:18px}
code{background:#f3f4f7;padding:0 3px} td.key{white-space:nowrap}
"""


def run_sort_key(run: str) -> tuple[int, list[Any], str]:
    """Non-broker runs first, then brokers by version number; repeats after their run."""
    base, _, attempt = run.partition("~")
    version = re.fullmatch(r"broker-(.+)", base)
    parts: list[Any] = (
        [int(p) if p.isdigit() else p for p in re.split(r"[.\-]", version.group(1))] if version else []
    )
    return (
        1 if version else 0,
        [(0, p) if isinstance(p, int) else (1, p) for p in parts],
        f"{base}~{attempt or 1}",
    )


def _cell_colour(cell: dict[str, Any]) -> str:
    if cell["failed"]:
        return FAILED
    if cell["differs"]:
        return DIFFERS
    return PASS


def _cell_opacity(cell: dict[str, Any]) -> float:
    bad = (cell["differs"] + cell["failed"]) / max(1, cell["sessions"])
    return 1.0 if not bad else 0.45 + 0.55 * bad


def matrix_svg(matrix: list[dict[str, Any]]) -> str:
    """Heatmap: rows scenario/client, columns observed runs; colour = worst status, depth = share."""
    if not matrix:
        return "<p class='muted'>no comparisons</p>"
    columns = sorted({c["observed_run"] for c in matrix}, key=run_sort_key)
    rows = sorted({(c["scenario"], c["client"]) for c in matrix})
    by_key = {(c["scenario"], c["client"], c["observed_run"]): c for c in matrix}
    label_w, cell_w, cell_h, head_h = 380, 132, 44, 40
    width = label_w + cell_w * len(columns) + 10
    height = head_h + cell_h * len(rows) + 56
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} font-size='12'>"
    ]
    for x, run in enumerate(columns):
        cx = label_w + x * cell_w + cell_w / 2
        out.append(
            f"<text x='{cx}' y='{head_h - 12}' text-anchor='middle' font-weight='bold'>{escape(run)}</text>"
        )
    previous_scenario = None
    for y, (scenario, client) in enumerate(rows):
        top = head_h + y * cell_h
        if scenario != previous_scenario:
            out.append(f"<line x1='0' x2='{width}' y1='{top}' y2='{top}' stroke='#9aa1b2'/>")
            out.append(f"<text x='4' y='{top + 27}' font-weight='bold'>{escape(scenario)}</text>")
            previous_scenario = scenario
        out.append(f"<text x='{label_w - 8}' y='{top + 27}' text-anchor='end'>{escape(client)}</text>")
        for x, run in enumerate(columns):
            left = label_w + x * cell_w
            cell = by_key.get((scenario, client, run))
            if cell is None:
                out.append(
                    f"<rect x='{left + 2}' y='{top + 2}' width='{cell_w - 4}' height='{cell_h - 4}' "
                    "fill='#eef0f4'/>"
                )
                continue
            text = f"{cell['passed']} / {cell['differs']} / {cell['failed']}"
            ink = "#2a1a00" if _cell_colour(cell) == DIFFERS else "#fff"
            tip = (
                f"{scenario} | {client} | {run}: {cell['sessions']} sessions, pass {cell['passed']}, "
                f"differs {cell['differs']}, failed {cell['failed']}, noise diffs {cell['noise_diffs']}"
                + (
                    f", worst: {cell['worst_aspect']} in {cell['worst_session']}"
                    if cell["worst_aspect"]
                    else ""
                )
            )
            rect = (
                f"<rect x='{left + 2}' y='{top + 2}' width='{cell_w - 4}' height='{cell_h - 4}' rx='3' "
                f"fill='{_cell_colour(cell)}' fill-opacity='{_cell_opacity(cell):.2f}'>"
                f"<title>{escape(tip)}</title></rect>"
                f"<text x='{left + cell_w / 2}' y='{top + 19}' text-anchor='middle' fill='{ink}' "
                f"font-weight='bold'>{text}</text>"
            )
            if cell["worst_aspect"]:
                rect += (
                    f"<text x='{left + cell_w / 2}' y='{top + 34}' text-anchor='middle' fill='{ink}' "
                    f"font-size='10'>{escape(cell['worst_aspect'])}</text>"
                )
            if cell["worst_session"]:
                rect = f"<a href='#{session_anchor(cell['worst_session'], cell['worst_group'])}'>{rect}</a>"
            out.append(rect)
    legend_y = head_h + cell_h * len(rows) + 22
    out.append(f"<text x='4' y='{legend_y + 12}'>cell: pass / differs / failed sessions</text>")
    for i, (name, colour) in enumerate(
        (("all pass", PASS), ("some differ", DIFFERS), ("some failed", FAILED))
    ):
        lx = label_w + i * 130
        out.append(f"<rect x='{lx}' y='{legend_y}' width='16' height='16' rx='3' fill='{colour}'/>")
        out.append(f"<text x='{lx + 22}' y='{legend_y + 12}'>{name}</text>")
    out.append("</svg>")
    return "".join(out)


def timeline_svg(
    rebalances: list[dict[str, Any]], expected_run: str, verdicts: dict[str, dict[str, Any]]
) -> str:
    """One lane per run: a dot per completed generation at its time, labelled with its ordinal.

    Observed runs that differ show their dots from the first divergent generation on in red.
    """
    runs = sorted(
        {r["run"] for r in rebalances},
        key=lambda run: (run.split("~")[0] != expected_run, run_sort_key(run)),
    )
    if not runs:
        return "<p class='muted'>no completed generations in any run</p>"
    max_ts = max((r["ts_ms"] or 0) for r in rebalances) or 1
    label_w, plot_w, lane_h, top = 150, 760, 30, 26
    width, height = label_w + plot_w + 110, top + lane_h * len(runs) + 30
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} font-size='12'>"
    ]
    for tick in range(0, 6):
        x = label_w + plot_w * tick / 5
        out.append(f"<line x1='{x}' x2='{x}' y1='{top - 6}' y2='{height - 24}' stroke='#e3e6ec'/>")
        out.append(
            f"<text x='{x}' y='{height - 8}' text-anchor='middle' fill='#667'>"
            f"{max_ts * tick / 5 / 1000:.1f}s</text>"
        )
    for lane, run in enumerate(runs):
        y = top + lane * lane_h + lane_h / 2
        points = [r for r in rebalances if r["run"] == run]
        verdict = verdicts.get(run)
        if run == expected_run:
            colour = EXPECTED
        elif verdict is None:
            colour = NOISE  # a repeat, used only to measure noise
        else:
            colour = PASS if verdict["status"] == "pass" else DIFFERS
        out.append(
            f"<text x='{label_w - 10}' y='{y + 4}' text-anchor='end' fill='{colour}' "
            f"font-weight='bold'>{escape(run)}</text>"
        )
        out.append(f"<line x1='{label_w}' x2='{label_w + plot_w}' y1='{y}' y2='{y}' stroke='#c9ced9'/>")
        first_bad = verdict["first_divergent_ordinal"] if verdict and verdict["status"] != "pass" else None
        for point in points:
            x = label_w + plot_w * (point["ts_ms"] or 0) / max_ts
            bad = first_bad is not None and point["ordinal"] >= first_bad
            fill = FAILED if bad else colour
            tip = (
                f"{run}: generation #{point['ordinal']} (raw id {point['generation_id']}) "
                f"at {point['ts_ms']} ms, "
                f"leader {point['leader']}, {point['members']} members"
            )
            out.append(
                f"<circle cx='{x:.1f}' cy='{y}' r='6' fill='{fill}'><title>{escape(tip)}</title></circle>"
            )
            out.append(
                f"<text x='{x:.1f}' y='{y - 9}' text-anchor='middle' font-size='10'>{point['ordinal']}</text>"
            )
        out.append(
            f"<text x='{label_w + plot_w + 12}' y='{y + 4}' fill='#445'>{len(points)} rebalances</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _status(status: str) -> str:
    return f"<span class='{escape(status)}'>{escape(status)}</span>"


def _list(values: list[str] | None) -> str:
    return escape(", ".join(values or []))


def render_html(data: ReportData) -> str:
    """The whole report as one HTML string."""
    bad_class = "failed" if data.rows_bad else "pass"
    verdict = "pass" if not data.failing else ("failed" if data.status_counts.get("failed") else "differs")
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>group-replay compatibility report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>group-replay compatibility report</h1>",
        f"<p class='muted'>expected run <code>{escape(data.expected_run)}</code>; inputs "
        f"{escape(', '.join(data.inputs))}; runs {escape(', '.join(data.runs))}</p>",
        "<div class='cards'>",
        f"<div class='card'>verdict<b>{_status(verdict)}</b></div>",
        f"<div class='card'>comparisons<b>{data.comparisons}</b></div>",
    ]
    for status in ("pass", "differs", "failed"):
        parts.append(
            f"<div class='card'>{status}<b class='{status}'>{data.status_counts.get(status, 0)}</b></div>"
        )
    parts += [
        f"<div class='card'>differences<b>{data.diffs_total:,}</b></div>",
        f"<div class='card'>noise (ignored)<b class='noise'>{data.noise_total:,}</b></div>",
        f"<div class='card'>event rows<b>{data.rows_total:,}</b></div>",
        f"<div class='card'>bad rows<b class='{bad_class}'>{data.rows_bad:,}</b></div>",
        "</div>",
    ]
    if data.rows_bad:
        parts.append("<h2>Bad input rows</h2><p>Counted and left out of the comparison.</p><table>")
        parts.append("<tr><th>reason</th><th>rows</th></tr>")
        for reason, count in sorted(data.bad_by_reason.items(), key=lambda kv: -kv[1]):
            parts.append(f"<tr><td>{escape(reason)}</td><td class='num'>{count:,}</td></tr>")
        parts.append("</table><h3>Samples</h3><table><tr><th>file</th><th>reason</th><th>row</th></tr>")
        for sample in data.bad_samples:
            row = (
                sample.get("_corrupt_record")
                or f"session {sample['session_id']} run {sample['run']} "
                f"seq {sample['seq']} event {sample['event']}"
            )
            parts.append(
                f"<tr><td>{escape(str(sample['source_file']))}</td><td>{escape(sample['bad_reason'])}</td>"
                f"<td><code>{escape(str(row)[:200])}</code></td></tr>"
            )
        parts.append("</table>")

    parts.append("<h2>Compatibility matrix</h2>")
    parts.append(
        "<p class='muted'>scenario, client and observed run (broker version). Each cell counts sessions "
        "(one group each) that pass, differ or failed against the expected run; click a cell for its worst "
        "session.</p>"
    )
    parts.append(matrix_svg(data.matrix))

    failing = [w for w in data.worst if w["status"] != "pass"]
    parts.append("<h2>Worst differences</h2>")
    if not failing:
        parts.append("<p class='pass'>No differences beyond noise.</p>")
    else:
        parts.append(
            "<table><tr><th>session / group</th><th>scenario</th><th>observed</th><th>status</th>"
            "<th>diffs</th><th>first divergent generation</th><th>Δ rebalances</th><th>worst</th>"
            "<th>assignment changed</th>"
            "<th>unexpected fenced</th><th>unexpected expired</th><th>error codes</th></tr>"
        )
        for w in failing:
            anchor = session_anchor(w["session_id"], w["group_id"])
            delta = w["rebalance_count_delta"]
            first = w["first_divergent_ordinal"]
            parts.append(
                f"<tr><td class='key'><a href='#{anchor}'>"
                f"{escape(w['session_id'])} / {escape(w['group_id'])}</a></td>"
                f"<td>{escape(w['scenario'])}</td><td>{escape(w['observed_run'])}</td><td>{_status(w['status'])}</td>"
                f"<td class='num'>{w['diffs']}</td>"
                f"<td class='num'>{'' if first is None else f'#{first}'}</td>"
                f"<td class='num'>{'' if delta is None else f'{delta:+d}'}</td>"
                f"<td>{escape(w['worst_aspect'] or '')}</td>"
                f"<td>{_list(w['members_changed'])}</td><td>{_list(w['unexpected_fenced'])}</td>"
                f"<td>{_list(w['unexpected_expired'])}</td><td>{_list(w['error_changes'])}</td></tr>"
            )
        parts.append("</table>")

    parts.append("<h2>Sessions</h2>")
    parts.append(
        "<p class='muted'>Rebalance timelines: one lane per run, a dot per completed generation "
        "(labelled with its ordinal) at its time since the session started. Blue: expected run; grey: "
        "repeats used to measure noise; red: from the first divergent generation on.</p>"
    )
    for anchor, session_verdicts in data.session_verdicts.items():
        w = session_verdicts[0]
        verdicts = {v["observed_run"]: v for v in session_verdicts}
        parts.append(f"<section class='session' id='{anchor}'>")
        parts.append(
            f"<h3>{escape(w['session_id'])} / {escape(w['group_id'])} "
            f"<span class='muted'>({escape(w['scenario'])})</span></h3>"
        )
        parts.append(timeline_svg(data.timelines.get(anchor, []), data.expected_run, verdicts))
        diffs = data.session_diffs.get(anchor, [])
        if diffs:
            parts.append(
                "<table><tr><th>observed</th><th>aspect</th><th>member</th><th>generation</th>"
                "<th>expected</th><th>observed value</th><th>change</th><th>noise?</th></tr>"
            )
            for d in diffs:
                parts.append(
                    f"<tr id='{session_anchor(d['session_id'], d['group_id'], d['observed_run'])}' "
                    f"class='{'noise' if d['is_noise'] else ''}'><td>{escape(d['observed_run'])}</td>"
                    f"<td>{escape(d['aspect'])}</td><td>{escape(d['subject'] or '')}</td>"
                    f"<td class='num'>{'' if not d['ordinal'] else '#' + str(d['ordinal'])}</td>"
                    f"<td>{escape(d['expected_value'] or '—')}</td>"
                    f"<td>{escape(d['observed_value'] or '—')}</td>"
                    f"<td>{escape(d['change'])}</td><td>{'noise' if d['is_noise'] else ''}</td></tr>"
                )
            parts.append("</table>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts)
