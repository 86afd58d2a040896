"""`--metrics HOST:PORT`: the proxy's counters in Prometheus' text exposition format (0.0.4).

Served from the proxy's own event loop (one small HTTP/1.1 handler, one response per
connection): `GET /metrics`, `GET /health/live` (the event loop answers), `GET /health/ready`
(the bootstrap listener is open). The exposition is written here rather than with
prometheus_client: it is a dozen lines of a stable text format, and the proxy's counters already
live in its sessions (read at scrape time, nothing is updated twice on the hot path).

Metrics (all `group_replay_proxy_*`): connections accepted and open per leg, frames and bytes
per API key and direction, request latency per API key (a summary: sum and count), bytes per
leg, rewrites, connections closed on bad input, upstream connection errors, buffered
partial-frame bytes and their budget, capture bytes queued and written, the recorder's
queue depth, JoinGroup responses per group (rebalances seen), TLS reloads.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from proxy.session import ApiCounts
from proxy.wire import api_name

if TYPE_CHECKING:
    from proxy.server import ProxyServer

log = logging.getLogger("group_replay.proxy")

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_PREFIX = "group_replay_proxy_"


def _line(name: str, value: int | float, labels: dict[str, str] | None = None) -> str:
    text = f"{value:.6f}" if isinstance(value, float) else str(value)
    if labels:
        inner = ",".join(f'{key}="{_escape(label)}"' for key, label in labels.items())
        return f"{_PREFIX}{name}{{{inner}}} {text}\n"
    return f"{_PREFIX}{name} {text}\n"


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _family(name: str, kind: str, help_text: str) -> str:
    return f"# HELP {_PREFIX}{name} {help_text}\n# TYPE {_PREFIX}{name} {kind}\n"


def render(server: ProxyServer) -> str:  # noqa: C901 - one linear exposition text; each branch guards an optional family
    """The exposition text for `server`'s counters at this moment."""
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
    out: list[str] = []
    out.append(_family("connections_total", "counter", "Client connections accepted."))
    out.append(_line("connections_total", totals.connections))
    out.append(_family("open_connections", "gauge", "Connections open now, per leg."))
    out.append(_line("open_connections", len(server.connections), {"leg": "client"}))
    out.append(_line("open_connections", upstream_open, {"leg": "upstream"}))
    out.append(
        _family(
            "bytes_total", "counter", "Bytes received from each side (client: requests; upstream: responses)."
        )
    )
    out.append(_line("bytes_total", client_bytes, {"leg": "client"}))
    out.append(_line("bytes_total", upstream_bytes, {"leg": "upstream"}))
    for direction, frames, sizes in (
        ("request", counts.requests, counts.request_bytes),
        ("response", counts.responses, counts.response_bytes),
    ):
        name = f"{direction}s_total"
        out.append(_family(name, "counter", f"{direction.capitalize()} frames per API key."))
        for api_key, value in enumerate(frames):
            if value:
                out.append(_line(name, value, {"api_key": str(api_key), "api": api_name(api_key)}))
        name = f"{direction}_bytes_total"
        out.append(
            _family(name, "counter", f"{direction.capitalize()} bytes per API key (size prefix included).")
        )
        for api_key, value in enumerate(sizes):
            if value:
                out.append(_line(name, value, {"api_key": str(api_key), "api": api_name(api_key)}))
    out.append(
        _family(
            "request_latency_seconds",
            "summary",
            "From a request passing the proxy to its response passing it, per API key (the broker's "
            "time plus the upstream leg).",
        )
    )
    for api_key, count in enumerate(counts.responses):
        if count:
            labels = {"api_key": str(api_key), "api": api_name(api_key)}
            out.append(_line("request_latency_seconds_sum", counts.latency_ns[api_key] / 1e9, labels))
            out.append(_line("request_latency_seconds_count", count, labels))
    out.append(_family("group_requests_total", "counter", "Requests of the group APIs."))
    out.append(_line("group_requests_total", totals.group_requests))
    out.append(_family("rewrites_total", "counter", "Frames rewritten (broker addresses, rewrite policy)."))
    out.append(_line("rewrites_total", totals.rewrites))
    out.append(_family("closed_on_error_total", "counter", "Connections closed on bad input."))
    out.append(_line("closed_on_error_total", totals.closed_on_error))
    out.append(_family("upstream_errors_total", "counter", "Upstream connections that failed or broke."))
    out.append(_line("upstream_errors_total", server.upstream_errors))
    out.append(_family("buffered_bytes", "gauge", "Bytes of partial frames held for all connections."))
    out.append(_line("buffered_bytes", server.budget.used_bytes))
    out.append(
        _family("buffered_bytes_limit", "gauge", "The budget for buffered_bytes (--max-buffered-bytes).")
    )
    out.append(_line("buffered_bytes_limit", server.budget.limit_bytes))
    recorder = server.recorder
    if recorder is not None:
        out.append(
            _family("capture_queued_bytes_total", "counter", "Frame bytes handed to the capture writer.")
        )
        out.append(_line("capture_queued_bytes_total", recorder.queued_bytes))
        out.append(
            _family("capture_written_bytes_total", "counter", "Frame bytes the capture writer has written.")
        )
        out.append(_line("capture_written_bytes_total", recorder.written_bytes))
        out.append(_family("capture_backlog_bytes", "gauge", "Queued but not yet written (recorder lag)."))
        out.append(_line("capture_backlog_bytes", recorder.backlog_bytes))
        out.append(_family("capture_queue_items", "gauge", "Items waiting in the recorder's queue."))
        out.append(_line("capture_queue_items", recorder.queue_depth))
    out.append(
        _family(
            "group_join_responses_total",
            "counter",
            "JoinGroup responses relayed per group: members joining rebalances (rebalances seen).",
        )
    )
    for group, count in sorted(counts.join_responses.items()):
        out.append(_line("group_join_responses_total", count, {"group": group}))
    if server.tls is not None:
        out.append(_family("tls_reloads_total", "counter", "Successful certificate reloads."))
        out.append(_line("tls_reloads_total", server.tls.reloads))
    return "".join(out)


class MetricsEndpoint:
    """The HTTP listener for `render` and the health checks."""

    def __init__(self, server: ProxyServer) -> None:
        self.proxy = server
        self._server: asyncio.base_events.Server | None = None

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._handle, host, port)
        address = self._server.sockets[0].getsockname()
        log.info("metrics on http://%s:%d/metrics", address[0], address[1])
        return str(address[0]), int(address[1])

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 10)
            while (await asyncio.wait_for(reader.readline(), 10)) not in (b"\r\n", b"\n", b""):
                pass  # headers: nothing in them matters here
            parts = request.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            if len(parts) < 2 or parts[0] not in ("GET", "HEAD"):
                status, body, kind = "405 Method Not Allowed", "GET only\n", "text/plain"
            elif path == "/metrics":
                status, body, kind = "200 OK", render(self.proxy), CONTENT_TYPE
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


__all__ = ["CONTENT_TYPE", "MetricsEndpoint", "render"]
