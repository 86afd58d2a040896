"""Render the HTML report in headless Chromium to a PNG, to look at it (and check it is not blank).

    python -m tests.support.render_check report.html report.png

Needs `chromium` (Debian: `apt-get install chromium`); no network is used (the report is
self-contained and the flags switch off Chromium's own background traffic).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def find_chromium() -> str | None:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def render_png(
    html: Path, png: Path, *, width: int = 1400, height: int = 2000, timeout_s: float = 120
) -> Path:
    """Screenshot `html` into `png`; raises RuntimeError when Chromium is missing or fails."""
    chromium = find_chromium()
    if chromium is None:
        raise RuntimeError("chromium not found (apt-get install chromium)")
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
        command = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            f"--screenshot={png.resolve()}",
            f"--window-size={width},{height}",
            html.resolve().as_uri(),
        ]
        result = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s, check=False)
    if result.returncode != 0 or not png.exists():
        raise RuntimeError(f"chromium failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    return png


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.support.render_check", description=__doc__.splitlines()[0]
    )
    parser.add_argument("html", type=Path)
    parser.add_argument("png", type=Path)
    parser.add_argument("--width", type=int, default=1400)
    parser.add_argument("--height", type=int, default=2000)
    args = parser.parse_args(argv)
    try:
        out = render_png(args.html, args.png, width=args.width, height=args.height)
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
