"""A tiny in-process client for the sans-IO coordinator, shared by the coordinator tests."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from replay.coordinator import (
    Append,
    CoordinatorConfig,
    GroupCoordinator,
    GroupEvent,
    Record,
    RequestContext,
    Respond,
)
from replay.coordinator import requests as Q


@dataclass
class Sim:
    config: CoordinatorConfig = field(
        default_factory=lambda: CoordinatorConfig(group_initial_rebalance_delay_ms=0)
    )
    now_ms: int = 0
    coordinator: GroupCoordinator = field(init=False)
    responses: dict[int, list[Any]] = field(default_factory=dict)  # correlation id -> responses
    events: list[GroupEvent] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)  # what the coordinator appended to its log
    _correlation: int = 0

    def __post_init__(self) -> None:
        self.coordinator = GroupCoordinator(self.config)

    def _collect(self, outputs: list[Any]) -> None:
        for out in outputs:
            if isinstance(out, Respond):
                self.responses.setdefault(out.context.correlation_id, []).append(out.response)
            elif isinstance(out, Append):
                self.records.append(out.record)
            else:
                self.events.append(out)

    def send(self, conn: int, api_version: int, request: Any, client_id: str = "cli") -> int:
        """Send a request; returns its correlation id (look the answer up with `answer`)."""
        self._correlation += 1
        ctx = RequestContext(conn, client_id, "/127.0.0.1", api_version, self._correlation)
        self._collect(self.coordinator.handle(self.now_ms, ctx, request))
        return self._correlation

    def call(self, conn: int, api_version: int, request: Any, client_id: str = "cli") -> Any:
        """Send and require an immediate single answer."""
        cid = self.send(conn, api_version, request, client_id)
        got = self.responses.get(cid, [])
        assert len(got) == 1, f"expected one immediate answer, got {got}"
        return got[0]

    def answer(self, correlation_id: int) -> Any | None:
        got = self.responses.get(correlation_id, [])
        assert len(got) <= 1, f"request {correlation_id} answered twice: {got}"
        return got[0] if got else None

    def tick(self, to_ms: int) -> None:
        self.now_ms = to_ms
        self._collect(self.coordinator.advance(to_ms))

    def run_timers(self, until_ms: int) -> None:
        """Advance deadline by deadline up to `until_ms`."""
        while True:
            deadline = self.coordinator.next_deadline()
            if deadline is None or deadline > until_ms:
                break
            self.tick(max(deadline, self.now_ms))
        self.now_ms = max(self.now_ms, until_ms)

    def state(self, group_id: str = "g") -> str:
        return self.coordinator.groups[group_id].state.value

    def kinds(self) -> list[str]:
        return [e.event.value for e in self.events]

    def join(self, conn: int, api_version: int, member_id: str = "", **kw: Any) -> int:
        return self.send(
            conn, api_version, Q.join_group(api_version, "g", member_id, **kw), client_id=f"c{conn}"
        )

    def sync(self, conn: int, api_version: int, generation: int, member_id: str, **kw: Any) -> int:
        return self.send(conn, api_version, Q.sync_group(api_version, "g", generation, member_id, **kw))

    def heartbeat(self, conn: int, api_version: int, generation: int, member_id: str, **kw: Any) -> Any:
        return self.call(conn, api_version, Q.heartbeat(api_version, "g", generation, member_id, **kw))
