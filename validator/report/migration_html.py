"""The report's protocol migration view: per (session, scenario, group) that saw the consumer
protocol, a table of its steps per run and a timeline plot (inline SVG, as the other plots).

Steps come from `validator.migration`: step 0 is the group before any member switched protocol,
step k begins at the k-th switch. The plot has one block per run: a band with the group's type,
then a lane per member showing when it held partitions (coloured by the protocol it spoke) and
when it was in the group holding none; dashed lines mark where each step began.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from typing import Any

from validator.jobs import ReportData, SectionKey, session_anchor
from validator.report.html import FONT, run_sort_key

CLASSIC_COLOUR, CONSUMER_COLOUR, EMPTY_COLOUR = "#2f5fa8", "#2f9e5a", "#c8413b"
BAND_COLOUR = {"classic": "#a9bfe3", "consumer": "#a7dcb9"}
MAX_MEMBER_LANES = 40
"""Member lanes drawn per run; the others are counted under the plot."""


def migration_anchor(key: SectionKey) -> str:
    return "m" + session_anchor(*key)


def _seconds(ms: int | None) -> str:
    return "-" if ms is None else f"{ms / 1000:.1f}"


def _rejoins(step: dict[str, Any]) -> str:
    counts = sorted(step.get("rejoins") or [], key=lambda r: (-r["rejoins"], r["member_key"]))
    return ", ".join(f"{r['member_key']} {r['rejoins']}" for r in counts) or "none"


def _unassigned(step: dict[str, Any]) -> str:
    gaps = sorted(step.get("unassigned") or [], key=lambda u: (-u["unassigned_ms"], u["member_key"]))
    return ", ".join(f"{u['member_key']} {_seconds(u['unassigned_ms'])}s" for u in gaps) or "none"


def steps_table(steps: list[dict[str, Any]], expected_run: str) -> str:
    """One row per run and step: who switched, the group's type at the step's end, classic
    rejoins per member, partitions moved and each member's time without partitions."""
    ordered = sorted(steps, key=lambda s: (s["step"], _run_order(s["run"], expected_run)))
    out = [
        "<table class='migration'><tr><th>step</th><th>run</th><th>from s</th><th>switched "
        "(member_key:protocol)</th><th>group type</th><th>classic rejoins (member_key count)</th>"
        "<th>partitions moved</th><th>time without partitions (member_key)</th></tr>"
    ]
    for s in ordered:
        type_text = s["group_type"] or "-"
        if s.get("conversions"):
            type_text += f" ({', '.join(s['conversions'])})"
        out.append(
            f"<tr><td class='num'>{s['step']}</td><td class='key'>{escape(s['run'])}</td>"
            f"<td class='num'>{_seconds(s['start_ms'])}</td>"
            f"<td>{escape(', '.join(s.get('switched') or []) or '-')}</td>"
            f"<td>{escape(type_text)}</td><td>{escape(_rejoins(s))}</td>"
            f"<td class='num'>{s['partitions_moved']}</td><td>{escape(_unassigned(s))}</td></tr>"
        )
    out.append("</table>")
    return "".join(out)


def _run_order(run: str, expected_run: str) -> tuple[bool, Any]:
    return (run.split("~")[0] != expected_run, run_sort_key(run))


def _segment_colour(segment: dict[str, Any]) -> str:
    if segment["state"] == "empty":
        return EMPTY_COLOUR
    return CONSUMER_COLOUR if segment["protocol"] == "consumer" else CLASSIC_COLOUR


