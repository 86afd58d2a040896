"""A differential run once hung until pytest-timeout's 600 s (docs/ci.md). The cause: on Python
3.11 `asyncio.wait_for` loses a cancel that meets an answer just read (CPython gh-86296), and the
driver stopped its heartbeat loop by cancelling it alone, so a lost cancel left the run waiting
for a loop that heartbeat forever. Tested here: the call is cancelled even then, the run ends
even when a cancel is lost, and a step that runs long is logged with every member's state.
Played against the reference coordinator served over TCP, as the differential tests play it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from datetime import timedelta

import pytest

import replay.driver
from replay.driver import MemberSpec, Scenario, Wait, form, run_scenario
from tests.support.serve import served


def test_a_step_that_runs_long_is_logged_with_each_members_state(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(replay.driver, "SLOW_STEP_S", 0.3)
    with served("events:6") as bootstrap:
        scenario = Scenario(
            "slow-step", (MemberSpec(key="a"), MemberSpec(key="b")), (*form("a", "b"), Wait(ms=800))
        )
        with caplog.at_level(logging.WARNING, logger="replay.driver"):
            result = asyncio.run(run_scenario(scenario, bootstrap, "reference"))
    slow = [r.getMessage() for r in caplog.records if "step 2 (Wait(ms=800)) still running" in r.getMessage()]
    assert slow, "the 800 ms Wait outlasted the 300 ms interval but nothing was logged"
    assert "a STABLE" in slow[0] and "b STABLE" in slow[0] and "conn=idle" in slow[0]
    assert "after 0.3 s" in slow[0] or "after 0.4 s" in slow[0]
    assert [e.generation_id for e in result.events if e.event == "generation_completed"][-1:] == [2]


def test_the_run_ends_when_its_heartbeat_loop_loses_a_cancel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The heartbeat loop ends with the run even when the cancel that stops it is lost: on Python
    3.11 a cancel that meets a request whose answer has just arrived is swallowed by
    `asyncio.wait_for` (CPython gh-86296), and the run then waited forever for a loop that kept
    heartbeating (a differential run hung until pytest-timeout's 600 s). Here every background
    heartbeat swallows a cancel as 3.11 can, and lasts long enough that the run's end meets one."""
    real_call = replay.driver.Connection.call

    async def stubborn(
        self: replay.driver.Connection, request: object, timeout_s: float | None = 60.0
    ) -> object:
        with contextlib.suppress(asyncio.CancelledError):  # 3.11's wait_for with the answer in: it wins
            await asyncio.sleep(0.2)
        return await real_call(self, request, timeout_s)

    monkeypatch.setattr(replay.driver, "HEARTBEAT_INTERVAL_S", 0.01)
    monkeypatch.setattr(replay.driver.Connection, "call", stubborn)
    with served("events:6") as bootstrap:
        scenario = Scenario(
            "lost-cancel", (MemberSpec(key="a"), MemberSpec(key="b")), (*form("a", "b"), Wait(ms=500))
        )

        # In a thread of its own: a run that never ends would also hang asyncio.run's clean-up.
        results: list[replay.driver.RunResult] = []
        thread = threading.Thread(
            target=lambda: results.append(asyncio.run(run_scenario(scenario, bootstrap, "reference"))),
            daemon=True,
        )
        thread.start()
        thread.join(timeout=60)
        assert not thread.is_alive(), (
            "the run did not end: its heartbeat loop outlived the cancel that stops it"
        )
        result = results[0]
    assert [e.generation_id for e in result.events if e.event == "generation_completed"][-1:] == [2]


def test_a_cancelled_call_is_cancelled_even_when_its_answer_has_just_arrived() -> None:
    """The cause of that hang: `Connection.call` waited for the answer with `asyncio.wait_for`,
    which on Python 3.11 returns the answer instead of raising when the cancel and the answer
    meet in one loop iteration. The answer arrives, the caller is cancelled, in that order and in
    the same iteration: the call must end in CancelledError, not return."""
    from kio.schema.errors import ErrorCode
    from kio.schema.heartbeat.v4.request import HeartbeatRequest
    from kio.schema.heartbeat.v4.response import HeartbeatResponse
    from kio.static.primitive import i32Timedelta

    from proxy.wire import encode_response
    from replay.live import Connection

    class Sink:
        def write(self, data: bytes) -> None:
            pass

        async def drain(self) -> None:
            pass

        def close(self) -> None:
            pass

    async def scenario() -> str:
        reader = asyncio.StreamReader()
        conn = Connection(reader, Sink(), "t")  # type: ignore[arg-type]
        request = HeartbeatRequest(group_id="g", generation_id=1, member_id="m", group_instance_id=None)
        call = asyncio.ensure_future(conn.call(request))
        await asyncio.sleep(0)  # the call is waiting for its answer
        answer = HeartbeatResponse(throttle_time=i32Timedelta.parse(timedelta(0)), error_code=ErrorCode.none)
        reader.feed_data(encode_response(answer, 1))
        call.cancel()
        try:
            await call
        except asyncio.CancelledError:
            return "cancelled"
        return "returned the answer"

    assert asyncio.run(scenario()) == "cancelled"
