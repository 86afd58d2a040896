"""A replay run: the plan's members under a scenario, through one transport, observed.

`Runner` owns what every run shares: the members (`replay.member`, one per recorded member,
named by its `member_key` in every run and scenario), the scenario's timeline (recorded sessions,
member rules, rolling bounces, faults), the interpretation of the members' commands and the
observer. Where requests go is the transport's business:

- `CoordinatorTransport` (here): the in-process reference coordinator, `handle` / `advance` /
  `next_deadline`, in virtual time (`replay_reference`);
- `replay.live`: one asyncio TCP shell against a broker, in scaled real time.

Members are client state machines, not byte players (GoReplay-style live remapping): member id,
generation and leader in every later request come from the responses this run got.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from proxy.wire import response_schema
from replay import migration
from replay.brokers import group_settings
from replay.clock import VirtualClock
from replay.consumer_member import CONSUMER_HEARTBEAT, is_leave
from replay.coordinator import (
    Append,
    CoordinatorConfig,
    GroupCoordinator,
    KafkaBehaviour,
    Record,
    RequestContext,
    Respond,
)
from replay.coordinator.consumer import ConsumerGroupConfig
from replay.events import REFERENCE_RUN
from replay.member import (
    HEARTBEAT,
    LEAVE,
    REQUEST_TIMEOUT_MS,
    Commands,
    MemberState,
    Send,
    WakeAt,
    from_values,
)
from replay.moves import schedule_restarts
from replay.observe import Exchange, GroupObserver
from replay.plan import RecordedMemberIds, ReplayPlan
from replay.results import RunResult, check_expectations, not_run_result
from replay.scenario import (
    AS_RECORDED,
    BounceOrder,
    FaultKind,
    LeaveOnShutdown,
    MemberSelector,
    MemberSettings,
    Scenario,
    Sessions,
)
from replay.seats import Seat, apply_settings, closes_with_leave, new_seat, to_recorded_protocol

MAX_ROLLING_SPAN_MS = 6 * 3_600_000
"""Longest rolling bounce a run carries out (members x rolling.interval_ms): the per-value bounds of
replay.scenario cannot know the group's size, and a reference run simulates every heartbeat."""


@dataclass(slots=True)
class InFlight:
    seat: Seat
    send: Send
    connection_id: int
    sent_ms: int
    correlation_id: int = -1


class Transport(Protocol):
    def send(self, now_ms: int, flight: InFlight) -> None: ...
    def disconnect(self, connection_id: int, now_ms: int) -> None: ...


def _topics(plan: ReplayPlan, group_id: str) -> dict[str, int]:
    layout = plan.partitions.get(group_id, ({},))[0]
    return {topic: max(parts) + 1 for topic, parts in layout.items() if parts}


