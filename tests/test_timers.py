"""replay.coordinator.timers.KeyedTimers against an eager model of its contract.

The model keeps, per key, its (deadline, scheduling sequence number, action) and fires the
smallest (deadline, seq) first: scheduling a key again replaces its deadline, a cancelled key never
fires, ties fire in scheduling order. KeyedTimers moves a key to a later deadline in place and
pushes its heap entry again only when that entry surfaces; random operation sequences must fire the
same keys with the same actions at the same times, answer the same deadlines, and keep the heap
within its compaction bound (replay/coordinator/timers.py's contract, which the classic and the
consumer groups share)."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from replay.coordinator import timers as timers_module
from replay.coordinator.timers import KeyedTimers

_KEYS = [f"k{i}" for i in range(6)]

Op = tuple[str, str, int]  # (operation, key, deadline or step): what `_run` interprets


def schedule(key: str, deadline_ms: int) -> Op:
    return ("schedule", key, deadline_ms)


def cancel(key: str) -> Op:
    return ("cancel", key, 0)


def advance(step_ms: int) -> Op:
    return ("advance", "", step_ms)


def peek(key: str) -> Op:
    return ("peek", key, 0)


_key = st.sampled_from(_KEYS)
_ops = st.lists(
    st.one_of(
        st.builds(schedule, _key, st.integers(0, 40)),
        st.builds(cancel, _key),
        st.builds(advance, st.integers(0, 15)),
        st.builds(peek, _key),
    ),
    max_size=200,
)


class _Eager:
    def __init__(self) -> None:
        self.live: dict[str, tuple[int, int, object]] = {}
        self.seq = 0

    def schedule(self, key: str, deadline_ms: int, action: object) -> None:
        self.seq += 1
        self.live[key] = (deadline_ms, self.seq, action)

    def pop_due(self, now_ms: int) -> tuple[str, object] | None:
        if not self.live:
            return None
        key = min(self.live, key=lambda k: self.live[k][:2])
        if self.live[key][0] > now_ms:
            return None
        return key, self.live.pop(key)[2]

    def next_deadline(self) -> int | None:
        return min((d for d, _, _ in self.live.values()), default=None)


def _action(label: str) -> object:
    return lambda now_ms: (label, now_ms)


def _run(ops: list[Op]) -> None:
    timers, model = KeyedTimers(), _Eager()
    now_ms = most_live = 0
    for step, (op, key, value) in enumerate(ops):
        match op:
            case "schedule":
                action = _action(f"{key}@{step}")
                timers.schedule(key, now_ms + value, action)  # type: ignore[arg-type]
                model.schedule(key, now_ms + value, action)
            case "cancel":
                timers.cancel(key)
                model.live.pop(key, None)
            case "advance":
                now_ms += value
                fired, expected = [], []
                while (due := timers.pop_due(now_ms)) is not None:
                    fired.append(due)
                while (due_model := model.pop_due(now_ms)) is not None:
                    expected.append(due_model)
                assert fired == expected
            case "peek":
                assert timers.deadline(key) == (model.live[key][0] if key in model.live else None)
                assert timers.is_scheduled(key) == (key in model.live)
                assert timers.next_deadline() == model.next_deadline()
        assert len(timers) == len(model.live)
        if timers.heap:  # the "is anything due?" test may look early, never late
            assert model.next_deadline() is None or timers.heap[0][0] <= model.next_deadline()  # type: ignore[operator]
        # Compaction's bound: set by the live timers at each check (cancels lower them between checks).
        most_live = max(most_live, len(timers))
        assert timers.heap_size() <= 2 * most_live + timers_module.COMPACT_SLACK + 1


@settings(max_examples=300, deadline=None)
@given(_ops)
# k0 moved later in place, k1 due between its two deadlines: k1 fires, k0 does not.
@example([schedule("k0", 10), schedule("k0", 30), schedule("k1", 20), advance(25)])
# k0 moved to k1's deadline after k1 was scheduled: k1 fires first.
@example([schedule("k0", 10), schedule("k1", 20), schedule("k0", 20), advance(20)])
# k0 cancelled, then scheduled again later (its parked entry live again): fires at 30 only.
@example([schedule("k0", 10), cancel("k0"), schedule("k0", 30), advance(15), peek("k0"), advance(20)])
# k0 cancelled, then scheduled again earlier than its heap entry (a new entry): fires at 5.
@example([schedule("k0", 10), cancel("k0"), schedule("k0", 5), advance(7), peek("k0")])
# k0 cancelled and its heap entry dropped, then scheduled again.
@example([schedule("k0", 10), cancel("k0"), advance(12), schedule("k0", 3), advance(3)])
def test_keyed_timers_fire_as_the_eager_model(ops: list[Op]) -> None:
    _run(ops)


@settings(max_examples=100, deadline=None)
@given(_ops)
def test_keyed_timers_fire_as_the_eager_model_through_compactions(ops: list[Op]) -> None:
    """The same with a heap rebuilt every few schedules (a compaction makes every entry exact)."""
    slack = timers_module.COMPACT_SLACK
    timers_module.COMPACT_SLACK = 2
    try:
        _run(ops)
    finally:
        timers_module.COMPACT_SLACK = slack


def test_a_session_timer_moved_later_pushes_once_per_timeout() -> None:
    """A key rescheduled every 5 s to 45 s ahead (a member's session timer) is pushed into the heap
    again only when its old entry surfaces, and fires 45 s after its last schedule."""
    timers, fired = KeyedTimers(), []
    for now_ms in range(0, 450_001, 5_000):
        while (due := timers.pop_due(now_ms)) is not None:
            fired.append(due[0])
        timers.schedule("session", now_ms + 45_000, lambda at_ms: None)
    assert timers.heap_size() == 1 and not fired
    assert timers.next_deadline() == 450_000 + 45_000
    assert timers.pop_due(495_000) is not None and len(timers) == 0


def test_a_cancelled_timer_scheduled_again_later_pushes_nothing() -> None:
    """A key cancelled and scheduled again a few seconds later, to a later deadline (a classic
    member's consumer-sync timer in a consumer group, at every rebalance), is live again in its
    parked entry: one heap entry, and only the last schedule fires."""
    timers, fired = KeyedTimers(), []
    for now_ms in range(0, 20_001, 2_000):
        timers.schedule("sync", now_ms + 30_000, lambda at_ms, now_ms=now_ms: fired.append(now_ms))
        timers.cancel("sync")
        assert not timers.is_scheduled("sync") and timers.deadline("sync") is None and len(timers) == 0
    timers.schedule("sync", 21_000 + 30_000, lambda at_ms: fired.append(at_ms))
    assert timers.heap_size() == 1 and timers.next_deadline() == 51_000
    while (due := timers.pop_due(60_000)) is not None:
        due[1](60_000)
    assert fired == [60_000] and timers.heap_size() == 0
    timers.schedule("sync", 70_000, lambda at_ms: None)
    timers.cancel("sync")
    assert timers.pop_due(80_000) is None and timers.heap_size() == 0 and not timers._parked
