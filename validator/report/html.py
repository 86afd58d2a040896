"""The self-contained HTML report: summary, matrix heatmap, worst comparisons, session timelines.

Plots are hand-written inline SVG (no JavaScript, no network, no plotting dependency), so the file
opens anywhere and can be attached to a ticket as is.
"""

from __future__ import annotations

import re
from html import escape
from typing import Any

from kio.schema.errors import ErrorCode

from validator.jobs import ReportData, SectionKey, session_anchor
from validator.migration import MIGRATION_ASPECTS

PASS, DIFFERS, FAILED, NOISE, NOT_RUN = "#2f9e5a", "#e8a33a", "#c8413b", "#8a8fa3", "#7d4fb0"
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
.notrun{color:#6a3d9a;font-weight:bold}
table.matrix th.run{max-width:130px;overflow-wrap:anywhere} table.matrix th.label{max-width:260px;
overflow-wrap:anywhere;font-weight:normal;text-align:left}
table.matrix td.cell{text-align:center;min-width:90px} table.matrix td.cell a{color:inherit}
td.cell.pass,.chip.pass{background:#2f9e5a;color:#fff} td.cell.differs,.chip.differs{background:#e8a33a}
td.cell.failed,.chip.failed{background:#c8413b;color:#fff}
td.cell.notrun,.chip.notrun{background:#7d4fb0;color:#fff}
td.cell.empty{background:#eef0f4;color:#99a} .chip{padding:0 6px;border-radius:3px}
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


def _cell_status(cell: dict[str, Any]) -> str:
    if cell["failed"]:
        return "failed"
    if cell.get("not_run"):
        return "notrun"
    if cell["differs"]:
        return "differs"
    return "pass"


def _protocol(cell: dict[str, Any]) -> str:
    """A matrix cell's protocol axis (`classic` for tables written before it existed)."""
    return cell.get("protocol") or "classic"


def compared_label(expected_run: str, observed_run: str) -> str:
    """What a comparison compared, as the report and the terminal say it."""
    return f"{observed_run} vs {expected_run}"


def matrix_html(matrix: list[dict[str, Any]]) -> str:
    """Heatmap as an HTML table: rows scenario/client, columns observed runs (their names carry the
    broker version). Labels are table cells, so long names wrap instead of overlapping."""
    if not matrix:
        return "<p class='muted'>no comparisons</p>"
    columns = sorted({c["observed_run"] for c in matrix}, key=run_sort_key)
    rows = sorted({(c["scenario"], c["client"], _protocol(c)) for c in matrix})
    by_key = {(c["scenario"], c["client"], _protocol(c), c["observed_run"]): c for c in matrix}
    expected_of = {c["scenario"]: c.get("expected_run") or "" for c in matrix}
    out = ["<table class='matrix'><tr><th>scenario (compared with)</th><th>client</th><th>protocol</th>"]
    out += [f"<th class='run'>{escape(run)}</th>" for run in columns]
    out.append("</tr>")
    for scenario, client, protocol in rows:
        out.append(
            f"<tr><th class='label'>{escape(scenario)}<br><span class='muted'>vs "
            f"{escape(expected_of[scenario])}</span></th><th class='label'>{escape(client)}</th>"
            f"<th class='label'>{escape(protocol)}</th>"
        )
        for run in columns:
            cell = by_key.get((scenario, client, protocol, run))
            if cell is None:
                out.append("<td class='cell empty'>—</td>")
                continue
            status = _cell_status(cell)
            counts = f"{cell['passed']} / {cell['differs']} / {cell['failed']} / {cell.get('not_run') or 0}"
            tip = (
                f"{scenario} | {client} | {protocol} | {compared_label(expected_of[scenario], run)}: "
                f"{cell['sessions']} sessions, pass {cell['passed']}, differs {cell['differs']}, "
                f"failed {cell['failed']}, not run {cell.get('not_run') or 0}, "
                f"noise diffs {cell['noise_diffs']}"
            )
            body = f"<b>{counts}</b>"
            if cell.get("partitions_moved") is not None:
                body += (
                    f"<br><small>moved {cell['partitions_moved']:,} "
                    f"(expected {cell.get('expected_partitions_moved') or 0:,})</small>"
                )
            if cell["worst_aspect"]:
                body += f"<br><small>{escape(cell['worst_aspect'])}</small>"
            if cell["worst_session"]:
                anchor = session_anchor(cell["worst_session"], scenario, cell["worst_group"])
                body = f"<a href='#{anchor}'>{body}</a>"
            out.append(f"<td class='cell {status}' title='{escape(tip)}'>{body}</td>")
        out.append("</tr>")
    out.append("</table>")
    out.append(
        "<p class='muted'>cell: sessions pass / differ / failed / not run; partitions moved between "
        "members (state shuffle) in the observed runs, and in the expected runs; "
        "<span class='chip pass'>all pass</span> <span class='chip differs'>some differ</span> "
        "<span class='chip notrun'>some not run</span> <span class='chip failed'>some failed</span>; "
        "click a cell for its worst session.</p>"
    )
    return "".join(out)


def timeline_svg(
    rebalances: list[dict[str, Any]],
    expected_run: str,
    verdicts: dict[str, dict[str, Any]],
    not_run: dict[str, str] | None = None,
) -> str:
    """One lane per run: a dot per completed generation at its time, labelled with its ordinal.

    Observed runs that differ show their dots from the first divergent generation on in red; a run
    that could not be carried out gets a lane saying so, with the reason.
    """
    not_run = not_run or {}
    runs = sorted(
        {r["run"] for r in rebalances} | set(not_run),
        key=lambda run: (run.split("~")[0] != expected_run, run_sort_key(run)),
    )
    if not runs:
        return "<p class='muted'>no completed generations in any run</p>"
    max_ts = max((r["ts_ms"] or 0) for r in rebalances) if rebalances else 1
    max_ts = max_ts or 1
    label_w = max(110, 16 + 7 * max(len(run) for run in runs))
    plot_w, lane_h, top = 760, 30, 26
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
        elif run in not_run:
            colour = NOT_RUN
        elif verdict is None:
            colour = NOISE  # a repeat used only to measure noise, or not compared in this scenario
        else:
            colour = PASS if verdict["status"] == "pass" else DIFFERS
        out.append(
            f"<text class='lane' x='{label_w - 10}' y='{y + 4}' text-anchor='end' fill='{colour}' "
            f"font-weight='bold'>{escape(run)}</text>"
        )
        out.append(f"<line x1='{label_w}' x2='{label_w + plot_w}' y1='{y}' y2='{y}' stroke='#c9ced9'/>")
        if run in not_run:
            out.append(
                f"<text x='{label_w + 8}' y='{y - 4}' fill='{NOT_RUN}' font-style='italic'>"
                f"not run: {escape(_clip(not_run[run], 110))}</text>"
            )
            continue
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


def churn_svg(rebalances: list[dict[str, Any]], expected_run: str) -> str:
    """Partitions moved per generation (state shuffle), one lane of bars per run, so runs can be
    compared generation by generation (a rolling bounce is one generation per step)."""
    runs = sorted(
        {r["run"] for r in rebalances},
        key=lambda run: (run.split("~")[0] != expected_run, run_sort_key(run)),
    )
    if not runs:
        return ""
    ordinals = max(int(r["ordinal"]) for r in rebalances)
    peak = max((int(r.get("partitions_moved") or 0) for r in rebalances), default=0) or 1
    label_w = max(110, 16 + 7 * max(len(run) for run in runs))
    slot_w, lane_h, top = max(14, min(60, 760 // max(1, ordinals))), 34, 20
    width, height = label_w + slot_w * ordinals + 120, top + lane_h * len(runs) + 24
    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} font-size='11'>",
        f"<text x='4' y='12' fill='#445'>partitions moved per generation (max {peak})</text>",
    ]
    for lane, run in enumerate(runs):
        base = top + (lane + 1) * lane_h - 6
        colour = EXPECTED if run == expected_run else DIFFERS
        out.append(
            f"<text class='lane' x='{label_w - 10}' y='{base}' text-anchor='end' fill='{colour}'>"
            f"{escape(run)}</text>"
        )
        out.append(
            f"<line x1='{label_w}' x2='{label_w + slot_w * ordinals}' y1='{base}' y2='{base}' "
            "stroke='#c9ced9'/>"
        )
        points = [r for r in rebalances if r["run"] == run]
        for point in points:
            moved = int(point.get("partitions_moved") or 0)
            bar = (lane_h - 12) * moved / peak
            x = label_w + slot_w * (int(point["ordinal"]) - 1) + 2
            tip = (
                f"{run}: generation #{point['ordinal']} moved {moved} partitions, "
                f"pause {point.get('pause_ms')} ms"
            )
            out.append(
                f"<rect x='{x}' y='{base - bar:.1f}' width='{slot_w - 4}' height='{bar:.1f}' fill='{colour}'>"
                f"<title>{escape(tip)}</title></rect>"
            )
        total = sum(int(p.get("partitions_moved") or 0) for p in points)
        out.append(
            f"<text x='{label_w + slot_w * ordinals + 10}' y='{base}' fill='#445'>{total} moved</text>"
        )
    out.append("</svg>")
    return "".join(out)


def _ordinal(diff: dict[str, Any]) -> str:
    """A difference's generation (`#2`), or its migration step (`step 2`, validator.migration)."""
    if diff["aspect"] in MIGRATION_ASPECTS:
        return f"step {diff['ordinal']}"
    return "" if not diff["ordinal"] else f"#{diff['ordinal']}"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _status(status: str) -> str:
    css = "notrun" if status == "not run" else status
    return f"<span class='{escape(css)}'>{escape(status)}</span>"


def _list(values: list[str] | None) -> str:
    return escape(", ".join(values or []))


def _churn(members: list[dict[str, Any]] | None) -> str:
    return ", ".join(
        f"{m['member_key']} {(m['unassigned_ms'] or 0) / 1000:.1f}s ({m['moved']})" for m in members or []
    )


def error_label(code: int) -> str:
    """`82` -> `fenced_instance_id(82)` (names from kio's ErrorCode, the one source)."""
    try:
        return f"{ErrorCode(code).name}({code})"
    except ValueError:
        return f"unknown({code})"


def members_named(verdict: dict[str, Any]) -> list[str]:
    """Every member_key a comparison's differences name."""
    names: set[str] = set()
    for column in ("members_changed", "unexpected_fenced", "unexpected_expired"):
        names.update(verdict.get(column) or [])
    names.update(change.split(":", 1)[0] for change in verdict.get("error_changes") or [])
    return sorted(names)


def _cards(data: ReportData) -> list[str]:
    bad_class = "failed" if data.rows_bad else "pass"
    verdict = "pass"
    for status in ("differs", "not run", "failed"):
        if data.status_counts.get(status):
            verdict = status
    parts = [
        "<div class='cards'>",
        f"<div class='card'>verdict<b>{_status(verdict)}</b></div>",
        f"<div class='card'>comparisons<b>{data.comparisons}</b></div>",
    ]
    for status in ("pass", "differs", "failed", "not run"):
        css = "notrun" if status == "not run" else status
        parts.append(
            f"<div class='card'>{status}<b class='{css}'>{data.status_counts.get(status, 0)}</b></div>"
        )
    parts += [
        f"<div class='card'>differences<b>{data.diffs_total:,}</b></div>",
        f"<div class='card'>noise (ignored)<b class='noise'>{data.noise_total:,}</b></div>",
        f"<div class='card'>event rows<b>{data.rows_total:,}</b></div>",
        f"<div class='card'>bad rows<b class='{bad_class}'>{data.rows_bad:,}</b></div>",
        "</div>",
    ]
    return parts


def _bad_rows(data: ReportData) -> list[str]:
    if not data.rows_bad:
        return []
    parts = ["<h2>Bad input rows</h2><p>Counted and left out of the comparison.</p><table>"]
    parts.append("<tr><th>reason</th><th>rows</th></tr>")
    for reason, count in sorted(data.bad_by_reason.items(), key=lambda kv: -kv[1]):
        parts.append(f"<tr><td>{escape(reason)}</td><td class='num'>{count:,}</td></tr>")
    parts.append("</table><h3>Samples</h3><table><tr><th>file</th><th>reason</th><th>row</th></tr>")
    for sample in data.bad_samples:
        row = (
            sample.get("_corrupt_record")
            or f"session {sample['session_id']} run {sample['run']} seq {sample['seq']} "
            f"event {sample['event']}"
        )
        parts.append(
            f"<tr><td>{escape(str(sample['source_file']))}</td><td>{escape(sample['bad_reason'])}</td>"
            f"<td><code>{escape(str(row)[:200])}</code></td></tr>"
        )
    parts.append("</table>")
    return parts


def comparisons_made(matrix: list[dict[str, Any]]) -> list[tuple[str, str, str, int]]:
    """(scenario, expected run, observed run, sessions): what was compared with what."""
    made: dict[tuple[str, str, str], int] = {}
    for cell in matrix:
        key = (cell["scenario"], cell.get("expected_run") or "", cell["observed_run"])
        made[key] = made.get(key, 0) + int(cell["sessions"])
    return sorted(((s, e, o, n) for (s, e, o), n in made.items()), key=lambda r: (r[0], run_sort_key(r[2])))


def _compared_table(data: ReportData) -> list[str]:
    parts = [
        "<h2>What was compared</h2><p class='muted'>Per scenario, every run is compared with the "
        "reference replaying that same scenario; <code>recorded</code> (the capture as it ran) only "
        "with as-recorded runs. Repeats (<code>X~2</code>) only measure noise.</p>",
        "<table><tr><th>scenario</th><th>observed run</th><th>compared with</th><th>sessions</th></tr>",
    ]
    for scenario, expected, observed, sessions in comparisons_made(data.matrix):
        parts.append(
            f"<tr><td>{escape(scenario)}</td><td>{escape(observed)}</td><td>{escape(expected)}</td>"
            f"<td class='num'>{sessions:,}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _worst_table(data: ReportData) -> list[str]:
    failing = [w for w in data.worst if w["status"] != "pass"]
    parts = ["<h2>Worst differences</h2>"]
    if not failing:
        return [*parts, "<p class='pass'>No differences beyond noise.</p>"]
    if data.failing > len(failing):
        parts.append(
            f"<p class='muted'>The {len(failing)} worst of {data.failing:,} comparisons that did not "
            "pass; every comparison is in the <code>session_verdicts</code> table and every difference "
            "in <code>rebalance_diff</code> (--out).</p>"
        )
    parts.append(
        "<table><tr><th>session / group</th><th>scenario</th><th>compared</th><th>status</th>"
        "<th>diffs</th><th>first divergent generation</th><th>Δ rebalances</th><th>member_key</th>"
        "<th>why</th></tr>"
    )
    for w in failing:
        anchor = session_anchor(w["session_id"], w["scenario"], w["group_id"])
        delta = w["rebalance_count_delta"]
        first = w["first_divergent_ordinal"]
        parts.append(
            f"<tr><td class='key'><a href='#{anchor}'>"
            f"{escape(w['session_id'])} / {escape(w['group_id'])}</a></td>"
            f"<td>{escape(w['scenario'])}</td>"
            f"<td class='key'>{escape(compared_label(w['expected_run'], w['observed_run']))}</td>"
            f"<td>{_status(w['status'])}</td><td class='num'>{w['diffs']}</td>"
            f"<td class='num'>{'' if first is None else f'#{first}'}</td>"
            f"<td class='num'>{'' if delta is None else f'{delta:+d}'}</td>"
            f"<td>{_list(members_named(w))}</td>"
            f"<td>{escape(w.get('explanation') or w['worst_aspect'] or '')}</td></tr>"
        )
    parts.append("</table>")
    return parts


def _section(data: ReportData, key: SectionKey, verdict_rows: list[dict[str, Any]]) -> list[str]:
    session_id, scenario, group_id = key
    verdicts = {v["observed_run"]: v for v in verdict_rows}
    summaries = data.run_summaries.get(key, [])
    not_run = {r["run"]: r["not_run_detail"] for r in summaries if r.get("not_run_detail")}
    expected = verdict_rows[0]["expected_run"]
    parts = [
        f"<section class='session' id='{session_anchor(session_id, scenario, group_id)}'>",
        f"<h3>{escape(session_id)} / {escape(group_id)} <span class='muted'>scenario "
        f"{escape(scenario)}</span></h3>",
        "<table><tr><th>compared</th><th>status</th><th>diffs</th><th>why</th></tr>",
    ]
    for v in verdict_rows:
        parts.append(
            f"<tr id='{session_anchor(session_id, scenario, group_id, v['observed_run'])}'>"
            f"<td class='key'>{escape(compared_label(v['expected_run'], v['observed_run']))}</td>"
            f"<td>{_status(v['status'])}</td><td class='num'>{v['diffs']}</td>"
            f"<td>{escape(v.get('explanation') or '')}</td></tr>"
        )
    parts.append("</table>")
    if summaries:
        parts.append(
            "<table><tr><th>run</th><th>rebalances</th><th>members</th><th>partitions moved</th>"
            "<th>fenced (member_key)</th><th>expired (member_key)</th><th>left (member_key)</th>"
            "<th>errors</th><th>time without partitions per member_key (moved to it)</th><th>ran?</th></tr>"
        )
        for r in summaries:
            ran = f"not run: {escape(r['not_run_detail'])}" if r.get("not_run_detail") else "yes"
            parts.append(
                f"<tr><td class='key'>{escape(r['run'])}</td><td class='num'>{r['rebalance_count']}</td>"
                f"<td class='num'>{r['members']}</td><td class='num'>{r.get('partitions_moved') or 0}</td>"
                f"<td>{_list(r['fenced'])}</td>"
                f"<td>{_list(r['expired'])}</td><td>{_list(r['left'])}</td>"
                f"<td>{escape(', '.join(error_label(c) for c in r['error_codes'] or []))}</td>"
                f"<td>{escape(_churn(r.get('member_churn')))}</td>"
                f"<td class='{'notrun' if r.get('not_run_detail') else ''}'>{ran}</td></tr>"
            )
        parts.append("</table>")
    parts.append(timeline_svg(data.timelines.get(key, []), expected, verdicts, not_run))
    parts.append(churn_svg(data.timelines.get(key, []), expected))
    diffs = data.session_diffs.get(key, [])
    if diffs:
        parts.append(
            "<table><tr><th>compared</th><th>aspect</th><th>member_key</th><th>generation / step</th>"
            "<th>expected</th><th>observed</th><th>change</th><th>cause</th><th>next step</th></tr>"
        )
        for d in diffs:
            parts.append(
                f"<tr class='{'noise' if d['is_noise'] else ''}'>"
                f"<td class='key'>{escape(compared_label(d['expected_run'], d['observed_run']))}</td>"
                f"<td>{escape(d['aspect'])}</td><td>{escape(d['subject'] or '')}</td>"
                f"<td class='num'>{_ordinal(d)}</td>"
                f"<td>{escape(d['expected_value'] or '—')}</td>"
                f"<td>{escape(d['observed_value'] or '—')}</td>"
                f"<td>{escape(d['change'])}</td><td>{escape(d.get('cause') or '')}</td>"
                f"<td>{escape(d.get('next_step') or '')}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</section>")
    return parts


def render_html(data: ReportData) -> str:
    """The whole report as one HTML string."""
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        "<title>group-replay compatibility report</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>group-replay compatibility report</h1>",
        f"<p class='muted'>expected run <code>{escape(data.expected_run)}</code> (per scenario: see "
        f"below); inputs {escape(', '.join(data.inputs))}; runs {escape(', '.join(data.runs))}</p>",
        *_cards(data),
        *_bad_rows(data),
        *_compared_table(data),
        "<h2>Compatibility matrix</h2>",
        "<p class='muted'>scenario, client, protocol (what the group's members spoke: "
        "<code>classic -&gt; consumer</code> is a migration) and observed run (its name carries the "
        "broker version). Each "
        "cell counts sessions (one group each) that pass, differ, failed or could not be run.</p>",
        matrix_html(data.matrix),
        *_worst_table(data),
        "<h2>Sessions</h2>",
        "<p class='muted'>One section per session, scenario and group. Rebalance timelines: one lane "
        "per run, a dot per completed generation (labelled with its ordinal) at its time since the "
        "session started. Blue: expected run; grey: repeats or runs not compared in this scenario; "
        "red: from the first divergent generation on.</p>",
    ]
    for key, verdict_rows in data.session_verdicts.items():
        parts += _section(data, key, verdict_rows)
    from validator.report.migration_html import migration_html  # it imports this module

    parts += migration_html(data)
    parts.append("</body></html>")
    return "\n".join(parts)
