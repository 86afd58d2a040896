"""Per-connection correlation table: pairs each response with the request it answers.

Kafka answers the requests of one connection in the order they were sent (the broker's
`RequestChannel` processes one request per connection at a time), so the table is a FIFO: a
response whose correlation id is not the oldest pending request's is a protocol error, except for
Produce requests with acks=0, which get no response at all and are skipped over.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from proxy.wire.apis import ApiKey

# Produce requests whose acks are 0 are never answered. When more than this many requests are
# pending, the oldest Produce requests are forgotten (a fire-and-forget producer never sends a
# request that would be answered, so without a bound the table would grow forever; Kafka clients
# keep at most a handful of requests in flight otherwise).
MAX_PENDING_REQUESTS = 10_000


class CorrelationError(ValueError):
    """A response that does not answer the oldest pending request of its connection."""


class PendingRequest(NamedTuple):
    """What a response needs from its request: how to decode it and how to label it.

    A NamedTuple rather than a frozen dataclass: one is built per relayed request, and tuple
    construction is about three times cheaper on that hot path.
    """

    api_key: int
    api_version: int  # the version the client sent (what the client expects back)
    correlation_id: int
    client_id: str | None
    upstream_api_version: int  # the version the broker saw (differs when a rewrite re-encoded it)
    group_id: str | None = None
    sent_ns: int = 0


# A pending request as the relay's fast path stores it: the fields of `PendingRequest`, in order,
# as a plain tuple (building the NamedTuple per relayed request costs more than the relay itself).
PendingTuple = tuple[int, int, int, str | None, int, str | None, int]


class CorrelationTable:
    """FIFO of requests awaiting their responses on one connection.

    `pending` is public for the relay's fast path, which appends plain `PendingTuple`s and pops
    the head itself when a response answers it; it calls `trim` when the table grew past
    `MAX_PENDING_REQUESTS`.
    """

    __slots__ = ("_trim_at", "forgotten", "pending")

    def __init__(self) -> None:
        self.pending: deque[PendingTuple] = deque()
        # Produce requests trimmed from `pending`, by correlation id: a slow broker may still
        # answer one (acks != 0), and its answer must not close the connection. Bounded.
        self.forgotten: dict[int, PendingTuple] = {}
        self._trim_at = MAX_PENDING_REQUESTS  # the next size at which trimming is worth a pass

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, request: PendingTuple) -> None:
        self.pending.append(request)
        if len(self.pending) > self._trim_at:
            self.trim()

    def trim(self) -> None:
        """Set aside the oldest Produce requests (acks=0: never answered) beyond half the bound.

        Amortized O(1) per request (issue 18 defect 2: one pass per request over 10,000 pending
        ones stalled the event loop for every connection): each pass removes down to half the
        bound, and when nothing can be removed the next pass waits until the table has doubled.
        """
        pending = self.pending
        if len(pending) <= max(self._trim_at, MAX_PENDING_REQUESTS):
            return
        excess = len(pending) - MAX_PENDING_REQUESTS // 2
        kept: list[PendingTuple] = []
        forgotten = self.forgotten
        for entry in pending:
            if excess > 0 and entry[0] == ApiKey.PRODUCE:
                excess -= 1
                forgotten[entry[2]] = entry
            else:
                kept.append(entry)
        if len(kept) != len(pending):
            pending.clear()
            pending.extend(kept)
        while len(forgotten) > 4 * MAX_PENDING_REQUESTS:
            del forgotten[next(iter(forgotten))]
        self._trim_at = max(MAX_PENDING_REQUESTS, 2 * len(pending))

    def pop(self, correlation_id: int) -> PendingRequest:
        """The request a response with this correlation id answers; raises CorrelationError."""
        pending = self.pending
        forgotten = self.forgotten
        while pending:
            head = pending[0]
            if head[2] == correlation_id:
                pending.popleft()
                return head if type(head) is PendingRequest else PendingRequest._make(head)
            if forgotten and correlation_id in forgotten:  # set aside by `trim`, answered after all
                return PendingRequest._make(forgotten.pop(correlation_id))
            if head[0] != ApiKey.PRODUCE:
                raise CorrelationError(
                    f"response correlation_id={correlation_id} out of order: oldest pending request is "
                    f"correlation_id={head[2]} (api_key={head[0]})"
                )
            pending.popleft()  # An acks=0 Produce: never answered, skip it.
        if correlation_id in forgotten:
            return PendingRequest._make(forgotten.pop(correlation_id))
        raise CorrelationError(f"response correlation_id={correlation_id} answers no pending request")
