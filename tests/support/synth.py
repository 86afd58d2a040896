"""Synthetic captures: a reference run recorded through the proxy's capture writer (tests, bench).

Frames go through `proxy.capture.writer.CaptureWriter` exactly as the proxy records them (client
leg = upstream leg, nothing rewritten), so `replay.plan.build_plan` reads them like a real one.
"""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

from kio.schema.errors import ErrorCode
from kio.static.primitive import i32Timedelta

from proxy.capture.header import GroupSettings
from proxy.capture.writer import CaptureWriter
from proxy.session import Record
from proxy.wire import encode_request, encode_response, request_schema, response_schema
from proxy.wire.apis import ApiKey
from proxy.wire.consumer_protocol import encode_subscription
from proxy.wire.convert import convert
from replay.brokers import group_settings as replay_group_settings
from replay.member import JOIN, NEWEST, companion_versions, from_values
from replay.plan import MemberScript, ReplayPlan, Session
from replay.run import CoordinatorTransport, InFlight, Runner, run_virtual
from replay.scenario import AS_RECORDED, RollingBounce

API_VERSIONS = int(ApiKey.API_VERSIONS)


def synthesize_capture(  # noqa: C901 - counts its nested `record` callback, which shares the writer
    path: Any,
    *,
    members: int = 3,
    group_id: str = "replay-group",
    client_id: str = "consumer",
    static: bool = False,
    join_api_version: int = 9,
    topic: str = "orders",
    partitions: int = 6,
    duration_ms: int = 60_000,
    heartbeat_interval_ms: int = 3_000,
    session_timeout_ms: int = 45_000,
    rebalance_timeout_ms: int = 300_000,
    stagger_ms: int = 200,
    rolling_bounce: bool = False,
    client_software: str | None = None,
    assignor: str = "range",
    group_settings: GroupSettings | None = None,
) -> ReplayPlan:
    """Write a capture of `members` consumers running against the reference coordinator.

    With `client_software` ("name/version"), every connection opens with an ApiVersions v3
    exchange naming it, as KIP-511 clients do.

    Frames go through `proxy.capture.writer.CaptureWriter` exactly as the proxy records them
    (client leg = upstream leg, nothing rewritten); the returned plan is what was driven.
    """

    def ms(value: int) -> Any:
        return i32Timedelta.parse(datetime.timedelta(milliseconds=value))

    join_cls = request_schema(JOIN, NEWEST[JOIN])
    blob_version = 2 if "sticky" in assignor else 0  # owned partitions and generation (KIP-429/792)
    scripts = []
    for ordinal in range(members):
        instance_id = f"{client_id}-{ordinal}" if static else None
        template = from_values(
            join_cls,
            {
                "group_id": group_id,
                "session_timeout": ms(session_timeout_ms),
                "rebalance_timeout": ms(rebalance_timeout_ms),
                "member_id": "",
                "group_instance_id": instance_id,
                "protocol_type": "consumer",
                "protocols": ({"name": assignor, "metadata": encode_subscription([topic], blob_version)},),
            },
        )
        template = convert(template, join_api_version).entity
        versions = companion_versions(join_api_version)
        key = instance_id or f"{client_id}-{ordinal}#0"
        scripts.append(
            MemberScript(
                key,
                f"{client_id}-{ordinal}",
                ordinal,
                group_id,
                instance_id,
                template,
                versions,
                heartbeat_interval_ms,
                (Session(ordinal * stagger_ms, None, False),),
            )
        )
    plan = ReplayPlan("synthetic", tuple(scripts), {group_id: ({topic: tuple(range(partitions))},)}, 0)
    scenario = AS_RECORDED
    if rolling_bounce:
        scenario = replace(
            AS_RECORDED,
            name="synthetic-bounce",
            rolling=RollingBounce(
                start_ms=10_000,
                interval_ms=max(1, (duration_ms - 20_000) // max(members, 1)),
                downtime_ms=1_000,
            ),
        )
    runner = Runner(plan, replace(scenario, duration_ms=duration_ms), "recorded")
    writer = CaptureWriter(path, upstream="reference:0", policy="pass-through", group_settings=group_settings)
    base_ns = 1_700_000_000_000_000_000
    opened: set[int] = set()

    def record(kind: str, now_ms: int, flight: InFlight, response: Any) -> None:
        script = flight.seat.script
        conn = flight.connection_id
        ts_ns = base_ns + now_ms * 1_000_000
        if conn not in opened:
            opened.add(conn)
            writer.open_connection(
                conn, ts_ns, f"10.0.0.{script.ordinal % 250 + 1}:5{conn:04d}", "reference:0"
            )
            if client_software is not None:
                name, _, software_version = client_software.partition("/")
                hello = from_values(
                    request_schema(API_VERSIONS, 3),
                    {"client_software_name": name, "client_software_version": software_version},
                )
                hello_reply = from_values(response_schema(API_VERSIONS, 3), {"error_code": ErrorCode.none})
                for direction, frame in (
                    ("request", encode_request(hello, 0, script.client_id)[4:]),
                    ("response", encode_response(hello_reply, 0)[4:]),
                ):
                    writer.record(
                        Record(
                            conn,
                            direction,
                            ts_ns,
                            API_VERSIONS,
                            3,
                            3,
                            0,
                            script.client_id,
                            None,
                            frame,
                            frame,
                        )
                    )
        if kind == "request":
            payload = encode_request(flight.send.request, flight.correlation_id, script.client_id)[4:]
        else:
            payload = encode_response(response, flight.correlation_id)[4:]
        writer.record(
            Record(
                conn,
                kind,
                ts_ns,
                flight.send.api_key,
                flight.send.api_version,
                flight.send.api_version,
                flight.correlation_id,
                script.client_id,
                group_id,
                payload,
                payload,
            )
        )

    def closed(conn: int, now_ms: int) -> None:
        if conn in opened:
            writer.close_connection(conn, base_ns + now_ms * 1_000_000, "client closed")

    runner.recorder = record
    runner.on_close = closed
    try:
        # the recorded broker runs with `group_settings` (Kafka's defaults where None)
        config = replay_group_settings(group_settings).config
        run_virtual(runner, CoordinatorTransport(runner, config), None)
    finally:
        writer.close()
    return plan
