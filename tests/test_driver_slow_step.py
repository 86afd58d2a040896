"""replay.driver logs a step that runs long, with every member's state (docs/ci.md: a differential
run once hung until pytest-timeout's 600 s with nothing to say where). Played against the
reference coordinator served over TCP, as the differential tests play it; the slow step here is a
`Wait` longer than the (shortened) reporting interval."""

from __future__ import annotations

import asyncio
import json
import logging
import subprocess
import sys

import pytest

import replay.driver
from replay.driver import MemberSpec, Scenario, Wait, form, run_scenario


def test_a_step_that_runs_long_is_logged_with_each_members_state(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(replay.driver, "SLOW_STEP_S", 0.3)
    process = subprocess.Popen(
        [sys.executable, "-m", "group_replay", "coordinator", "serve", "--port", "0",
         "--group-min-session-timeout-ms", "1000", "--group-initial-rebalance-delay-ms", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        port = json.loads(process.stdout.readline())["port"]
        scenario = Scenario(
            "slow-step", (MemberSpec(key="a"), MemberSpec(key="b")), (*form("a", "b"), Wait(ms=800))
        )
        with caplog.at_level(logging.WARNING, logger="replay.driver"):
            result = asyncio.run(run_scenario(scenario, f"127.0.0.1:{port}", "reference"))
    finally:
        process.terminate()
        process.wait(timeout=10)
    slow = [r.getMessage() for r in caplog.records if "step 2 (Wait(ms=800)) still running" in r.getMessage()]
    assert slow, "the 800 ms Wait outlasted the 300 ms interval but nothing was logged"
    assert "a STABLE" in slow[0] and "b STABLE" in slow[0] and "conn=idle" in slow[0]
    assert "after 0.3 s" in slow[0] or "after 0.4 s" in slow[0]
    assert [e.generation_id for e in result.events if e.event == "generation_completed"][-1:] == [2]