def timeline_svg(segments: list[dict[str, Any]], steps: list[dict[str, Any]], expected_run: str) -> str:
    """One block per run: the group's type, then one lane per member (at most MAX_MEMBER_LANES)."""
    runs = sorted(
        {s["run"] for s in steps} | {g["run"] for g in segments}, key=lambda r: _run_order(r, expected_run)
    )
    if not runs:
        return ""
    members = {run: sorted({g["lane"] for g in segments if g["run"] == run and g["lane"]}) for run in runs}
    end = max([g["end_ms"] or 0 for g in segments] + [s["end_ms"] or 0 for s in steps] + [1])
    labels = [run for run in runs] + [m for names in members.values() for m in names[:MAX_MEMBER_LANES]]
    label_w = max(130, 16 + 7 * max(len(text) for text in labels))
    plot_w, lane_h, block_gap, top = 760, 18, 22, 22
    lanes = sum(1 + min(len(members[run]), MAX_MEMBER_LANES) for run in runs)
    height = top + lanes * lane_h + len(runs) * block_gap + 44
    width = label_w + plot_w + 30

    frame = _Frame(label_w, plot_w, lane_h, end)

    out = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' {FONT} font-size='11'>"
    ]
    out.append(
        f"<line x1='{label_w}' x2='{label_w + plot_w}' y1='{top - 8}' y2='{top - 8}' stroke='#c9ced9'/>"
    )
    for tick in range(6):
        x = label_w + plot_w * tick / 5
        out.append(
            f"<text x='{x:.1f}' y='{top - 12}' text-anchor='middle' fill='#667'>"
            f"{end * tick / 5 / 1000:.0f}s</text>"
        )
    y = top
    for run in runs:
        run_steps = [s for s in steps if s["run"] == run]
        shown = members[run][:MAX_MEMBER_LANES]
        block_h = lane_h * (1 + len(shown))
        run_segments = [g for g in segments if g["run"] == run]
        out += _block(frame, run, y, run_segments, run_steps, shown, run == expected_run)
        hidden = len(members[run]) - len(shown)
        if hidden > 0:
            out.append(
                f"<text x='{label_w}' y='{y + block_h + 12}' fill='#667'>+{hidden} members not drawn "
                "(see the migration_timeline table)</text>"
            )
        y += block_h + block_gap
    out += _legend(label_w, y + 8)
    out.append("</svg>")
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Frame:
    """Where the plot is: labels left of `label_w`, time 0..`end_ms` over `plot_w` pixels."""

    label_w: int
    plot_w: int
    lane_h: int
    end_ms: int

    def x_of(self, ms: int | None) -> float:
        return self.label_w + self.plot_w * (ms or 0) / self.end_ms


def _block(
    frame: _Frame,
    run: str,
    y: float,
    segments: list[dict[str, Any]],
    run_steps: list[dict[str, Any]],
    members: list[str],
    expected: bool,
) -> list[str]:
    """One run: its group-type band, its member lanes and its step boundaries."""
    label_w, lane_h, x_of = frame.label_w, frame.lane_h, frame.x_of
    block_h = lane_h * (1 + len(members))
    weight = "bold" if expected else "normal"
    out = [
        f"<text class='lane' x='{label_w - 8}' y='{y + lane_h - 5}' text-anchor='end' "
        f"font-weight='{weight}'>{escape(run)}</text>"
    ]
    for g in (g for g in segments if not g["lane"]):
        x1, x2 = x_of(g["start_ms"]), x_of(g["end_ms"])
        tip = f"{run}: {g['protocol']} group {_seconds(g['start_ms'])}s - {_seconds(g['end_ms'])}s"
        out.append(
            f"<rect x='{x1:.1f}' y='{y + 2}' width='{max(x2 - x1, 1):.1f}' height='{lane_h - 4}' "
            f"fill='{BAND_COLOUR.get(g['protocol'], '#ddd')}'><title>{escape(tip)}</title></rect>"
            f"<text x='{x1 + 4:.1f}' y='{y + lane_h - 5}' fill='#334'>{escape(g['protocol'])} group</text>"
        )
    for index, member in enumerate(members):
        lane_y = y + lane_h * (index + 1)
        out.append(
            f"<text class='lane' x='{label_w - 8}' y='{lane_y + lane_h - 5}' text-anchor='end' "
            f"fill='#445'>{escape(member)}</text>"
            f"<line x1='{label_w}' x2='{label_w + frame.plot_w}' y1='{lane_y + lane_h / 2}' "
            f"y2='{lane_y + lane_h / 2}' stroke='#eceef2'/>"
        )
        for g in (g for g in segments if g["lane"] == member):
            x1, x2 = x_of(g["start_ms"]), x_of(g["end_ms"])
            state = "holds partitions" if g["state"] == "holding" else "holds no partition"
            tip = (
                f"{member} ({g['protocol']}): {state}, {_seconds(g['start_ms'])}s - {_seconds(g['end_ms'])}s"
            )
            out.append(
                f"<rect x='{x1:.1f}' y='{lane_y + 3}' width='{max(x2 - x1, 1):.1f}' height='{lane_h - 6}' "
                f"fill='{_segment_colour(g)}'><title>{escape(tip)}</title></rect>"
            )
    for s in run_steps:
        if s["step"] == 0:
            continue
        x = x_of(s["start_ms"])
        tip = f"{run}: step {s['step']} from {_seconds(s['start_ms'])}s, switched {', '.join(s['switched'])}"
        out.append(
            f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y}' y2='{y + block_h}' stroke='#333' "
            f"stroke-dasharray='3,3'><title>{escape(tip)}</title></line>"
            f"<text x='{x + 2:.1f}' y='{y + block_h + 10}' fill='#333' font-size='9'>{s['step']}</text>"
        )
    return out


