"""A recorded KIP-848 consumer-protocol member, replayed: `RecordedConsumerMember`.

`replay.consumer_member.ConsumerMember` is what the Java consumer with `group.protocol=consumer`
does; this subclass plays one recorded member (a `plan.MemberScript` whose sessions spoke
ConsumerGroupHeartbeat) as the recording says where the protocol leaves the client a choice:

- its member id: since KIP-1082 (Kafka 4.0, ConsumerGroupHeartbeat v1) the client generates it
  (AbstractMembershipManager.memberId(), ConsumerMembershipManager's base: "generated at startup
  and remains unchanged for the entire lifetime of the process"), so a replayed process sends
  the id its recorded session used. Kafka's coordinator keeps members in a
  hash map keyed by that id (GroupMetadataManager.consumerGroupHeartbeat ->
  ConsumerGroup.getOrMaybeCreateMember) and the uniform assignor walks them in its order, so the
  recorded id is what makes the reference assign as the recorded broker did. Epochs stay live:
  every member epoch a replayed member sends is the one its coordinator last answered
  (ConsumerMembershipManager.onHeartbeatSuccess), never the recorded number. A process the
  recording does not have (a scenario's bounce) generates its id as `ConsumerMember` does; a v0
  member gets its id from the coordinator.
- when it heartbeats: the recorded client's next heartbeat when there is one within two
  intervals, else one interval (the coordinator's `heartbeat_interval_ms`) after the answer, as
  the classic member follows its recorded Heartbeats (`ClassicMember._heartbeat_due`). Where the
  state machine sends at once (a rejoin after FENCED_MEMBER_EPOCH, ConsumerHeartbeatRequest-
  Manager's "send now"), it still does: those decisions follow the answers this run gets.
- when it acknowledges a reconciliation: the real client runs its rebalance callbacks and, with
  auto commit, commits before revoking (ConsumerMembershipManager.revokePartitions ->
  commitSync / signalPartitionsRevoked), so its acknowledging heartbeat leaves milliseconds to
  a second after the answer (librdkafka ~10 ms, the Java consumer ~300 ms in the corpus); the
  replayed member sends it at the recorded client's next heartbeat when that falls within
  `ACK_WINDOW_MS` (then it is that acknowledgement), else at once. Whether another member's
  heartbeat arrives before or after it decides when that member gets the released partitions.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from replay.consumer_member import CONSUMER_HEARTBEAT, ConsumerMember
from replay.member import Command, Commands, WakeAt
from replay.plan import MemberScript

ACK_WINDOW_MS = 1_000  # a recorded heartbeat this soon after a new assignment acknowledged it


class RecordedConsumerMember(ConsumerMember):
    """A ConsumerMember with its recorded member ids (one per recorded session, by start time)
    and its recorded heartbeat times."""

    def __init__(
        self,
        *args: Any,
        recorded_ids: Sequence[tuple[int, str]] = (),
        heartbeat_times_ms: Sequence[int] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.recorded_ids = tuple(sorted(recorded_ids))  # (session start ms, member id)
        self.heartbeat_times_ms = tuple(heartbeat_times_ms)
        self._used: set[str] = set()

    def start(self, now_ms: int) -> Commands:
        self._now_ms = now_ms
        return super().start(now_ms)

    def _join(self) -> Commands:
        """The process's member id is the one its recorded session used (see the module doc)."""
        recorded = self._recorded_id(getattr(self, "_now_ms", 0))
        if recorded is not None and self.api_versions[CONSUMER_HEARTBEAT] >= 1:
            self.member_id = recorded
        return super()._join()

    def _recorded_id(self, now_ms: int) -> str | None:
        """The member id of the last recorded session started by `now_ms`, if no process used it."""
        index = bisect.bisect_right(self.recorded_ids, (now_ms, "\uffff"))
        if index == 0:
            return None
        member_id = self.recorded_ids[index - 1][1]
        if member_id in self._used:
            return None
        self._used.add(member_id)
        return member_id

    def on_response(self, now_ms: int, sent: Any, response: Any) -> Commands:
        commands = super().on_response(now_ms, sent, response)
        interval_wake = now_ms + self.heartbeat_interval_ms
        return tuple(
            command._replace(at_ms=self._heartbeat_due(now_ms))
            if type(command) is WakeAt and command.at_ms == interval_wake
            else command
            for command in commands
        )

    def _acknowledge(self, now_ms: int) -> Command:
        """At the recorded acknowledgement's time (the recorded next heartbeat within
        ACK_WINDOW_MS), else at once (see the module doc)."""
        times = self.heartbeat_times_ms
        index = bisect.bisect_right(times, now_ms)
        if index < len(times) and times[index] <= now_ms + ACK_WINDOW_MS:
            return self._wake_at(times[index])
        return super()._acknowledge(now_ms)

    def _heartbeat_due(self, now_ms: int) -> int:
        """The recorded client's next heartbeat within two intervals, else one interval from now."""
        times = self.heartbeat_times_ms
        index = bisect.bisect_right(times, now_ms)
        if index < len(times) and times[index] <= now_ms + 2 * self.heartbeat_interval_ms:
            return times[index]
        return now_ms + self.heartbeat_interval_ms


def recorded_ids(script: MemberScript) -> tuple[tuple[int, str], ...]:
    """(start ms, member id) of each recorded consumer-protocol session of the script."""
    return tuple((s.start_ms, s.member_id) for s in script.sessions if s.member_id)


__all__ = ["RecordedConsumerMember", "recorded_ids"]
