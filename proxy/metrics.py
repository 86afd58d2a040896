"""`--metrics HOST:PORT`: the proxy's counters in Prometheus' text exposition format, via prometheus_client.

Served from the proxy's own event loop (one small HTTP/1.1 handler, one response per
connection): `GET /metrics`, `GET /health/live` (the event loop answers), `GET /health/ready`
(the bootstrap listener is open). The counters already live in the proxy's sessions, so the
exposition is a prometheus_client custom collector (`ProxyCollector`) that reads them at scrape
time: nothing is updated twice on the relay's hot path, and prometheus_client writes the format.

Metrics (all `group_replay_proxy_*`): connections accepted and open per leg, frames and bytes
per API key and direction, request latency per API key (a summary: sum and count), bytes per
leg, rewrites, connections closed on bad input, upstream connection errors, buffered
partial-frame bytes and their budget, capture bytes queued and written, the recorder's
queue depth and backlog (lag), JoinGroup responses per group (rebalances seen), TLS reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from proxy.session import ApiCounts
from proxy.wire import api_name

if TYPE_CHECKING:
    from proxy.server import ProxyServer

log = logging.getLogger("group_replay.proxy")

CONTENT_TYPE = CONTENT_TYPE_LATEST
_PREFIX = "group_replay_proxy_"
_API_LABELS = ("api_key", "api")


def _counter(name: str, help_text: str, value: int | None = None) -> CounterMetricFamily:
    return CounterMetricFamily(_PREFIX + name, help_text, value=value)


def _gauge(name: str, help_text: str, value: int | None = None) -> GaugeMetricFamily:
    return GaugeMetricFamily(_PREFIX + name, help_text, value=value)


def _per_api(name: str, help_text: str, values: list[int]) -> CounterMetricFamily:
    family = CounterMetricFamily(_PREFIX + name, help_text, labels=_API_LABELS)
    for api_key, value in enumerate(values):
        if value:
            family.add_metric([str(api_key), api_name(api_key)], value)
    return family


class ProxyCollector(Collector):
    """Reads one proxy's counters at scrape time (prometheus_client's custom-collector pattern)."""

    def __init__(self, server: ProxyServer) -> None:
        self.proxy = server

    def collect(self) -> Iterator[Metric]:
        server = self.proxy
        totals = server.summary()
        counts = ApiCounts()
        counts.add(server.stats.api_counts)
        client_bytes, upstream_bytes = server.stats.client_bytes, server.stats.upstream_bytes
        upstream_open = 0
        for connection in server.connections.values():
            session = connection.session
            if session.api_counts is not None:
                counts.add(session.api_counts)
            client_bytes += session.client_bytes
            upstream_bytes += session.upstream_bytes
            upstream_open += connection.upstream is not None and not connection.closing
        yield _counter("connections_total", "Client connections accepted.", totals.connections)
        open_now = GaugeMetricFamily(
            _PREFIX + "open_connections", "Connections open now, per leg.", labels=("leg",)
        )
        open_now.add_metric(["client"], len(server.connections))
        open_now.add_metric(["upstream"], upstream_open)
        yield open_now
        per_leg = CounterMetricFamily(
            _PREFIX + "bytes_total",
            "Bytes received from each side (client: requests; upstream: responses).",
            labels=("leg",),
        )
        per_leg.add_metric(["client"], client_bytes)
        per_leg.add_metric(["upstream"], upstream_bytes)
        yield per_leg
        for direction, frames, sizes in (
            ("request", counts.requests, counts.request_bytes),
            ("response", counts.responses, counts.response_bytes),
        ):
            title = direction.capitalize()
            yield _per_api(f"{direction}s_total", f"{title} frames per API key.", frames)
            yield _per_api(
                f"{direction}_bytes_total", f"{title} bytes per API key (size prefix included).", sizes
            )
        latency = SummaryMetricFamily(
            _PREFIX + "request_latency_seconds",
            "From a request passing the proxy to its response passing it, per API key (the broker's "
            "time plus the upstream leg).",
            labels=_API_LABELS,
        )
        for api_key, count in enumerate(counts.responses):
            if count:
                latency.add_metric(
                    [str(api_key), api_name(api_key)],
                    count_value=count,
                    sum_value=counts.latency_ns[api_key] / 1e9,
                )
        yield latency
        yield _counter("group_requests_total", "Requests of the group APIs.", totals.group_requests)
        yield _counter(
            "rewrites_total", "Frames rewritten (broker addresses, rewrite policy).", totals.rewrites
        )
        yield _counter("closed_on_error_total", "Connections closed on bad input.", totals.closed_on_error)
        yield _counter(
            "upstream_errors_total", "Upstream connections that failed or broke.", server.upstream_errors
        )
        yield _gauge(
            "buffered_bytes", "Bytes of partial frames held for all connections.", server.budget.used_bytes
        )
        yield _gauge(
            "buffered_bytes_limit",
            "The budget for buffered_bytes (--max-buffered-bytes).",
            server.budget.limit_bytes,
        )
        recorder = server.recorder
        if recorder is not None:
            yield _counter(
                "capture_queued_bytes_total",
                "Frame bytes handed to the capture writer.",
                recorder.queued_bytes,
            )
            yield _counter(
                "capture_written_bytes_total",
                "Frame bytes the capture writer has written.",
                recorder.written_bytes,
            )
            yield _gauge(
                "capture_backlog_bytes", "Queued but not yet written (recorder lag).", recorder.backlog_bytes
            )
            yield _gauge(
                "capture_queue_items", "Items waiting in the recorder's queue.", recorder.queue_depth
            )
        joins = CounterMetricFamily(
            _PREFIX + "group_join_responses_total",
            "JoinGroup responses relayed per group: members joining rebalances (rebalances seen).",
            labels=("group",),
        )
        for group, count in sorted(counts.join_responses.items()):
            joins.add_metric([group], count)
        yield joins
        if server.tls is not None:
            yield _counter("tls_reloads_total", "Successful certificate reloads.", server.tls.reloads)


def registry_for(server: ProxyServer) -> CollectorRegistry:
    """A registry of its own per proxy (not prometheus_client's process-global one)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ProxyCollector(server))
    return registry


def render(registry: CollectorRegistry) -> str:
    """The exposition text of `registry` at this moment."""
    return generate_latest(registry).decode()


class MetricsEndpoint:
    """The HTTP listener for `render` and the health checks."""

    def __init__(self, server: ProxyServer) -> None:
        self.proxy = server
        self.registry = registry_for(server)
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._handle, host, port)
        address = self._server.sockets[0].getsockname()
        log.info("metrics on http://%s:%d/metrics", address[0], address[1])
        return str(address[0]), int(address[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(10):  # not wait_for: on 3.11 it can lose a cancel (gh-86296)
                request = await reader.readline()
            while True:  # headers: nothing in them matters here
                async with asyncio.timeout(10):
                    if await reader.readline() in (b"\r\n", b"\n", b""):
                        break
            parts = request.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, body, kind = "405 Method Not Allowed", "GET only\n", "text/plain"
            elif path == "/metrics":
                status, body, kind = "200 OK", render(self.registry), CONTENT_TYPE
            elif path == "/health/live":
                status, body, kind = "200 OK", "live\n", "text/plain"
            elif path == "/health/ready":
                ready = self.proxy.bootstrap is not None
                status, body = ("200 OK", "ready\n") if ready else ("503 Service Unavailable", "starting\n")
                kind = "text/plain"
            else:
                status, body, kind = "404 Not Found", "try /metrics\n", "text/plain"
            data = body.encode()
            head = (
                f"HTTP/1.1 {status}\r\nContent-Type: {kind}\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode()
            writer.write(head if parts and parts[0] == "HEAD" else head + data)
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


__all__ = ["CONTENT_TYPE", "MetricsEndpoint", "ProxyCollector", "registry_for", "render"]
