"""The capture writer process's scheduling class (`proxy.capture.writer`'s process, Linux).

The process lowers itself to SCHED_IDLE at its start and moves between SCHED_IDLE and SCHED_OTHER
as it falls behind and catches up (`Priority`).
"""

from __future__ import annotations

import os

# The writer process's scheduling class: "idle" (the default: `Priority`) or "normal".
PRIORITY_VARIABLE = "GROUP_REPLAY_CAPTURE_PRIORITY"


class Priority:
    """The writer process's scheduling class: SCHED_IDLE while it keeps up, so that it runs only
    on CPU time nothing else wants and never preempts the relay, its clients or its brokers (on a
    2-core host the woken clients waited behind the writer: group scope went from 0.66x to
    0.84x of the unrecorded proxy, pipelined; bench/README.md, "The writer at SCHED_IDLE").

    A host busy with other work could starve it; the proxy then pauses its clients at a 64 MiB
    backlog rather than lose frames. So a read that finds the pipe full (it held a whole read
    buffer: the writer is behind) moves it back to SCHED_OTHER, and one that finds it nearly
    empty moves it to SCHED_IDLE again. Leaving SCHED_IDLE needs CAP_SYS_NICE or RLIMIT_NICE
    (root has both); without it the writer stays idle and the backlog pause bounds the memory.
    `GROUP_REPLAY_CAPTURE_PRIORITY=normal` keeps it at SCHED_OTHER throughout."""

    @classmethod
    def from_environment(cls) -> Priority:
        return cls(os.environ.get(PRIORITY_VARIABLE, "idle") != "normal")

    def __init__(self, idle: bool) -> None:
        self.wanted = idle  # idle while it keeps up
        self.idle = idle and _set_policy(getattr(os, "SCHED_IDLE", None))
        self.can_leave = True

    def after_read(self, count: int, capacity: int) -> None:
        """The writer read `count` bytes into a buffer of `capacity`: behind, or caught up?"""
        if not self.wanted:
            return
        if self.idle and count >= capacity and self.can_leave:
            self.idle = not _set_policy(getattr(os, "SCHED_OTHER", None))
            self.can_leave = not self.idle
        elif not self.idle and count < capacity // 8:
            self.idle = _set_policy(getattr(os, "SCHED_IDLE", None))


def _set_policy(policy: int | None) -> bool:
    """This process's scheduling class to `policy` (Linux); False where it is refused or unknown."""
    if policy is None:
        return False
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except (AttributeError, OSError):
        return False
    return True