def _legend(x: int, y: float) -> list[str]:
    items = [
        (CLASSIC_COLOUR, "holds partitions (classic)"),
        (CONSUMER_COLOUR, "holds partitions (consumer)"),
        (EMPTY_COLOUR, "in the group, holds none"),
        (BAND_COLOUR["classic"], "classic group"),
        (BAND_COLOUR["consumer"], "consumer group"),
    ]
    out = []
    for colour, text in items:
        out.append(
            f"<rect x='{x}' y='{y}' width='10' height='10' fill='{colour}'/>"
            f"<text x='{x + 14}' y='{y + 9}' fill='#445'>{escape(text)}</text>"
        )
        x += 24 + 6 * len(text)
    return out


def migration_html(data: ReportData) -> list[str]:
    """The report's "Protocol migration" part (nothing when no group saw the consumer protocol)."""
    if not data.migration_steps:
        return []
    parts = [
        "<h2 id='migration'>Protocol migration</h2>",
        "<p class='muted'>Groups whose members spoke the consumer protocol (KIP-848), step by step. "
        "Step 0 is the group before any member switched protocol; step k begins where the k-th "
        "switch began (the member's LeaveGroup, else its first request on the new protocol). Per "
        "step and run: who switched, the group's type at the step's end, each remaining classic "
        "member's successful JoinGroups (the rebalance-storm risk of eager assignors), the "
        "partitions received, and each member's time in the group without partitions (eager "
        "classic members hold none from JoinGroup to SyncGroup). Group type, switches, rejoins "
        "and partitions moved are compared across runs like the other facts; times are shown, "
        "not compared. Dashed lines: where each step began.</p>",
    ]
    if data.migration_groups > len(data.migration_steps):
        parts.append(
            f"<p class='muted'>{len(data.migration_steps)} of {data.migration_groups:,} such groups "
            "(failing comparisons first); all are in the <code>migration_steps</code> and "
            "<code>migration_timeline</code> tables (--out).</p>"
        )
    for key, steps in data.migration_steps.items():
        session_id, scenario, group_id = key
        title = (
            f"{escape(session_id)} / {escape(group_id)} "
            f"<span class='muted'>scenario {escape(scenario)}</span>"
        )
        if key in data.session_verdicts:
            title += f" <a href='#{session_anchor(*key)}'>comparison</a>"
        parts.append(f"<section class='migration' id='{migration_anchor(key)}'><h3>{title}</h3>")
        parts.append(steps_table(steps, data.expected_run))
        parts.append(timeline_svg(data.migration_timelines.get(key, []), steps, data.expected_run))
        parts.append("</section>")
    return parts
