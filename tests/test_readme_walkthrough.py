"""README's walk-through, run as it is written (issue 12's "Done when"): a 3-broker SASL_SSL
cluster from `group-replay broker start`, the recording proxy with TLS on both legs, the demo
group of real clients (librdkafka, Java 3.9 and 2.4, kafka-python, aiokafka) through it, the
coordinator's broker killed, the capture read by `capture show` and tshark.

The block between README's walkthrough markers runs in bash (`-euo pipefail`) in an empty
directory; only the proxy's port is swapped for a free one, and a trap ends the script's
background jobs if a command fails. It starts its own cluster (the session's `kafka_cluster`
cannot stand in: starting the cluster with `group-replay broker start` and killing a node with
`broker stop --node` are steps of what is tested)."""

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
from tests.support.detached import stopped_even_if_killed

README = Path(__file__).resolve().parents[1] / "README.md"
SECRET = "alice-secret"

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(missing_tools() is not None, reason=f"no broker: {missing_tools()}"),
    pytest.mark.skipif(shutil.which("tshark") is None, reason="tshark is not installed"),
    pytest.mark.skipif(shutil.which("javac") is None, reason="the demo group's Java clients need a JDK"),
]


def walkthrough() -> str:
    text = README.read_text()
    block = text.split("<!-- walkthrough:begin -->", 1)[1].split("<!-- walkthrough:end -->", 1)[0]
    return block.split("```bash\n", 1)[1].rsplit("```", 1)[0]


def test_the_walkthrough_block_is_what_the_test_runs() -> None:
    """The markers hold one bash block that starts a SASL_SSL cluster, kills a node, reads the
    capture with both tools and stops the cluster (so a README edit cannot drop a step silently)."""
    script = walkthrough()
    for step in (
        "group-replay broker start --brokers 3 --security sasl_ssl",
        "group-replay proxy",
        "--client-tls-cert",
        "--upstream-tls-ca",
        "group-replay demo group",
        'group-replay broker stop --node "$NODE"',
        "group-replay capture show walkthrough.pcapng",
        "tshark -r walkthrough.pcapng",
    ):
        assert step in script, step
    assert script.rstrip().endswith("group-replay broker stop")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _logs(directory: Path) -> str:
    return "\n".join(
        f"--- {name}\n{(directory / name).read_text(errors='replace')[-4000:]}"
        for name in ("group.log", "proxy.log")
        if (directory / name).exists()
    )


def test_the_readme_walkthrough_runs(tmp_path: Path) -> None:
    script = walkthrough().replace("127.0.0.1:19092", f"127.0.0.1:{_free_port()}")
    script = "trap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n" + script
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("GROUP_REPLAY_RUN_DIR", None)
    with stopped_even_if_killed(tmp_path / "gr-run"):  # never leave the cluster behind
        result = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=1100,
            env={**env, "COLUMNS": "250"},
        )
    out = result.stdout
    assert result.returncode == 0, f"{out[-6000:]}\n{result.stderr[-4000:]}\n{_logs(tmp_path)}"
    killed_match = re.search(r"killed node (\d) \(pid", out)
    moved = re.search(r"coordinator moved: node (\d) -> node (\d)", out)
    assert killed_match and moved, out
    killed = int(killed_match.group(1))
    assert int(moved.group(1)) == killed and int(moved.group(2)) != killed
    assert "the group settled again on its new coordinator" in out
    # capture show: the group's exchanges, group scope, data APIs as header-only frames.
    assert "record scope group" in out and "JoinGroup" in out, out
    assert re.search(r"Fetch \d+ \(header only\)", out), out
    # tshark's FindCoordinator answers (upstream leg): the killed node, then another one.
    nodes = [int(n) for line in out.splitlines() if re.fullmatch(r"[\d,]+", line) for n in line.split(",")]
    assert killed in nodes and any(n != killed for n in nodes[nodes.index(killed) :]), (nodes, out)
    capture = read_capture(tmp_path / "walkthrough.pcapng")
    assert capture.damage is None
    assert SECRET.encode() not in (tmp_path / "walkthrough.pcapng").read_bytes()
    assert SECRET not in (tmp_path / "proxy.log").read_text(errors="replace")
    # The proxy closed no connection of a live broker on bad input of its own making.
    assert "Traceback" not in (tmp_path / "proxy.log").read_text(errors="replace"), _logs(tmp_path)
