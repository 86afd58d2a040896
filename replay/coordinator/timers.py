"""Keyed timers in virtual time: scheduling a key again replaces its deadline.

Kafka's new coordinator keeps its classic-group timeouts in a `CoordinatorTimer` keyed by
`heartbeat-{group}-{member}`, `join-{group}`, `sync-{group}` and `pending-member-...`
(GroupMetadataManager.classicGroupHeartbeatKey / classicGroupJoinKey / classicGroupSyncKey);
`timer.schedule(key, ...)` cancels the previous timer of that key. This is the same idea as a
binary heap with lazy deletion: each key remembers the sequence number of its live entry, and
stale heap entries are skipped when they surface. When stale entries outnumber live ones the heap
is rebuilt from the live ones (a client heartbeating as fast as it can, with a 30-minute session
timeout, would otherwise leave one stale entry per heartbeat for 30 minutes). Whether to rebuild is
not asked on every schedule (two len() per heartbeat were measurable): each check computes how many
more schedules the heap needs before it could outgrow the bound, and the next check waits for that
sequence number.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

TimerAction = Callable[[int], None]

# A live timer: (deadline_ms, seq, action). Tuples, not objects: rescheduling a member's
# heartbeat timer is the hottest path of a large group.
_Entry = tuple[int, int, TimerAction]

# Rebuild when the heap holds more than 2 x live + this many entries: amortised O(1) per
# schedule, and a small heap is never rebuilt. (Timers cancelled or fired since the last check
# lower the bound without moving the next check: the heap then stays within the bound the live
# timers of that check set.)
COMPACT_SLACK = 1024


class KeyedTimers:
    __slots__ = ("_check_at", "_live", "_seq", "heap")

    def __init__(self) -> None:
        # (deadline_ms, seq, key), stale entries included: `heap[0][0]` is never later than the
        # next live deadline (the coordinator's cheap "is anything due?" test). Read only.
        self.heap: list[tuple[int, int, str]] = []
        self._live: dict[str, _Entry] = {}
        self._seq = 0
        self._check_at = COMPACT_SLACK + 1  # the schedule (by sequence number) that checks next

    def schedule(self, key: str, deadline_ms: int, action: TimerAction) -> None:
        seq = self._seq = self._seq + 1
        self._live[key] = (deadline_ms, seq, action)
        heapq.heappush(self.heap, (deadline_ms, seq, key))
        if seq >= self._check_at:
            self._maybe_compact(seq)

    def _maybe_compact(self, seq: int) -> None:
        live = self._live
        if len(self.heap) > 2 * len(live) + COMPACT_SLACK:
            heap = [(deadline_ms, s, key) for key, (deadline_ms, s, _) in live.items()]
            heapq.heapify(heap)
            self.heap = heap
        # Each schedule adds one entry: no sooner than this can the heap outgrow the bound.
        self._check_at = seq + max(1, 2 * len(live) + COMPACT_SLACK + 1 - len(self.heap))

    def heap_size(self) -> int:
        """Entries in the heap, stale ones included (what memory the timers hold)."""
        return len(self.heap)

    def cancel(self, key: str) -> None:
        self._live.pop(key, None)

    def is_scheduled(self, key: str) -> bool:
        return key in self._live

    def deadline(self, key: str) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        return len(self._live)

    def next_deadline(self) -> int | None:
        heap = self.heap
        live = self._live
        while heap:
            deadline_ms, seq, key = heap[0]
            entry = live.get(key)
            if entry is not None and entry[1] == seq:
                return deadline_ms
            heapq.heappop(heap)
        return None

    def pop_due(self, now_ms: int) -> tuple[str, TimerAction] | None:
        """The earliest live timer due at `now_ms` (removed), or None. Ties fire in scheduling order."""
        heap = self.heap
        live = self._live
        while heap:
            deadline_ms, seq, key = heap[0]
            entry = live.get(key)
            if entry is None or entry[1] != seq:
                heapq.heappop(heap)
                continue
            if deadline_ms > now_ms:
                return None
            heapq.heappop(heap)
            del live[key]
            return key, entry[2]
        return None