class Runner:
    """The scenario timeline and the members' commands; a heap of timed actions."""

    def __init__(self, plan: ReplayPlan, scenario: Scenario, run: str) -> None:
        self.plan = plan
        self.scenario = scenario
        self.observer = GroupObserver(plan.session_id, scenario.name, run)
        self.observer.client_software.update(
            {s.member_key: s.client_software for s in plan.scripts if s.client_software}
        )
        self.transport: Transport | None = None
        self.clock = VirtualClock()
        self._heap: list[tuple[int, int, Callable[[int, Any], None], Any]] = []
        self._seq = 0
        self._connections = 0
        self.rpcs = 0
        self._fault_budget = [f.count for f in scenario.faults]
        self.seats = [new_seat(s, _topics(plan, s.group_id)) for s in plan.scripts]
        self.bounced: list[str] = []  # member_key of each rolling bounce, in order (the steps)
        self.window_start_ms = 0
        self._order: list[Seat] = []
        # (kind, now_ms, flight, response): a synthetic capture records the run through this
        self.recorder: Callable[[str, int, InFlight, Any], None] | None = None
        self.on_close: Callable[[int, int], None] | None = None  # (connection_id, now_ms)
        # A heartbeat sent and answered in one call (CoordinatorTransport.round_trip); True when
        # it took the request, else the general path (submit, faults, transport) sends it.
        self.round_trip: Callable[[int, Seat, Send], bool] | None = None

    @property
    def now_ms(self) -> int:
        return self.clock.now_ms()

    def at(self, when_ms: int, action: Callable[[int, Any], None], arg: Any = None) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (when_ms, self._seq, action, arg))

    # -- commands -----------------------------------------------------------------------------
    def apply(self, now_ms: int, seat: Seat, commands: Commands) -> None:
        for command in commands:
            kind = type(command)  # not `match`: this runs twice per heartbeat
            if kind is WakeAt:
                self._seq += 1
                heapq.heappush(self._heap, (command[0], self._seq, self._wake, (seat, command)))
            elif kind is Send:
                self.submit(now_ms, seat, command)  # type: ignore[arg-type]
            else:
                assert self.transport is not None
                self.transport.disconnect(seat.connection_id, now_ms)
                if self.on_close is not None:
                    self.on_close(seat.connection_id, now_ms)

    def _wake(self, now_ms: int, arg: tuple[Seat, WakeAt]) -> None:
        seat, wake = arg
        commands = seat.member.on_wake(now_ms, wake)
        round_trip = self.round_trip
        if (
            round_trip is None
            or len(commands) != 1
            or type(send := commands[0]) is not Send
            or not round_trip(now_ms, seat, send)
        ):
            self.apply(now_ms, seat, commands)

    def start(self, now_ms: int, seat: Seat) -> None:
        if seat.member.state is MemberState.UNJOINED:
            self._connections += 1
            seat.connection_id = self._connections
        self.apply(now_ms, seat, seat.member.start(now_ms))

    def stop(self, now_ms: int, arg: tuple[Seat, bool]) -> None:
        seat, leave = arg
        self.apply(now_ms, seat, seat.member.stop(now_ms, leave))

    def close(self, now_ms: int, arg: tuple[Seat, bool]) -> None:
        """A recorded stop: the recorded LeaveGroup, or what the member's close() sends."""
        seat, left = arg
        self.stop(now_ms, (seat, closes_with_leave(seat.member, left)))

    def restart(self, now_ms: int, seat: Seat) -> None:
        """A recorded reconnect: the process restarted (a static member sends no LeaveGroup),
        speaking the protocol its recorded session spoke (a migration's restarts)."""
        self.close(now_ms, (seat, False))
        to_recorded_protocol(seat, now_ms)
        self.start(now_ms, seat)

    # -- requests through faults to the transport ---------------------------------------------
    def submit(self, now_ms: int, seat: Seat, send: Send) -> None:
        flight = InFlight(seat, send, seat.connection_id, now_ms)
        if not self.scenario.faults:
            self.rpcs += 1
            self.transport.send(now_ms, flight)  # type: ignore[union-attr]
            return
        for index, fault in enumerate(self.scenario.faults):
            if (
                self._fault_budget[index] > 0
                and fault.api_key == send.api_key
                and now_ms >= self.window_start_ms + fault.at_ms
                and _matches(fault.match, seat)
            ):
                self._fault_budget[index] -= 1
                match fault.kind:
                    case FaultKind.DELAY:
                        self.at(now_ms + fault.delay_ms, self._transmit, flight)
                    case FaultKind.ERROR:
                        self.at(now_ms, self._deliver_at, (flight, _error_response(send, fault.error_code)))
                    case _:  # drop: never arrives; the member gives up after request.timeout.ms
                        self.at(now_ms + REQUEST_TIMEOUT_MS, self._timed_out, flight)
                return
        self._transmit(now_ms, flight)

    def _transmit(self, now_ms: int, flight: InFlight) -> None:
        self.rpcs += 1
        assert self.transport is not None
        self.transport.send(now_ms, flight)

    def _timed_out(self, now_ms: int, flight: InFlight) -> None:
        self.apply(now_ms, flight.seat, flight.seat.member.on_request_timeout(now_ms, flight.send))

    def _deliver_at(self, now_ms: int, arg: tuple[InFlight, Any]) -> None:
        self.deliver(now_ms, arg[0], arg[1])

    def _answered(self, now_ms: int, arg: tuple[Seat, Send, Any]) -> None:
        """What `deliver` does with a steady heartbeat's answer (CoordinatorTransport.round_trip)."""
        seat, send, response = arg
        if send.incarnation == seat.member.incarnation:
            self.apply(now_ms, seat, seat.member.on_response(now_ms, send, response))

    def deliver(self, now_ms: int, flight: InFlight, response: Any) -> None:
        seat, send = flight.seat, flight.send
        if self.recorder is not None and flight.correlation_id >= 0:
            self.recorder("response", now_ms, flight, response)
        if send.incarnation != seat.member.incarnation and send.api_key != LEAVE and not is_leave(send):
            # The process that sent it is gone (stopped, restarted or fenced): its connection is
            # closed, so no client reads this answer and no capture holds it. Kafka still answers
            # a dead static member's held JoinGroup with FENCED_INSTANCE_ID when its successor
            # joins (KIP-345 replaceStaticMember); observing that made the reference "fence"
            # members the recording never saw. A LeaveGroup is the one answer close() awaits.
            return
        if response.error_code != 0 or (send.api_key != HEARTBEAT and not _uneventful(send, response)):
            self.observer.observe(
                Exchange(
                    now_ms, seat.script.member_key, send.api_key, send.api_version, send.request, response
                )
            )
        self.apply(now_ms, seat, seat.member.on_response(now_ms, send, response))

    # -- the timeline -------------------------------------------------------------------------
    def schedule(self) -> int:
        """Queue sessions, bounces and stops; returns when the run ends (virtual ms)."""
        scenario = self.scenario
        for seat in self.seats:
            for rule in scenario.members:
                if _matches(rule.match, seat):
                    apply_settings(seat, rule.settings, scenario.broker_api_versions)
                    break
            else:
                apply_settings(seat, MemberSettings(), scenario.broker_api_versions)
        end_ms = self.plan.end_ms
        first_joins = [seat.script.sessions[0].start_ms for seat in self.seats]
        settle_ms = max(first_joins) if first_joins else 0
        for seat in self.seats:
            self._schedule_sessions(seat)
        rolling = scenario.rolling
        if rolling is not None:
            first_bounce = settle_ms + rolling.start_ms
            self.window_start_ms = first_bounce
            count = self._bounced_count()
            if count * rolling.interval_ms > MAX_ROLLING_SPAN_MS:
                hours = count * rolling.interval_ms / 3_600_000
                raise ValueError(
                    f"{scenario.source}: rolling.interval_ms: a bounce of {count} members every "
                    f"{rolling.interval_ms} ms spans {hours:.1f} h, more than "
                    f"{MAX_ROLLING_SPAN_MS // 3_600_000} h: lower the interval"
                )
            for index in range(count):
                self.at(first_bounce + index * rolling.interval_ms, self._bounce, index)
            end_ms = max(end_ms, first_bounce + count * rolling.interval_ms + rolling.downtime_ms)
        else:
            self.window_start_ms = settle_ms if scenario is not AS_RECORDED else 0
        end_ms = max(end_ms, schedule_restarts(self, settle_ms))  # scenario coordinator_restarts
        return end_ms + scenario.duration_ms

    def _schedule_sessions(self, seat: Seat) -> None:
        """The member's recorded sessions (keep-running: only its first start)."""
        sessions = seat.script.sessions
        if self.scenario.sessions is Sessions.KEEP_RUNNING:
            sessions = sessions[:1]
        for index, session in enumerate(sessions):
            self.at(session.start_ms, self.start if index == 0 else self.restart, seat)
            if session.stop_ms is not None and self.scenario.sessions is Sessions.AS_RECORDED:
                self.at(session.stop_ms, self.close, (seat, session.left))

    def _bounced_count(self) -> int:
        """How many seats the rolling bounce can take (its time counts only theirs). A `leader`
        condition is decided at the first bounce: the seats only a `leader: true` selector could
        take count once per group (one leader each); never below what `_bounce_order` yields."""
        rolling = self.scenario.rolling
        assert rolling is not None
        if not rolling.members:
            return len(self.seats)
        certain = 0
        leader_groups: set[str] = set()  # one leader per group
        for seat in self.seats:
            if any(_could_match(m, seat, is_leader=False) for m in rolling.members):
                certain += 1
            elif any(_could_match(m, seat, is_leader=True) for m in rolling.members):
                leader_groups.add(seat.script.group_id)
        return certain + len(leader_groups)

    def _bounce_order(self) -> list[Seat]:
        rolling = self.scenario.rolling
        assert rolling is not None
        seats = [s for s in self.seats if not rolling.members or any(_matches(m, s) for m in rolling.members)]
        match rolling.order:
            case BounceOrder.REVERSE:
                seats.reverse()
            case BounceOrder.LEADER_FIRST:
                seats.sort(key=lambda s: not s.member.is_leader)
            case BounceOrder.LEADER_LAST:
                seats.sort(key=lambda s: s.member.is_leader)
        return seats

    def _bounce(self, now_ms: int, index: int) -> None:
        """The index-th bounce: the order is decided when the first bounce starts (the leader then)."""
        if index == 0:
            self._order = self._bounce_order()
        if index >= len(self._order):
            return
        seat = self._order[index]
        rolling = self.scenario.rolling
        assert rolling is not None
        static = seat.member.instance_id is not None
        leave = rolling.leave_on_shutdown == LeaveOnShutdown.ALWAYS or (
            rolling.leave_on_shutdown == LeaveOnShutdown.DYNAMIC
            and closes_with_leave(seat.member, not static)
        )
        self.bounced.append(seat.script.member_key)
        self.stop(now_ms, (seat, leave))
        self.at(now_ms + rolling.downtime_ms, self._restart_bounced, seat)

    def _restart_bounced(self, now_ms: int, seat: Seat) -> None:
        assert self.scenario.rolling is not None
        apply_settings(seat, self.scenario.rolling.after, self.scenario.broker_api_versions)
        self.start(now_ms, seat)

    def result(self, end_ms: int) -> RunResult:
        events = tuple(self.observer.events)
        failures = tuple(check_expectations(self.scenario, events, self.window_start_ms, self.bounced))
        steps: tuple[migration.StepStats, ...] = ()
        if self.scenario.uses_consumer_protocol:
            rolling = self.scenario.rolling
            interval = rolling.interval_ms if rolling is not None else None
            steps = tuple(migration.step_stats(events, self.window_start_ms, interval, self.bounced))
        return RunResult(self.observer.run, events, self.rpcs, end_ms, failures, steps=steps)


