"""The asyncio shell around `ProxySession`: listeners, upstream connections, backpressure.

asyncio Protocols/transports rather than streams: the relay never awaits per chunk, it only
interprets the session's commands inside `data_received`, which saves a task switch and a copy
per read. Backpressure both ways: when one side's transport buffer passes its high-water mark
(`pause_writing`) the other side stops reading until it drains (`resume_writing`); when the
capture writer falls behind, clients stop being read until it catches up.

One listener fronts the bootstrap server; one more per upstream broker opens the first time a
Metadata, FindCoordinator or DescribeCluster response names it (port per broker, as in
Kroxylicious). A malformed frame, an unreachable or vanished upstream closes only the connection
it concerns, with a log line; the listeners keep serving.

TLS (`proxy.tls`): with `ProxyConfig.tls`, every listener terminates TLS and every upstream
connection originates it; the certificates reload on `reload_tls()` (SIGHUP in the CLI) and
when their files change (checked every `tls_check_interval_s`), without touching established
connections.
"""

from __future__ import annotations

import asyncio
import errno
import itertools
import logging
import socket
import time
from dataclasses import dataclass, field
from typing import Any

from proxy.addressing import AddressRewriter
from proxy.capture.header import RecordScope
from proxy.commands import Close, PassThrough, RewritePolicy, SendClient, SendUpstream
from proxy.session import DEFAULT_MAX_BUFFERED_BYTES, ApiCounts, BufferBudget, ProxySession, Record
from proxy.tls import TlsContexts, explain_upstream_error
from proxy.wire import DEFAULT_MAX_FRAME_BYTES

log = logging.getLogger("group_replay.proxy")

WRITE_HIGH_WATER = 1 << 20
WRITE_LOW_WATER = 256 << 10
PENDING_PAUSE = 1000  # pending requests of one client that leaves its answers unread
PENDING_RESUME = 500
CAPTURE_BACKLOG_HIGH = 64 << 20
CAPTURE_BACKLOG_LOW = 16 << 20


