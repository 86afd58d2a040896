"""`group-replay coordinator serve`: the reference coordinator served over TCP to real clients.

One asyncio process plays a whole single-node cluster just well enough for consumer groups:
ApiVersions, Metadata (itself as broker 0, leading every partition of the `--topics`),
FindCoordinator and the group and offset APIs (answered by the sans-IO `GroupCoordinator`),
and empty ListOffsets/Fetch so that consumers keep polling. Like a Kafka broker, each connection
has one request in flight: while a JoinGroup or SyncGroup is parked, that connection's next
requests wait (Kafka mutes the channel until the response is sent). A timer task calls
`advance()` at `next_deadline()`.

With a `StateLog` (`--state-dir`) the coordinator's records are appended to it before the answers
they come with, and loaded on start (`GroupCoordinator.load`): groups, generations, member ids and
committed offsets survive a restart, as they survive a Kafka broker's. The clock is the wall
clock's milliseconds (as Kafka's record timestamps are), so that commit and state timestamps
mean the same after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import IO, Any, Final

from proxy.wire import (
    ApiKey,
    CodecError,
    ErrorCode,
    FrameDecoder,
    FrameError,
    build,
    build_response,
    decode_request_body,
    encode_response,
    peek_request_header,
    response_class,
    supports,
)
from replay.coordinator import (
    SUPPORTED_VERSIONS,
    CoordinatorConfig,
    CoordinatorFault,
    GroupCoordinator,
    GroupEvent,
    Output,
    RequestContext,
    Respond,
)
from replay.coordinator.consumer import ConsumerGroupConfig
from replay.coordinator.records import Append
from replay.state_log import LogContents, StateLog

log = logging.getLogger("group_replay.coordinator")

API_VERSIONS, METADATA, LIST_OFFSETS, FETCH = (
    ApiKey.API_VERSIONS,
    ApiKey.METADATA,
    ApiKey.LIST_OFFSETS,
    ApiKey.FETCH,
)
CLUSTER_ID = "group-replay-reference"
# How much a client may send while its request is parked before the server stops reading
# (a muted Kafka channel reads nothing; reading a little notices a client that went away).
READ_AHEAD_BYTES = 1 << 20

# What this server answers besides the coordinator's own APIs.
SERVER_VERSIONS: dict[int, tuple[int, int]] = {
    API_VERSIONS: (0, 4),
    METADATA: (1, 12),
    LIST_OFFSETS: (1, 7),
    FETCH: (4, 12),
}
ALL_VERSIONS: dict[int, tuple[int, int]] = {**SERVER_VERSIONS, **SUPPORTED_VERSIONS}
# Advertised but never served: kafka-clients 2.x computes the usable produce magic from the
# Produce versions of every node as soon as ApiVersions arrives (ApiVersions.update), and fails
# with "The broker does not support PRODUCE" without it. A Produce request closes the connection.
ADVERTISED_ONLY: dict[int, tuple[int, int]] = {ApiKey.PRODUCE: (3, 9)}


class ReferenceServer:
    def __init__(
        self,
        config: CoordinatorConfig,
        topics: dict[str, int],
        events_out: IO[str] | None = None,
        auto_create_partitions: int = 1,
        consumer_config: ConsumerGroupConfig | None = None,
        state: tuple[StateLog, LogContents] | None = None,
    ) -> None:
        if state is not None:
            config = replace(config, write_records=True)  # the log gets the coordinator's records
        self.config = config
        self.coordinator = GroupCoordinator(config)
        self.topics = dict(topics)
        self.coordinator.consumer.use_topics(self.topics)  # consumer groups see the topics made here
        if consumer_config is not None:
            self.coordinator.consumer.coordinator.config = consumer_config
        self.auto_create_partitions = auto_create_partitions
        self.events_out = events_out
        self.connections: dict[int, _Connection] = {}
        self._next_connection = 0
        self._epoch = time.monotonic()
        self._epoch_wall_ms = int(time.time() * 1000)
        self._wake = asyncio.Event()
        self.server: asyncio.Server | None = None
        self.state_log: StateLog | None = None
        if state is not None:
            self.state_log, contents = state
            if contents.damage is not None:
                log.warning(
                    "%s; loaded the %d records before it (the rest is kept in %s)",
                    contents.damage,
                    len(contents.records),
                    self.state_log.directory,
                )
            loaded = self.coordinator.load(contents.records, self.now_ms())
            log.info(
                "loaded %d groups and %d offsets from %s (coordinator epoch %d)",
                len(loaded.groups),
                loaded.offsets,
                self.state_log.directory,
                loaded.epoch,
            )
            self.dispatch(self.coordinator.advance(self.now_ms()))

    def versions(self) -> dict[int, tuple[int, int]]:
        """Every API served here and its versions: the server's own and the coordinator's (which
        a second group type may extend)."""
        return {**SERVER_VERSIONS, **self.coordinator.supported_versions()}

    def now_ms(self) -> int:
        return self._epoch_wall_ms + int((time.monotonic() - self._epoch) * 1000)

    async def start(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._accept, host, port)
        bound = self.server.sockets[0].getsockname()
        self.config = CoordinatorConfig(**{**asdict(self.config), "host": host, "port": int(bound[1])})
        self.coordinator.config = self.config
        asyncio.get_running_loop().create_task(self._timer_loop())
        return host, int(bound[1])

    # --- outputs -----------------------------------------------------------------------------
    def dispatch(self, outputs: list[Output]) -> None:
        records = [out.record for out in outputs if isinstance(out, Append)]
        if records and self.state_log is not None:
            self.state_log.append(records)  # in the log before any answer goes out
        for out in outputs:
            if isinstance(out, Respond):
                conn = self.connections.get(out.context.connection_id)
                if conn is not None:
                    conn.deliver_awaited(out.context.correlation_id, out.response)
            elif isinstance(out, GroupEvent):
                log.info(
                    "%s group=%s gen=%d member=%s instance=%s %s",
                    out.event.value,
                    out.group_id,
                    out.generation_id,
                    out.member_id,
                    out.group_instance_id,
                    out.reason,
                )
                if self.events_out is not None:
                    row = asdict(out)
                    row["event"] = out.event.value
                    row["assignment"] = out.assignment.hex() if out.assignment is not None else None
                    row["from_state"] = out.from_state.value if out.from_state else None
                    row["to_state"] = out.to_state.value if out.to_state else None
                    self.events_out.write(json.dumps(row) + "\n")
                    self.events_out.flush()
        self._wake.set()

    async def _timer_loop(self) -> None:
        """Fire the coordinator's timers for as long as the server runs: a failure is logged
        and the loop goes on (the coordinator already isolates a failing timer action; this
        covers the rest, e.g. an events file that cannot be written)."""
        while True:
            try:
                deadline = self.coordinator.next_deadline()
                timeout = None if deadline is None else max(0.0, (deadline - self.now_ms()) / 1000)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(timeout):  # not wait_for: it can lose a cancel (3.11)
                        await self._wake.wait()
                self._wake.clear()
                outputs = self.coordinator.advance(self.now_ms())
                if outputs:
                    self.dispatch(outputs)
            except Exception:
                log.exception("timer task: advancing the coordinator failed; continuing")
                await asyncio.sleep(0.01)  # never spin on a failure that repeats

    # --- connections -------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._next_connection += 1
        conn = _Connection(self, self._next_connection, reader, writer)
        self.connections[conn.connection_id] = conn
        try:
            await conn.run()
        finally:
            self.connections.pop(conn.connection_id, None)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def stop(self, grace_s: float = 5.0) -> None:
        """Stop listening and close every client connection; each connection's task then ends as
        on a client's close (Python 3.11's streams log a connection task cancelled at the loop's
        shutdown as an error). One still running after `grace_s` is cancelled."""
        if self.server is not None:
            self.server.close()
        conns = list(self.connections.values())
        for conn in conns:
            conn.writer.close()
        if conns:
            _, late = await asyncio.wait([conn.task for conn in conns], timeout=grace_s)
            for task in late:
                task.cancel()

    # --- the broker-side APIs the coordinator does not own -----------------------------------
    def api_versions(self, api_version: int, error_code: int = 0) -> Any:
        version_cls = response_class(API_VERSIONS, api_version, "ApiVersion")
        keys = tuple(
            version_cls(api_key=key, min_version=low, max_version=high)
            for key, (low, high) in sorted({**ADVERTISED_ONLY, **self.versions()}.items())
        )
        return build_response(API_VERSIONS, api_version, error_code=ErrorCode(error_code), api_keys=keys)

    def metadata(self, api_version: int, request: Any) -> Any:
        broker_cls = response_class(METADATA, api_version, "MetadataResponseBroker")
        topic_cls = response_class(METADATA, api_version, "MetadataResponseTopic")
        partition_cls = response_class(METADATA, api_version, "MetadataResponsePartition")
        requested = request.topics
        if requested is None:
            names = sorted(self.topics)
        else:
            names = [t.name for t in requested if t.name is not None]
            # KIP-848 clients resolve their assignment's topic ids (Metadata v12 by topic id).
            by_id = {t.topic_id for t in requested if t.name is None and t.topic_id is not None}
            if by_id:
                names += [
                    n
                    for n in sorted(self.topics)
                    if uuid.uuid5(uuid.NAMESPACE_URL, f"group-replay:{n}") in by_id
                ]
            for name in names:
                if name not in self.topics and self.auto_create_partitions > 0:
                    self.topics[name] = self.auto_create_partitions
        topics = []
        none = ErrorCode.none
        for name in names:
            partitions = self.topics.get(name)
            values: dict[str, Any] = {
                "name": name,
                "topic_id": uuid.uuid5(uuid.NAMESPACE_URL, f"group-replay:{name}"),
                "is_internal": False,
                "topic_authorized_operations": -(2**31),
            }
            if partitions is None:
                values |= {"error_code": ErrorCode.unknown_topic_or_partition, "partitions": ()}
            else:
                values |= {
                    "error_code": none,
                    "partitions": tuple(
                        build(
                            partition_cls,
                            {
                                "error_code": none,
                                "partition_index": index,
                                "leader_id": self.config.node_id,
                                "leader_epoch": 0,
                                "replica_nodes": (self.config.node_id,),
                                "isr_nodes": (self.config.node_id,),
                                "offline_replicas": (),
                            },
                        )
                        for index in range(partitions)
                    ),
                }
            topics.append(build(topic_cls, values))
        broker = build(
            broker_cls,
            {
                "node_id": self.config.node_id,
                "host": self.config.host,
                "port": self.config.port,
                "rack": None,
            },
        )
        return build_response(
            METADATA,
            api_version,
            brokers=(broker,),
            cluster_id=CLUSTER_ID,
            controller_id=self.config.node_id,
            topics=tuple(topics),
        )

    def empty_answer(self, api_key: int, api_version: int, request: Any) -> Any:
        """ListOffsets or Fetch answered as `_EMPTY_ANSWERS` says: every partition asked is empty."""
        answer = _EMPTY_ANSWERS[api_key]
        topic_cls = response_class(api_key, api_version, answer.topic_class)
        partition_cls = response_class(api_key, api_version, answer.partition_class)
        topics = tuple(
            topic_cls(
                **{
                    answer.topic_field: getattr(t, answer.topic_field),
                    "partitions": tuple(
                        build(
                            partition_cls,
                            {
                                "partition_index": getattr(p, answer.index_field),
                                "error_code": ErrorCode.none,
                                **answer.partition_values,
                            },
                        )
                        for p in t.partitions
                    ),
                }
            )
            for t in request.topics
        )
        return build_response(api_key, api_version, **{answer.topics_field: topics}, **answer.response_values)


@dataclass(frozen=True, slots=True)
class _EmptyAnswer:
    """How ListOffsets or Fetch answers when the served coordinator holds no records: one entry
    per topic and partition asked, error none and `partition_values`. The two APIs name their
    topics list, topic name and partition index fields differently (ListOffsetsResponse.json,
    FetchResponse.json)."""

    topic_class: str
    partition_class: str
    topics_field: str
    topic_field: str
    index_field: str
    partition_values: Mapping[str, Any]
    response_values: Mapping[str, Any] = field(default_factory=dict)


_EMPTY_ANSWERS: Final[dict[int, _EmptyAnswer]] = {
    # offset 0 whatever the timestamp asked
    LIST_OFFSETS: _EmptyAnswer(
        "ListOffsetsTopicResponse",
        "ListOffsetsPartitionResponse",
        "topics",
        "name",
        "partition_index",
        {"timestamp": -1, "offset": 0, "leader_epoch": 0},
    ),
    # no records, high watermark 0
    FETCH: _EmptyAnswer(
        "FetchableTopicResponse",
        "PartitionData",
        "responses",
        "topic",
        "partition",
        {
            "high_watermark": 0,
            "last_stable_offset": 0,
            "log_start_offset": 0,
            "aborted_transactions": (),
            "records": b"",
        },
        {"error_code": ErrorCode.none, "session_id": 0},
    ),
}


class _Connection:
    def __init__(
        self,
        server: ReferenceServer,
        connection_id: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.server = server
        self.connection_id = connection_id
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.client_host = f"/{peer[0]}" if peer else "/unknown"
        self.waiting: dict[int, asyncio.Future[None]] = {}
        # Bytes read while a request was parked (only to notice the peer closing): processed,
        # in order, once the parked request is answered.
        self.read_ahead: list[bytes] = []
        self.closed = False
        task = asyncio.current_task()  # made in `ReferenceServer._accept`, on its connection's task
        assert task is not None
        self.task = task

    def deliver(self, correlation_id: int, response: Any) -> None:
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "connection %d <- %s correlation=%d error=%s closed=%s",
                self.connection_id,
                type(response).__name__,
                correlation_id,
                getattr(response, "error_code", None),
                self.closed,
            )
        if not self.closed:
            self.writer.write(encode_response(response, correlation_id))

    def deliver_awaited(self, correlation_id: int, response: Any) -> None:
        """A coordinator answer: sent only while its request waits for it, so a request is never
        answered twice (a handler that failed after parking its request was answered already)."""
        waiter = self.waiting.pop(correlation_id, None)
        if waiter is None:
            log.debug(
                "connection %d: dropped a second answer to correlation %d", self.connection_id, correlation_id
            )
            return
        self.deliver(correlation_id, response)
        if not waiter.done():
            waiter.set_result(None)

    async def run(self) -> None:
        decoder = FrameDecoder()
        try:
            while True:
                data = self.read_ahead.pop(0) if self.read_ahead else await self.reader.read(65536)
                if not data:
                    return
                try:
                    frames = decoder.feed(data)
                except FrameError as exc:
                    log.warning("connection %d: %s; closing it", self.connection_id, exc)
                    return
                for frame in frames:
                    if not await self.process(frame):
                        return
                    await self.writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except Exception:
            # Whatever went wrong belongs to this connection alone: close it, keep serving.
            log.exception("connection %d: request handling failed; closing it", self.connection_id)
            return
        finally:
            self.closed = True
            self.waiting.clear()
            self.read_ahead.clear()

    async def wait_parked(self, waiter: asyncio.Future[None]) -> bool:
        """Wait for a parked request's answer (the connection is muted, as Kafka mutes the
        channel) while watching for the peer closing; False when it did. Kafka notices a closed
        channel at once too; the parked request is then answered into the void."""
        budget = READ_AHEAD_BYTES
        while not waiter.done():
            if budget <= 0:
                await waiter  # the client pipelines without end: just wait, as a muted channel does
                break
            reading: asyncio.Future[bytes] = asyncio.ensure_future(self.reader.read(min(65536, budget)))
            pending: set[asyncio.Future[Any]] = {waiter, reading}
            await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            if not reading.done():
                reading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reading
                break
            data = reading.result()
            if not data:
                log.info(
                    "connection %d: closed by the client while its request was parked", self.connection_id
                )
                return False
            self.read_ahead.append(data)
            budget -= len(data)
        return True

    async def process(self, frame: bytes) -> bool:  # noqa: C901 - one request's path: framing errors, parked requests, then per-API dispatch
        """Handle one request; False closes the connection (the reason is logged)."""
        try:
            header = peek_request_header(frame)
        except FrameError as exc:
            log.warning("connection %d: %s; closing it", self.connection_id, exc)
            return False
        api_key, api_version = header.api_key, header.api_version
        server = self.server
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "connection %d -> api_key=%d v%d correlation=%d client=%s",
                self.connection_id,
                api_key,
                api_version,
                header.correlation_id,
                header.client_id,
            )
        if api_key == API_VERSIONS:
            low, high = SERVER_VERSIONS[API_VERSIONS]
            if not (low <= api_version <= high) or not supports(api_key, api_version):
                # KafkaApis: an unsupported ApiVersions version is answered with v0 and the error.
                self.deliver(header.correlation_id, server.api_versions(0, ErrorCode.unsupported_version))
            else:
                self.deliver(header.correlation_id, server.api_versions(api_version))
            return True
        low, high = server.versions().get(api_key, (0, -1))
        if not low <= api_version <= high:
            log.warning(
                "connection %d: api_key %d v%d is not served here; closing it",
                self.connection_id,
                api_key,
                api_version,
            )
            return False
        try:
            request = decode_request_body(header, frame)
        except CodecError as exc:
            log.warning("connection %d: %s; closing it", self.connection_id, exc)
            return False
        if api_key == METADATA:
            self.deliver(header.correlation_id, server.metadata(api_version, request))
            return True
        if api_key == LIST_OFFSETS:
            self.deliver(header.correlation_id, server.empty_answer(api_key, api_version, request))
            return True
        if api_key == FETCH:
            # Nothing will ever arrive: wait as long as the client allows (capped) so that
            # polling consumers do not spin.
            max_wait_s = min(max(int(request.max_wait.total_seconds() * 1000), 0), 500) / 1000
            await asyncio.sleep(max_wait_s)
            self.deliver(header.correlation_id, server.empty_answer(api_key, api_version, request))
            return True
        context = RequestContext(
            connection_id=self.connection_id,
            client_id=header.client_id or "",
            client_host=self.client_host,
            api_version=api_version,
            correlation_id=header.correlation_id,
        )
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.waiting[header.correlation_id] = waiter
        try:
            outputs = server.coordinator.handle(server.now_ms(), context, request)
        except CoordinatorFault as exc:
            server.dispatch(exc.outputs)
            log.warning("connection %d: %s; closing it", self.connection_id, exc)
            return False
        server.dispatch(outputs)
        if not waiter.done():
            # Parked JoinGroup/SyncGroup: the channel stays muted until answered.
            await self.writer.drain()
            return await self.wait_parked(waiter)
        return True


__all__ = ["ReferenceServer"]
