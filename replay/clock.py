"""One clock for both kinds of run: virtual time that jumps, and real time scaled by `speed`.

The members and the coordinator never read a clock (sans-IO): the loop that drives them asks
its `Clock` for `now_ms()` and passes it in. The reference run jumps a `VirtualClock` to the next
member action or coordinator deadline (an hour of heartbeats takes seconds, two runs are
identical); a live run reads a `ScaledClock`: wall time since the start times its current rate,
which the live runner lowers to 1 while the broker's own timers may be measuring a span of group
time (`replay.live.BrokerTimerPace`) and raises to `speed` in between.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...


class VirtualClock:
    """Time moves only when the loop moves it, and never backwards."""

    __slots__ = ("_now_ms",)

    def __init__(self, start_ms: int = 0) -> None:
        self._now_ms = start_ms

    def now_ms(self) -> int:
        return self._now_ms

    def advance_to(self, when_ms: int) -> int:
        if when_ms > self._now_ms:
            self._now_ms = when_ms
        return self._now_ms


class ScaledClock:
    """Milliseconds of scenario time since `start()`: wall time times the current `rate`.

    `rate` starts at `speed`; `set_rate` changes it from now on (the time already passed keeps
    its scale, so `now_ms` never jumps or goes backwards)."""

    __slots__ = ("_base_ms", "_monotonic", "_start_s", "rate", "speed")

    def __init__(self, speed: float = 1.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = speed
        self.rate = speed
        self._monotonic = monotonic
        self._start_s = monotonic()
        self._base_ms = 0

    def start(self) -> None:
        self._start_s = self._monotonic()
        self._base_ms = 0

    def now_ms(self) -> int:
        return self._base_ms + int((self._monotonic() - self._start_s) * 1000 * self.rate)

    def set_rate(self, rate: float) -> None:
        """Scenario ms per wall ms from now on (1: real time)."""
        if rate <= 0:
            raise ValueError("rate must be > 0")
        if rate != self.rate:
            now_s = self._monotonic()
            self._base_ms += int((now_s - self._start_s) * 1000 * self.rate)
            self._start_s = now_s
            self.rate = rate

    def seconds_until(self, when_ms: int) -> float:
        """Wall seconds until scenario time `when_ms` at the current rate (0 when it has passed)."""
        return max(0.0, (when_ms - self.now_ms()) / 1000 / self.rate)


__all__ = ["Clock", "ScaledClock", "VirtualClock"]
