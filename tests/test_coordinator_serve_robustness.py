"""`coordinator serve` survives any request sequence (issue 18 defect 1).

Real TCP against an in-process `ReferenceServer`, requests encoded by kio through `proxy.wire`.
Each test names the defect it pins: a timer that raises must not stop other groups' timers, a
handler that raises answers (or drops) only its own request, and a client that goes away while
its JoinGroup is parked releases its connection.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from proxy.wire import ApiKey
from replay.coordinator import CoordinatorConfig, CoordinatorFault, GroupCoordinator
from replay.coordinator import requests as Q
from replay.server import ReferenceServer
from tests.support.serve import WireClient

E = ErrorCode
TWICE = (("range", b""), ("range", b""))


def run_served(scenario: Callable[[ReferenceServer, int], Awaitable[None]]) -> None:
    async def main() -> None:
        server = ReferenceServer(CoordinatorConfig(group_initial_rebalance_delay_ms=0), {"events": 2})
        _, port = await server.start("127.0.0.1", 0)
        try:
            await scenario(server, port)
        finally:
            assert server.server is not None
            server.server.close()

    asyncio.run(main())


async def eventually(predicate: Callable[[], bool], timeout_s: float = 10) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


def test_a_failing_join_timer_leaves_the_other_groups_timers_running(caplog: Any) -> None:
    """The minimal trigger of issue 18: a JoinGroup listing `range` twice. Kafka counts protocol
    names per occurrence (ClassicGroup.incrementSupportedProtocols), so no protocol is supported
    by `members.size()` votes and selectProtocol throws when the join phase completes on the
    timer. Kafka's timer thread logs that and keeps running; so must serve's."""

    async def scenario(server: ReferenceServer, port: int) -> None:
        poisoned = await WireClient.connect(port, "robustness")
        await poisoned.send(Q.join_group(3, "poisoned", protocols=TWICE))
        await eventually(lambda: server.coordinator.fault_count == 1)
        assert "does not support any of the candidate protocols" in server.coordinator.faults[-1]

        healthy = await WireClient.connect(port, "robustness")
        joined = await healthy.call(Q.join_group(3, "healthy"), timeout_s=5)
        assert joined.error_code == E.none and joined.generation_id == 1
        assert await healthy.alive()
        # Kafka keeps the poisoned member's connection (its JoinGroup is never answered).
        assert len(server.connections) == 2
        for client in (poisoned, healthy):
            client.close()

    with caplog.at_level(logging.WARNING, "group_replay.coordinator"):
        run_served(scenario)
    assert any("timer join-poisoned failed" in r.getMessage() for r in caplog.records)


def test_a_handler_that_raises_answers_unknown_server_error_and_keeps_the_connection() -> None:
    """The join phase completing inside a JoinGroup request (the leader of a one-member Stable
    group rejoins, now listing `range` twice) hits the same selectProtocol failure: Kafka's
    KafkaApis answers that request with UNKNOWN_SERVER_ERROR and keeps the connection."""

    async def scenario(server: ReferenceServer, port: int) -> None:
        a = await WireClient.connect(port, "robustness")
        first = await a.call(Q.join_group(3, "g"))
        assert first.error_code == E.none
        synced = await a.call(Q.sync_group(3, "g", 1, first.member_id, assignments={first.member_id: b""}))
        assert synced.error_code == E.none
        rejoin = await a.call(Q.join_group(3, "g", first.member_id, protocols=TWICE))
        assert rejoin.error_code == E.unknown_server_error
        assert server.coordinator.fault_count == 1
        assert await a.alive()
        other = await WireClient.connect(port, "robustness")
        assert (await other.call(Q.join_group(3, "other"))).error_code == E.none
        for client in (a, other):
            client.close()

    run_served(scenario)


def _fails_on_group(coordinator: GroupCoordinator) -> GroupCoordinator:
    """Fault injection: a DescribeGroups of group `boom` raises (no error response is built for
    that API, so the server must drop the one connection)."""
    route = coordinator.routes[ApiKey.DESCRIBE_GROUPS]

    def describe(ctx: Any, request: Any, group: Any) -> None:
        if "boom" in request.groups:
            raise RuntimeError("injected")
        route.handle(ctx, request, group)

    coordinator.register(dataclasses.replace(route, handle=describe))
    return coordinator


def test_an_exception_from_handle_closes_only_that_connection(caplog: Any) -> None:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    async def scenario(server: ReferenceServer, port: int) -> None:
        _fails_on_group(server.coordinator)
        bad = await WireClient.connect(port, "robustness")
        good = await WireClient.connect(port, "robustness")
        await bad.send(DescribeGroupsRequest(groups=("boom",), include_authorized_operations=False))
        assert await asyncio.wait_for(bad.reader.read(100), 5) == b""
        described = await good.call(DescribeGroupsRequest(groups=("g",), include_authorized_operations=False))
        assert described.groups[0].group_state == "Dead"
        joined = await good.call(Q.join_group(3, "after"), timeout_s=5)  # the timer task runs
        assert joined.error_code == E.none
        await eventually(lambda: len(server.connections) == 1)
        for client in (bad, good):
            client.close()

    with caplog.at_level(logging.WARNING, "group_replay.coordinator"):
        run_served(scenario)
    assert any("injected" in r.getMessage() and "closing it" in r.getMessage() for r in caplog.records)


def test_a_client_gone_while_its_join_is_parked_releases_its_connection() -> None:
    """A muted connection still notices its peer closing (Kafka's selector does): abandoned
    parked JoinGroups must not keep their connections, however many there are."""

    async def scenario(server: ReferenceServer, port: int) -> None:
        leader = await WireClient.connect(port, "robustness")
        # A long session: the leader neither expires nor rejoins during the test, so the
        # newcomers' JoinGroups stay parked.
        first = await leader.call(Q.join_group(3, "parked", session_timeout_ms=60_000))
        await leader.call(Q.sync_group(3, "parked", 1, first.member_id, assignments={}))
        abandoned = []
        for _ in range(20):
            client = await WireClient.connect(port, "robustness")
            await client.send(Q.join_group(3, "parked"))  # parked until the leader rejoins
            abandoned.append(client)
        await eventually(lambda: len(server.connections) == 21)
        for client in abandoned:
            client.close()
        await eventually(lambda: len(server.connections) == 1, timeout_s=5)
        assert await leader.alive()
        leader.close()

    run_served(scenario)


def test_core_fault_without_an_error_response_returns_the_outputs_made_before_it() -> None:
    from kio.schema.describe_groups.v5.request import DescribeGroupsRequest

    from replay.coordinator import RequestContext

    coordinator = _fails_on_group(GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0)))
    ctx = RequestContext(1, "c", "/h", 5, 1)
    with pytest.raises(CoordinatorFault) as caught:
        coordinator.handle(
            0, ctx, DescribeGroupsRequest(groups=("boom",), include_authorized_operations=False)
        )
    assert caught.value.outputs == []
    assert coordinator.fault_count == 1
