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

# Produce requests whose acks are 0 are never answered; the table remembers at most this many
# unanswered ones in a row before it forgets the oldest (a fire-and-forget producer never sends a
# request that would be answered, so without a bound the table would grow forever).
MAX_UNANSWERED_PRODUCE = 10_000


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


class CorrelationTable:
    """FIFO of requests awaiting their responses on one connection."""

    __slots__ = ("_pending", "_unanswered_produce")

    def __init__(self) -> None:
        self._pending: deque[PendingRequest] = deque()
        self._unanswered_produce = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, request: PendingRequest) -> None:
        self._pending.append(request)
        if request.api_key == ApiKey.PRODUCE:
            self._unanswered_produce += 1
            if self._unanswered_produce > MAX_UNANSWERED_PRODUCE:
                self._drop_oldest_produce()
        else:
            self._unanswered_produce = 0

    def _drop_oldest_produce(self) -> None:
        for index, pending in enumerate(self._pending):
            if pending.api_key == ApiKey.PRODUCE:
                del self._pending[index]
                self._unanswered_produce -= 1
                return

    def pop(self, correlation_id: int) -> PendingRequest:
        """The request a response with this correlation id answers; raises CorrelationError."""
        pending = self._pending
        while pending:
            head = pending.popleft()
            if head.correlation_id == correlation_id:
                if head.api_key == ApiKey.PRODUCE:
                    self._unanswered_produce = max(0, self._unanswered_produce - 1)
                return head
            if head.api_key != ApiKey.PRODUCE:
                pending.appendleft(head)
                raise CorrelationError(
                    f"response correlation_id={correlation_id} out of order: oldest pending request is "
                    f"correlation_id={head.correlation_id} (api_key={head.api_key})"
                )
            # An acks=0 Produce: never answered, skip it.
            self._unanswered_produce = max(0, self._unanswered_produce - 1)
        raise CorrelationError(f"response correlation_id={correlation_id} answers no pending request")

    def peek_oldest(self) -> PendingRequest | None:
        return self._pending[0] if self._pending else None
