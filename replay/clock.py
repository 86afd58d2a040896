"""One clock for both kinds of run: virtual time that jumps, and real time scaled by `speed`.

The members and the coordinator never read a clock (sans-IO): the loop that drives them asks
its `Clock` for `now_ms()` and passes it in. The reference run jumps a `VirtualClock` to the next
member action or coordinator deadline (an hour of heartbeats takes seconds, two runs are
identical); a live run reads a `ScaledClock`: wall time since the start times `speed`.
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
    """Milliseconds of scenario time since `start()`: wall time times `speed`."""

    __slots__ = ("_monotonic", "_start_s", "speed")

    def __init__(self, speed: float = 1.0, monotonic: Callable[[], float] = time.monotonic) -> None:
        if speed <= 0:
            raise ValueError("speed must be > 0")
        self.speed = speed
        self._monotonic = monotonic
        self._start_s = monotonic()

    def start(self) -> None:
        self._start_s = self._monotonic()

    def now_ms(self) -> int:
        return int((self._monotonic() - self._start_s) * 1000 * self.speed)

    def seconds_until(self, when_ms: int) -> float:
        """Wall seconds until scenario time `when_ms` (0 when it has passed)."""
        return max(0.0, (when_ms - self.now_ms()) / 1000 / self.speed)


__all__ = ["Clock", "ScaledClock", "VirtualClock"]