def _uneventful(send: Send, response: Any) -> bool:
    """A successful heartbeat the observer derives nothing from (replay.observe): a classic
    Heartbeat (`deliver` checks that one inline, the hot path), or a KIP-848 one answered with
    the same epoch and no assignment (a leave, epoch -1 / -2, is answered with its own epoch and is
    a `member_left`)."""
    return send.api_key == HEARTBEAT or (
        send.api_key == CONSUMER_HEARTBEAT
        and response.assignment is None
        and response.member_epoch == send.request.member_epoch
        and response.member_epoch >= 0
    )


def _matches(selector: MemberSelector, seat: Seat) -> bool:
    return _could_match(selector, seat, is_leader=seat.member.is_leader)


def _could_match(selector: MemberSelector, seat: Seat, *, is_leader: bool) -> bool:
    script = seat.script
    return selector.matches(
        client_id=script.client_id,
        ordinal=script.ordinal,
        instance_id=script.group_instance_id,
        member_key=script.member_key,
        is_leader=is_leader,
    )


def _error_response(send: Send, error_code: int) -> Any:
    return from_values(response_schema(send.api_key, send.api_version), {"error_code": ErrorCode(error_code)})


# ---------------------------------------------------------------------------------------------
# In process: the reference coordinator in virtual time


