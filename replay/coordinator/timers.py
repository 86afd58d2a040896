"""Keyed timers in virtual time: scheduling a key again replaces its deadline.

Kafka's new coordinator keeps its classic-group timeouts in a `CoordinatorTimer` keyed by
`heartbeat-{group}-{member}`, `join-{group}`, `sync-{group}` and `pending-member-...`
(GroupMetadataManager.classicGroupHeartbeatKey / classicGroupJoinKey / classicGroupSyncKey);
`timer.schedule(key, ...)` cancels the previous timer of that key. This is the same idea as a
binary heap with lazy deletion: each key remembers the sequence number of its live entry, and
stale heap entries are skipped when they surface. When stale entries outnumber live ones the heap
is rebuilt from the live ones (a client heartbeating as fast as it can, with a 30-minute session
timeout, would otherwise leave one stale entry per heartbeat for 30 minutes).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable

TimerAction = Callable[[int], None]

# A live timer: (deadline_ms, seq, action). Tuples, not objects: rescheduling a member's
# heartbeat timer is the hottest path of a large group.
_Entry = tuple[int, int, TimerAction]

# Rebuild when the heap holds more than 2 x live + this many entries: amortised O(1) per
# schedule, and a small heap is never rebuilt.
COMPACT_SLACK = 1024


class KeyedTimers:
    __slots__ = ("_heap", "_live", "_seq")

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, str]] = []
        self._live: dict[str, _Entry] = {}
        self._seq = 0

    def schedule(self, key: str, deadline_ms: int, action: TimerAction) -> None:
        seq = self._seq = self._seq + 1
        live = self._live
        live[key] = (deadline_ms, seq, action)
        heap = self._heap
        heapq.heappush(heap, (deadline_ms, seq, key))
        if len(heap) > 2 * len(live) + COMPACT_SLACK:
            self._compact()

    def _compact(self) -> None:
        heap = [(deadline_ms, seq, key) for key, (deadline_ms, seq, _) in self._live.items()]
        heapq.heapify(heap)
        self._heap = heap

    def heap_size(self) -> int:
        """Entries in the heap, stale ones included (what memory the timers hold)."""
        return len(self._heap)

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
        heap = self._heap
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
        heap = self._heap
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
