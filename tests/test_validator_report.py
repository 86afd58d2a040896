"""The HTML report in headless Chromium at 1, 3, 50 and 10,000 sessions (slow): screenshot, and no
label overlaps.

The layout check runs in the browser: a copy of the report gets a small script that measures the
matrix's label cells (text must fit its cell: long names wrap, never spill over a neighbour) and
the timelines' run labels (no two overlap, none reaches into the plot), and writes what it found
into the DOM, which `--dump-dom` prints.
"""

from __future__ import annotations

import json
import re
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.render_check import find_chromium, render_png
from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
    pytest.mark.skipif(find_chromium() is None, reason="chromium not installed (apt-get install chromium)"),
]

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from tests.support.spark import shared_test_session  # noqa: E402
from tests.support.synth_events import synth_events  # noqa: E402
from validator.jobs import ValidateOptions, run_validate  # noqa: E402
from validator.report.html import render_html  # noqa: E402

LAYOUT_PROBE = """
<script>
window.addEventListener('load', () => {
  const problems = [];
  document.querySelectorAll('table.matrix th, table.matrix td').forEach((cell) => {
    if (cell.scrollWidth > cell.clientWidth + 1) problems.push('matrix cell overflows: ' + cell.textContent);
  });
  document.querySelectorAll('svg').forEach((svg) => {
    const lanes = [...svg.querySelectorAll('text.lane')].map((t) => [t, t.getBoundingClientRect()]);
    const plot = svg.querySelector('line[stroke="#c9ced9"]');
    const plotLeft = plot ? plot.getBoundingClientRect().left : Infinity;
    lanes.forEach(([t, r], i) => {
      const left = svg.getBoundingClientRect().left;
      if (r.left < left - 1) problems.push('lane label clipped: ' + t.textContent);
      if (r.right > plotLeft + 1) problems.push('lane label over the plot: ' + t.textContent);
      lanes.slice(i + 1).forEach(([u, q]) => {
        if (r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom)
          problems.push('lane labels overlap: ' + t.textContent + ' / ' + u.textContent);
      });
    });
  });
  const out = document.createElement('pre');
  out.id = 'layout-problems';
  out.textContent = JSON.stringify(problems);
  document.body.appendChild(out);
});
</script>
"""


def layout_problems(report: Path) -> list[str]:
    chromium = find_chromium()
    assert chromium is not None
    probe = report.with_name(report.stem + "-probe.html")
    probe.write_text(report.read_text().replace("</body>", LAYOUT_PROBE + "</body>"))
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        result = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={profile}", "--window-size=1400,2000", "--virtual-time-budget=5000",
             "--dump-dom", probe.resolve().as_uri()],
            capture_output=True, text=True, timeout=180, check=False,
        )  # fmt: skip
    found = re.search(r"<pre id=\"layout-problems\">(.*?)</pre>", result.stdout, re.S)
    assert found, f"the probe did not run: {result.stderr[-1000:]}"
    return json.loads(found.group(1).replace("&quot;", '"').replace("&amp;", "&"))


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


@pytest.fixture(scope="module")
def spark() -> SparkSession:
    return shared_test_session()


@pytest.mark.parametrize("sessions", [1, 3, 50, pytest.param(10_000, marks=pytest.mark.slow)])
def test_report_renders_without_overlaps(spark: SparkSession, sessions: int, tmp_path: Path) -> None:
    events = tmp_path / "events"
    synth_events(spark, sessions, diff_rate=0.5, noise_rate=0.5).write.parquet(str(events))
    data = run_validate(spark, ValidateOptions(inputs=(events,)))
    report = tmp_path / "report.html"
    report.write_text(render_html(data))
    html = report.read_text()
    assert "<table class='matrix'>" in html
    sections = re.findall(r"<section class='session' id='([^']+)'", html)
    assert sections and len(sections) == len(set(sections))
    assert len(sections) <= sessions * 4  # one per (session, scenario, group) at most
    # Readable at any size: the worst 30 comparisons and each matrix cell's worst session, no more.
    assert len(sections) <= 30 + len(data.matrix)
    assert len(html) < 3_000_000
    if data.failing > 30:
        assert f"The 30 worst of {data.failing:,} comparisons" in html
    assert layout_problems(report) == []
    png = render_png(report, tmp_path / "report.png", width=1400, height=1800)
    assert png_size(png) == (1400, 1800)
    assert png.stat().st_size > 40_000  # a blank page compresses to a few kB