class CoordinatorTransport:
    """Requests go to `GroupCoordinator.handle`; its `Respond`s come back as deliveries.

    One request at a time per connection, as a broker reads them: "The broker's request
    processing allows only a single in-flight request per connection" (Kafka protocol guide;
    SocketServer mutes a channel until its response is sent). A LeaveGroup sent while the same
    member's JoinGroup is held waits for that JoinGroup's answer, as it does on a live broker
    (`replay.live.Connection`); the reference used to take it at once and answer the held
    JoinGroup UNKNOWN_MEMBER_ID, which Kafka 3.9.2 never did."""

    def __init__(
        self, runner: Runner, config: CoordinatorConfig | None, consumer: ConsumerGroupConfig | None = None
    ) -> None:
        self.runner = runner
        self.consumer_config = consumer
        self.coordinator = GroupCoordinator(config)
        self.records: list[Record] = []  # the coordinator's log (replay.coordinator.records)
        self.configure(self.coordinator)
        self._correlation = 0
        self._pending: dict[tuple[int, int], InFlight] = {}
        self._queued: dict[int, list[InFlight]] = {}  # connection -> requests behind its unanswered one

    def configure(self, coordinator: GroupCoordinator) -> None:
        """The scenario's KIP-848 rules and topics, on this coordinator or one that replaces it."""
        configure_consumer_groups(coordinator, self.runner, self.consumer_config)

    def send(self, now_ms: int, flight: InFlight) -> None:
        queued = self._queued.get(flight.connection_id)
        if queued is not None:
            queued.append(flight)
            return
        self._queued[flight.connection_id] = []
        self._handle(now_ms, flight)

    def _release(self, now_ms: int, connection_id: int) -> None:
        """The connection's request was answered: the broker reads the next one."""
        queued = self._queued.get(connection_id)
        if queued:
            self._handle(now_ms, queued.pop(0))
        else:
            self._queued.pop(connection_id, None)

    def _handle(self, now_ms: int, flight: InFlight) -> None:
        self._correlation += 1
        context = RequestContext(
            connection_id=flight.connection_id,
            client_id=flight.seat.script.client_id,
            client_host="/127.0.0.1",
            api_version=flight.send.api_version,
            correlation_id=self._correlation,
        )
        self._pending[(flight.connection_id, self._correlation)] = flight
        if self.runner.recorder is not None:
            flight.correlation_id = self._correlation
            self.runner.recorder("request", now_ms, flight, None)
        self.outputs(now_ms, self.coordinator.handle(now_ms, context, flight.send.request))

    def round_trip(self, now_ms: int, seat: Seat, send: Send) -> bool:
        """A heartbeat woken by its timer, sent and answered in one call: the hot path of a long
        replay, where almost every request is a heartbeat that changes nothing. It does what
        `Runner.submit`, `send`, `_handle`, `outputs` and `Runner.deliver` do for it, without
        their bookkeeping (no InFlight, queue or pending entry) as long as the answer is the only
        output and the observer derives nothing from it (`_uneventful`); any other outcome is
        handed to `outputs` exactly as `_handle` would have. The run must have no faults and no
        recorder (`run_virtual` decides); a KIP-848 answer still goes through the heap, as
        `outputs` sends it. False, having done nothing: another request of the connection is
        unanswered. tests/test_replay_round_trip.py runs random scenarios both ways: same
        events, requests and coordinator records."""
        api_key = send.api_key
        if api_key != HEARTBEAT and api_key != CONSUMER_HEARTBEAT:
            return False
        connection_id = seat.connection_id
        if connection_id in self._queued:
            return False
        runner = self.runner
        runner.rpcs += 1
        self._correlation += 1
        context = RequestContext(
            connection_id=connection_id,
            client_id=seat.script.client_id,
            client_host="/127.0.0.1",
            api_version=send.api_version,
            correlation_id=self._correlation,
        )
        outputs = self.coordinator.handle(now_ms, context, send.request)
        if len(outputs) == 1 and type(output := outputs[0]) is Respond and output.context is context:
            response = output.response
            if response.error_code == 0:
                if api_key == HEARTBEAT:
                    runner.apply(now_ms, seat, seat.member.on_response(now_ms, send, response))
                    return True
                if _uneventful(send, response):  # through the heap, as `outputs` delivers it
                    runner.at(now_ms, runner._answered, (seat, send, response))
                    return True
        self._queued[connection_id] = []
        self._pending[(connection_id, self._correlation)] = InFlight(seat, send, connection_id, now_ms)
        self.outputs(now_ms, outputs)
        return True

    def disconnect(self, connection_id: int, now_ms: int) -> None:
        """A classic-protocol coordinator does not track connections: nothing to tell it."""

    def outputs(self, now_ms: int, outputs: list[Any]) -> None:
        for output in outputs:
            if type(output) is Append:
                self.records.append(output.record)
            elif isinstance(output, Respond):
                flight = self._pending.pop(
                    (output.context.connection_id, output.context.correlation_id), None
                )
                if flight is None:
                    continue
                if flight.send.api_key == HEARTBEAT:
                    # a heartbeat answer only schedules the next beat: deliver it now (the hot path)
                    self._release(now_ms, flight.connection_id)
                    self.runner.deliver(now_ms, flight, output.response)
                else:
                    self.runner.at(now_ms, self.runner._deliver_at, (flight, output.response))
                    self._release(now_ms, flight.connection_id)


