"""README's walk-through, run as it is written (issue 12's "Done when"): a 3-broker SASL_SSL
cluster from `group-replay broker start`, the recording proxy with TLS on both legs, a group of
real clients through it, the coordinator's broker killed, the capture read by `capture show`
and tshark. The block between the walkthrough markers runs in bash in an empty directory; only
the proxy's port is swapped for a free one."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from harness.maven import missing_tools
from proxy.capture.reader import read_capture

README = Path(__file__).resolve().parents[1] / "README.md"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}"),
    pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed"),
]


def walkthrough() -> str:
    text = README.read_text()
    block = text.split("<!-- walkthrough:begin -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    return block.split("```bash\n", 1)[1].rsplit("```", 1)[0]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_the_readme_walkthrough_runs(tmp_path: Path) -> None:
    script = walkthrough().replace("127.0.0.1:19092", f"127.0.0.1:{_free_port()}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("GROUP_REPLAY_RUN_DIR", None)
    try:
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
            env={**env, "COLUMNS": "250"},
        )
    finally:  # never leave the cluster behind
        subprocess.run(
            [sys.executable, "-m", "group_replay", "broker", "stop", "--state-dir", str(tmp_path / "gr-run")],
            capture_output=True,
            timeout=120,
        )
    logs = "\n".join(
        f"--- {name}\n{(tmp_path / name).read_text(errors='replace')[-3000:]}"
        for name in ("clients.log", "proxy.log")
        if (tmp_path / name).exists()
    )
    assert result.returncode == 0, f"{result.stdout[-4000:]}\n{result.stderr[-4000:]}\n{logs}"
    out = result.stdout
    assert "records consumed after the last coordinator change" in out, out
    assert re.search(r"killed node (\d) \(pid", out), out
    killed = int(re.search(r"killed node (\d) \(pid", out).group(1))  # type: ignore[union-attr]
    assert "record scope group" in out and "JoinGroup" in out
    assert re.search(r"Produce \d+ \(header only\)", out), out
    # tshark's FindCoordinator answers: the killed node, then another one.
    nodes = [int(n) for line in out.splitlines() if re.fullmatch(r"[\d,]+", line) for n in line.split(",")]
    assert killed in nodes and any(n != killed for n in nodes[nodes.index(killed) :]), (nodes, out)
    capture = read_capture(tmp_path / "walkthrough.pcapng")
    assert capture.damage is None
    for secret in (b"alice-secret",):
        assert secret not in (tmp_path / "walkthrough.pcapng").read_bytes()
