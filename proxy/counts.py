"""Frames, bytes and latency per API key, counted by each relay session for the proxy's metrics."""

from __future__ import annotations

API_KEY_SLOTS = 128  # Kafka's API keys are below this (kio knows up to 92); unknown ones never count


class ApiCounts:
    """Frames and bytes per API key (list index) in each direction, for the proxy's metrics."""

    __slots__ = ("join_responses", "latency_ns", "request_bytes", "requests", "response_bytes", "responses")

    def __init__(self) -> None:
        self.requests = [0] * API_KEY_SLOTS
        self.request_bytes = [0] * API_KEY_SLOTS
        self.responses = [0] * API_KEY_SLOTS
        self.response_bytes = [0] * API_KEY_SLOTS
        # Sum over answered requests of (response seen - request seen), as the proxy saw them.
        self.latency_ns = [0] * API_KEY_SLOTS
        # JoinGroup responses per group id: each is a member joining a rebalance ("rebalances seen").
        self.join_responses: dict[str, int] = {}

    def count_join(self, group_id: str | None) -> None:
        key = group_id or ""
        self.join_responses[key] = self.join_responses.get(key, 0) + 1

    def add(self, other: ApiCounts) -> None:
        for group, count in other.join_responses.items():
            self.join_responses[group] = self.join_responses.get(group, 0) + count
        for mine, theirs in (
            (self.requests, other.requests),
            (self.request_bytes, other.request_bytes),
            (self.responses, other.responses),
            (self.response_bytes, other.response_bytes),
            (self.latency_ns, other.latency_ns),
        ):
            for index, value in enumerate(theirs):
                if value:
                    mine[index] += value


__all__ = ["API_KEY_SLOTS", "ApiCounts"]
