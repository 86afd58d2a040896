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

Rescheduling a key to the same or a later deadline (a session timer on every heartbeat) pushes
nothing and allocates nothing: the key's live entry is a list updated in place, and its heap entry
stays where it is, marking a deadline no later than the real one. When that entry surfaces (it is
the earliest), it is pushed again at the key's real deadline and sequence number, so timers still
fire in (deadline, scheduling order) order: an entry surfaces no later than its real place in that
order, and is moved there before anything behind it fires. A member heartbeating every few seconds
with a 45 s session timeout then costs a heap push per session timeout instead of per heartbeat.

A cancelled key's entry is parked (kept, not live) while its heap entry is in the heap: scheduled
again at the same or a later deadline, it is live again in place, without a push. A classic member
in a consumer group cancels and schedules its join and sync timers at every rebalance (Kafka's
scheduleConsumerGroupJoinTimeoutIfAbsent / cancelConsumerGroupJoinTimeout and the sync ones), a
few seconds apart for a rebalance timeout of minutes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

TimerAction = Callable[[int], None]

# A live timer, mutable so that a later deadline is written in place: [deadline_ms, seq, action,
# heap_seq, heap_deadline_ms], the last two those of the heap entry that stands for it (pushed with
# a deadline no later than deadline_ms). Lists, not objects: rescheduling a member's heartbeat
# timer is the hottest path of a large group.
_Entry = list[Any]

# Rebuild when the heap holds more than 2 x live + this many entries: amortised O(1) per
# schedule, and a small heap is never rebuilt. (Timers cancelled or fired since the last check
# lower the bound without moving the next check: the heap then stays within the bound the live
# timers of that check set.)
COMPACT_SLACK = 1024


class KeyedTimers:
    __slots__ = ("_check_at", "_live", "_parked", "_seq", "heap")

    def __init__(self) -> None:
        # (deadline_ms, seq, key), stale and early entries included: `heap[0][0]` is never later
        # than the next live deadline (the coordinator's cheap "is anything due?" test). Read only.
        self.heap: list[tuple[int, int, str]] = []
        self._live: dict[str, _Entry] = {}
        # Cancelled entries whose heap entry is still in the heap (dropped when it surfaces).
        self._parked: dict[str, _Entry] = {}
        self._seq = 0
        self._check_at = COMPACT_SLACK + 1  # the schedule (by sequence number) that checks next

    def schedule(self, key: str, deadline_ms: int, action: TimerAction) -> None:
        seq = self._seq = self._seq + 1
        entry = self._live.get(key)
        if entry is not None and entry[4] <= deadline_ms:
            # Its heap entry surfaces no later than the new deadline: moved then (`_surface`).
            entry[0] = deadline_ms
            entry[1] = seq
            entry[2] = action
            return
        if entry is None and self._parked:
            entry = self._parked.pop(key, None)
            if entry is not None and entry[4] <= deadline_ms:
                entry[0] = deadline_ms
                entry[1] = seq
                entry[2] = action
                self._live[key] = entry
                return
        self._live[key] = [deadline_ms, seq, action, seq, deadline_ms]
        heapq.heappush(self.heap, (deadline_ms, seq, key))
        if seq >= self._check_at:
            self._maybe_compact(seq)

    def _maybe_compact(self, seq: int) -> None:
        live = self._live
        if len(self.heap) > 2 * len(live) + COMPACT_SLACK:
            heap = []
            for key, entry in live.items():
                entry[3], entry[4] = entry[1], entry[0]
                heap.append((entry[0], entry[1], key))
            heapq.heapify(heap)
            self.heap = heap
            self._parked.clear()  # their heap entries are gone
        # Each schedule adds at most one entry: no sooner than this can the heap outgrow the bound.
        self._check_at = seq + max(1, 2 * len(live) + COMPACT_SLACK + 1 - len(self.heap))

    def heap_size(self) -> int:
        """Entries in the heap, stale ones included (what memory the timers hold)."""
        return len(self.heap)

    def cancel(self, key: str) -> None:
        entry = self._live.pop(key, None)
        if entry is not None:
            self._parked[key] = entry

    def is_scheduled(self, key: str) -> bool:
        return key in self._live

    def deadline(self, key: str) -> int | None:
        entry = self._live.get(key)
        return None if entry is None else entry[0]

    def __len__(self) -> int:
        return len(self._live)

    def _surface(self) -> _Entry | None:
        """The live entry the heap's first entry stands for at its real deadline, with stale
        entries dropped and early ones pushed again at their key's real place; None: empty."""
        heap = self.heap
        live = self._live
        while heap:
            _, seq, key = heap[0]
            entry = live.get(key)
            if entry is None or entry[3] != seq:
                heapq.heappop(heap)
                if entry is None:
                    parked = self._parked.get(key)
                    if parked is not None and parked[3] == seq:
                        del self._parked[key]
            elif entry[1] != seq:
                entry[3], entry[4] = entry[1], entry[0]
                heapq.heapreplace(heap, (entry[0], entry[1], key))
            else:
                return entry
        return None

    def next_deadline(self) -> int | None:
        entry = self._surface()
        if entry is None:
            return None
        deadline_ms: int = entry[0]
        return deadline_ms

    def pop_due(self, now_ms: int) -> tuple[str, TimerAction] | None:
        """The earliest live timer due at `now_ms` (removed), or None. Ties fire in scheduling order."""
        entry = self._surface()
        if entry is None or entry[0] > now_ms:
            return None
        key = heapq.heappop(self.heap)[2]
        del self._live[key]
        return key, entry[2]