def configure_consumer_groups(
    coordinator: GroupCoordinator, runner: Runner, config: ConsumerGroupConfig | None = None
) -> None:
    """KIP-848 on a reference coordinator (a new one too, e.g. after a restart): `config` (else
    the scenario's broker rules on Kafka's defaults), and the topics the members know, with the
    ids the reference gives them, so the observer names consumer-protocol assignments."""
    consumer = coordinator.consumer
    consumer.coordinator.config = config or runner.scenario.broker.consumer_config()
    consumer.coordinator.topic_id_overrides.update(runner.plan.topic_ids)  # the recorded topic ids
    topics = {topic: count for seat in runner.seats for topic, count in seat.topics.items()}
    consumer.use_topics(topics)
    runner.observer.topic_names.update({consumer.coordinator.topic_id(t): t for t in topics})


def run_virtual(
    runner: Runner, transport: CoordinatorTransport, progress: Callable[[int, int], None] | None
) -> int:
    """Jump from member action to coordinator deadline until the scenario's end."""
    runner.transport = transport
    end_ms = runner.schedule()
    if not runner.scenario.faults and runner.recorder is None:
        runner.round_trip = transport.round_trip
    heap, clock = runner._heap, runner.clock
    last_report = 0
    while True:
        coordinator = transport.coordinator  # a scenario's coordinator_restarts replace it
        next_action = heap[0][0] if heap else None
        deadline = coordinator.next_deadline()
        if next_action is None and deadline is None:
            break
        if deadline is not None and (next_action is None or deadline < next_action):
            if deadline > end_ms:
                break
            now_ms = clock.advance_to(deadline)
            transport.outputs(now_ms, coordinator.advance(now_ms))
            continue
        assert next_action is not None
        if next_action > end_ms:
            break
        when, _, action, arg = heapq.heappop(heap)
        now_ms = clock.advance_to(when)
        action(now_ms, arg)
        if progress is not None and now_ms - last_report >= 10_000:
            last_report = now_ms
            progress(now_ms, end_ms)
    if progress is not None:
        progress(end_ms, end_ms)
    return end_ms