def parse_hostport(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


@dataclass
class ProxyConfig:
    upstream: tuple[str, int]
    listen: tuple[str, int] = ("127.0.0.1", 0)
    advertised_host: str | None = None  # host written into rewritten responses (default: listen host)
    max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
    max_buffered_bytes: int = DEFAULT_MAX_BUFFERED_BYTES  # partial frames of all connections together
    policy: RewritePolicy = field(default_factory=PassThrough)
    tls: TlsContexts | None = None  # TLS on the client leg, the upstream leg, or both
    tls_check_interval_s: float = 1.0  # how often certificate files are checked for changes
    metrics: tuple[str, int] | None = None  # serve Prometheus metrics and health checks here


@dataclass
class ProxyStats:
    """What the proxy relayed (the summary printed when it stops)."""

    connections: int = 0
    requests: int = 0
    responses: int = 0
    group_requests: int = 0
    rewrites: int = 0
    closed_on_error: int = 0
    # Of closed connections only (the metrics add the open ones at scrape time).
    client_bytes: int = 0
    upstream_bytes: int = 0
    api_counts: ApiCounts = field(default_factory=ApiCounts)

    def add(self, session: ProxySession) -> None:
        self.requests += session.requests
        self.responses += session.responses
        self.group_requests += session.group_requests
        self.rewrites += session.rewrites

    def absorb(self, session: ProxySession) -> None:
        """A closed connection's counters, all of them, into the totals."""
        self.add(session)
        self.client_bytes += session.client_bytes
        self.upstream_bytes += session.upstream_bytes
        if session.api_counts is not None:
            self.api_counts.add(session.api_counts)


class UpstreamHealth:
    """Reports an unreachable upstream once, then with exponential backoff (not per client retry).

    `failed(now_s, address, error)` returns the line to log, or None while within the backoff;
    `succeeded()` returns a "reachable again" line after failures. Time is passed in.
    """

    FIRST_BACKOFF_S = 1.0
    MAX_BACKOFF_S = 60.0

    def __init__(self) -> None:
        self.failures = 0  # since the last report
        self.total_failures = 0
        self._next_report_s: float | None = None
        self._backoff_s = self.FIRST_BACKOFF_S

    def failed(self, now_s: float, address: str, error: str) -> str | None:
        self.failures += 1
        self.total_failures += 1
        if self._next_report_s is not None and now_s < self._next_report_s:
            return None
        line = f"upstream {address} unreachable: {error}"
        if self.failures > 1:
            line += f" ({self.failures} connection attempts failed since the last report)"
        line += f"; next report in {self._backoff_s:.0f} s at the earliest"
        self._next_report_s = now_s + self._backoff_s
        self._backoff_s = min(self._backoff_s * 2, self.MAX_BACKOFF_S)
        self.failures = 0
        return line

    def succeeded(self, address: str) -> str | None:
        if self._next_report_s is None:
            return None
        self._next_report_s = None
        self._backoff_s = self.FIRST_BACKOFF_S
        self.failures = 0
        return f"upstream {address} reachable again"


class ProxyServer:
    """Listens, relays, and (with `recorder`) hands every frame to the capture writer."""

    def __init__(self, config: ProxyConfig, recorder: Any | None = None) -> None:
        self.config = config
        self.recorder = recorder
        self._conn_ids = itertools.count(1)
        self._servers: dict[tuple[str, int], asyncio.base_events.Server] = {}
        self._listeners: dict[tuple[str, int], tuple[str, int]] = {}  # upstream -> proxy address
        self._pending_servers: list[asyncio.Task[Any]] = []
        self.connections: dict[int, _ClientSide] = {}
        self.addresses = AddressRewriter(self)
        self.bootstrap: tuple[str, int] | None = None
        self.stats = ProxyStats()
        self.budget = BufferBudget(config.max_buffered_bytes)
        self.health: dict[tuple[str, int], UpstreamHealth] = {}
        # What the recorder's header says it holds is what the sessions record (issue 12).
        scope = getattr(recorder, "record_scope", RecordScope.ALL)
        self.record_api_keys: frozenset[int] | None = RecordScope(scope).api_keys
        self.tls = config.tls
        self._tls_watch: asyncio.Task[None] | None = None
        self.upstream_errors = 0  # upstream connections that failed or broke (metrics)
        self._metrics: Any = None
        self.metrics_address: tuple[str, int] | None = None

    @property
    def client_ssl(self) -> Any:
        return None if self.tls is None else self.tls.client

    def upstream_ssl(self, host: str) -> dict[str, Any]:
        """`create_connection` arguments for an upstream connection (the current context)."""
        if self.tls is None or self.tls.upstream is None:
            return {}
        return {"ssl": self.tls.upstream, "server_hostname": host}

    def reload_tls(self) -> None:
        """Load the certificates again (SIGHUP): new connections get them, open ones stay."""
        if self.tls is not None and self.tls.enabled:
            line = self.tls.reload()
            log.log(logging.WARNING if "failed" in line else logging.INFO, "%s", line)

    async def _watch_tls(self) -> None:
        assert self.tls is not None
        while True:
            await asyncio.sleep(self.config.tls_check_interval_s)
            if self.tls.changed():
                self.reload_tls()

    def upstream_failed(self, upstream: tuple[str, int], error: str) -> None:
        self.upstream_errors += 1
        line = self.health.setdefault(upstream, UpstreamHealth()).failed(
            time.monotonic(), "{}:{}".format(*upstream), error
        )
        if line is not None:
            log.warning("%s", line)

    def upstream_reached(self, upstream: tuple[str, int]) -> None:
        health = self.health.get(upstream)
        line = health.succeeded("{}:{}".format(*upstream)) if health is not None else None
        if line is not None:
            log.info("%s", line)

    def summary(self) -> ProxyStats:
        """Totals over closed and still-open connections (the scalar counters)."""
        totals = ProxyStats(**{k: v for k, v in vars(self.stats).items() if k != "api_counts"})
        for connection in self.connections.values():
            totals.add(connection.session)
        return totals

    @property
    def advertised_host(self) -> str:
        host = self.config.advertised_host or self.config.listen[0]
        return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host

    async def start(self) -> tuple[str, int]:
        """Open the bootstrap listener; returns its address."""
        loop = asyncio.get_running_loop()
        upstream = self.config.upstream
        server = await loop.create_server(
            lambda: _ClientSide(self, upstream),
            self.config.listen[0],
            self.config.listen[1],
            ssl=self.client_ssl,
        )
        if self.tls is not None and self.tls.enabled:
            self._tls_watch = loop.create_task(self._watch_tls())
        if self.config.metrics is not None:
            from proxy.metrics import MetricsEndpoint

            self._metrics = MetricsEndpoint(self)
            self.metrics_address = await self._metrics.start(*self.config.metrics)
        self._servers[upstream] = server
        port = int(server.sockets[0].getsockname()[1])
        self.bootstrap = (self.advertised_host, port)
        log.info("proxy listening on %s:%d -> %s:%d", self.config.listen[0], port, *upstream)
        return self.bootstrap

    # BrokerDirectory (called from a session, inside data_received: must not block)
    def listener_for(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        key = (host, port)
        known = self._listeners.get(key)
        if known is not None:
            return known
        base = self.bootstrap[1] if self.bootstrap else 0
        preferred = base + 1 + node_id if base and node_id >= 0 else 0
        sock = _bind(self.config.listen[0], preferred)
        sock.listen(128)
        sock.setblocking(False)
        address = (self.advertised_host, int(sock.getsockname()[1]))
        self._listeners[key] = address
        loop = asyncio.get_running_loop()

        async def serve() -> None:
            server = await loop.create_server(lambda: _ClientSide(self, key), sock=sock, ssl=self.client_ssl)
            self._servers[key] = server

        self._pending_servers.append(loop.create_task(serve()))
        log.info("broker %d (%s:%d) is reachable through %s:%d", node_id, host, port, *address)
        return address

    def new_connection_id(self) -> int:
        return next(self._conn_ids)

    async def close(self) -> None:
        if self._tls_watch is not None:
            self._tls_watch.cancel()
        if self._metrics is not None:
            await self._metrics.close()
        for task in self._pending_servers:
            await task
        for server in self._servers.values():
            server.close()
        for connection in list(self.connections.values()):
            connection.abort("proxy shutting down")
        for server in self._servers.values():
            await server.wait_closed()


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        if port == 0 or exc.errno != errno.EADDRINUSE:
            sock.close()
            raise
        sock.bind((host, 0))
    return sock


class _ClientSide(asyncio.Protocol):
    """One client connection and, through `_UpstreamSide`, its upstream connection."""

    def __init__(self, server: ProxyServer, upstream: tuple[str, int]) -> None:
        self.server = server
        self.upstream_address = upstream
        self.conn = server.new_connection_id()
        recorder = server.recorder
        self.session = ProxySession(
            self.conn,
            record=recorder is not None,
            record_api_keys=server.record_api_keys,
            policy=server.config.policy,
            addresses=server.addresses,
            max_frame_bytes=server.config.max_frame_bytes,
            budget=server.budget,
            count_apis=server.config.metrics is not None,
            header_runs=getattr(recorder, "header_runs", None),
        )
        self.recorder = recorder
        self.client: asyncio.Transport | None = None
        self.upstream: asyncio.Transport | None = None
        self.closing = False
        # Why the client is not being read (reading resumes when none is left): "connect",
        # "capture" (the writer is behind), "upstream" (the broker is slow to take requests),
        # "unread" (many requests pending while this client leaves its responses unread).
        self.pauses: set[str] = set()
        self.peer = "?"

    # -- client transport ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.client = transport
        transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.server.connections[self.conn] = self
        self.server.stats.connections += 1
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._run(
            self.session.connection_opened(time.time_ns(), self.peer, "{}:{}".format(*self.upstream_address))
        )
        self.pause("connect")  # until the upstream connection is up
        asyncio.get_running_loop().create_task(self._connect())

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        host, port = self.upstream_address
        try:
            transport, _ = await loop.create_connection(
                lambda: _UpstreamSide(self), host, port, **self.server.upstream_ssl(host)
            )
        except OSError as exc:
            self.server.upstream_failed(self.upstream_address, explain_upstream_error(exc))
            self.abort(f"upstream {host}:{port} unreachable: {exc}", quiet=True)
            return
        self.server.upstream_reached(self.upstream_address)
        if self.closing:
            transport.close()
            return
        assert isinstance(transport, asyncio.Transport)
        self.upstream = transport
        transport.set_write_buffer_limits(WRITE_HIGH_WATER, WRITE_LOW_WATER)
        self.resume("connect")

    def data_received(self, data: bytes) -> None:
        self._run(self.session.client_data(data, time.time_ns()))
        # Per-connection backpressure (issue 18 defect 2): a client that pipelines requests
        # without reading the answers stops being read, as a broker mutes such a channel;
        # acks=0 producers (never answered) leave nothing unread and keep going.
        if (
            self.session.pending_requests > PENDING_PAUSE
            and self.client is not None
            and self.client.get_write_buffer_size() > 0
        ):
            self.pause("unread")

    def pause(self, reason: str) -> None:
        if not self.pauses and self.client is not None and not self.closing:
            self.client.pause_reading()
        self.pauses.add(reason)

    def resume(self, reason: str) -> None:
        if reason not in self.pauses:
            return
        self.pauses.discard(reason)
        if not self.pauses and self.client is not None and not self.closing:
            self.client.resume_reading()

    def eof_received(self) -> bool | None:
        return None  # close our side; connection_lost closes the upstream

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        if not self.closing:
            self.closing = True
            log.debug("conn %d: client %s closed the connection", self.conn, self.peer)
            self._record_close("client closed the connection")
        if self.upstream is not None:
            self.upstream.close()

    def pause_writing(self) -> None:  # the client is slow: stop reading the broker
        if self.upstream is not None:
            self.upstream.pause_reading()

    def resume_writing(self) -> None:
        if self.upstream is not None:
            self.upstream.resume_reading()
        self.resume("unread")  # the client reads its answers again

    # -- commands -----------------------------------------------------------------------------

    def _run(self, commands: list[Any]) -> None:
        recorder = self.recorder
        if recorder is not None and len(commands) > 2 and type(commands[-1]) is Record:
            commands = _hand_over_records(recorder, commands)
        for command in commands:
            kind = type(command)
            if kind is SendUpstream:
                assert self.upstream is not None
                self.upstream.write(command.data)
            elif kind is SendClient:
                assert self.client is not None
                self.client.write(command.data)
            elif kind is bytes or kind is tuple:  # header-only runs (packed: `header_runs`)
                recorder.record_event(command)  # type: ignore[union-attr]
            elif kind is Record:
                recorder.record(command)  # type: ignore[union-attr]
            elif kind is Close:
                self.server.stats.closed_on_error += 1
                self.abort(command.reason)
                return
            elif recorder is not None:  # Opened, Closed: the connection's events
                recorder.record_event(command)
        if (
            recorder is not None
            and recorder.after_read() > CAPTURE_BACKLOG_HIGH  # the runs the session packed, and the backlog
            and "capture" not in self.pauses
        ):
            self._pause_for_capture()

    def _pause_for_capture(self) -> None:
        if self.client is None or self.closing:
            return
        self.pause("capture")
        loop = asyncio.get_running_loop()

        def check() -> None:
            if self.closing or self.client is None or self.recorder is None:
                return
            if self.recorder.backlog_bytes < CAPTURE_BACKLOG_LOW:
                self.resume("capture")
            else:
                loop.call_later(0.005, check)

        loop.call_later(0.005, check)

    def _record_close(self, reason: str) -> None:
        self._run(self.session.connection_closed(time.time_ns(), reason))

    def _forget(self) -> None:
        """Take this connection out of the server's table, its counters into the totals (once)."""
        self.session.release()  # the budget's bytes, also when no close was recorded
        if self.server.connections.pop(self.conn, None) is not None:
            self.server.stats.absorb(self.session)

    def abort(self, reason: str, quiet: bool = False) -> None:
        """Close this connection (both sides) because of `reason`; logged once (`quiet`: at debug
        level, when the server already reports the cause with backoff)."""
        if self.closing:
            return
        self.closing = True
        log.log(
            logging.DEBUG if quiet else logging.WARNING,
            "conn %d (client %s): closing: %s",
            self.conn,
            self.peer,
            reason,
        )
        self._record_close(reason)
        if self.upstream is not None:
            self.upstream.abort()
        if self.client is not None:
            self.client.abort()
        self._forget()

    # -- upstream side ------------------------------------------------------------------------

    def upstream_data(self, data: bytes) -> None:
        self._run(self.session.upstream_data(data, time.time_ns()))
        if "unread" in self.pauses and self.session.pending_requests < PENDING_RESUME:
            self.resume("unread")

    def upstream_lost(self, exc: Exception | None) -> None:
        if self.closing:
            return
        host, port = self.upstream_address
        detail = f": {explain_upstream_error(exc)}" if exc else ""
        self.closing = True
        self.server.upstream_errors += 1
        log.warning(
            "conn %d (client %s): upstream %s:%d closed the connection%s",
            self.conn,
            self.peer,
            host,
            port,
            detail,
        )
        self._record_close(f"upstream closed the connection{detail}")
        if self.client is not None:
            self.client.close()
        self._forget()


def _hand_over_records(recorder: Any, commands: list[Any]) -> list[Any]:
    """Recording: [send, Record, Record, ...] (a Close always comes last) in one hand-over; the
    commands left. Group scope mixes header-only runs (tuples) in when a read carries both kinds
    of frame: those go one by one, in order."""
    first = 0 if type(commands[0]) is Record else 1
    records = commands[first:]
    if all(type(item) is Record for item in records):
        recorder.record_many(records)
        return commands[:first]
    return commands


class _UpstreamSide(asyncio.Protocol):
    def __init__(self, owner: _ClientSide) -> None:
        self.owner = owner

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.owner.upstream_data(data)

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.upstream_lost(exc)

    def pause_writing(self) -> None:  # the broker is slow: stop reading the client
        self.owner.pause("upstream")

    def resume_writing(self) -> None:
        self.owner.resume("upstream")


async def serve(config: ProxyConfig, recorder: Any | None = None) -> None:
    """Run a proxy until cancelled."""
    server = ProxyServer(config, recorder)
    await server.start()
    try:
        await asyncio.Event().wait()
    finally:
        await server.close()


class BackgroundProxy:
    """A proxy on its own event loop in a daemon thread (demo, benchmarks, tests); `stop()` ends it."""

    def __init__(self, config: ProxyConfig, recorder: Any | None = None) -> None:
        import concurrent.futures
        import threading

        self.config = config
        self.recorder = recorder
        self._loop = asyncio.new_event_loop()
        self._started: concurrent.futures.Future[tuple[str, int]] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None
        self.server: ProxyServer | None = None  # read-only from other threads (metrics address)
        self._thread = threading.Thread(target=self._run, name="proxy", daemon=True)
        self._thread.start()
        host, port = self._started.result(timeout=30)
        self.bootstrap = f"{host}:{port}"

    def _run(self) -> None:
        async def main() -> None:
            server = ProxyServer(self.config, self.recorder)
            self.server = server
            self._stop = asyncio.Event()
            try:
                address = await server.start()
            except BaseException as exc:
                self._started.set_exception(exc)
                return
            self._started.set_result(address)
            try:
                await self._stop.wait()
            finally:
                await server.close()

        self._loop.run_until_complete(main())
        self._loop.close()

    def stop(self) -> None:
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        if self.recorder is not None:
            self.recorder.close()
            self.recorder = None