def replay_reference(
    plan: ReplayPlan,
    scenario: Scenario = AS_RECORDED,
    *,
    config: CoordinatorConfig | None = None,
    consumer: ConsumerGroupConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RunResult:
    """Replay against the in-process reference coordinator in virtual time, with the recorded
    broker's group settings (capture header; Kafka's defaults where unknown) unless `config`,
    and the scenario's KIP-848 broker rules on Kafka's group.consumer.* defaults unless
    `consumer` (a comparison with a broker started with other group.consumer.* settings)."""
    if config is None:
        config = group_settings(plan.group_settings).config
    if scenario.uses_consumer_protocol or scenario.broker.build is not None or plan.uses_consumer_protocol:
        # KIP-848 runs on the new group coordinator only (Kafka 4.x)
        config = dataclasses.replace(config, kafka_behaviour=KafkaBehaviour.NEW_COORDINATOR)
    changed = scenario.members or scenario.rolling or scenario.faults or scenario.coordinator_restarts
    if config.member_ids is None and not changed:
        # the recorded membership: the members get the ids the recorded broker gave them
        config = dataclasses.replace(config, member_ids=RecordedMemberIds(plan))
    runner = Runner(plan, scenario, REFERENCE_RUN)
    end_ms = run_virtual(runner, CoordinatorTransport(runner, config, consumer), progress)
    return runner.result(end_ms)


__all__ = [
    "CoordinatorTransport",
    "InFlight",
    "RunResult",
    "Runner",
    "Seat",
    "Transport",
    "check_expectations",
    "configure_consumer_groups",
    "not_run_result",
    "replay_reference",
    "run_virtual",
]
