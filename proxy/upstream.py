"""What the upstream broker is: its group settings and release line, asked once when recording starts.

`describe_upstream(host, port)` runs three requests on one connection, as an admin client would:
ApiVersions v0 (every broker answers it before anything else), Metadata (to learn the node id of
the broker we are talking to: Kafka's ConfigHelper describes static broker configs only for its
own id) and DescribeConfigs on that broker resource for `GROUP_CONFIG_NAMES`. A broker that is
unreachable, closes the connection (SASL listeners), refuses the describe (an ACL:
CLUSTER_AUTHORIZATION_FAILED) or answers anything unexpected yields settings that are unknown,
with the reason; never an exception. The broker's release line comes from its ApiVersions ranges
(`broker_version_label`): Kafka advertises no exact version on the wire.
"""

from __future__ import annotations

import asyncio
import ssl
import struct
from typing import Any, Final

from kio.schema.errors import ErrorCode

from proxy.capture.header import GROUP_CONFIG_NAMES, GroupSettings
from proxy.wire import (
    ApiKey,
    CodecError,
    FrameError,
    decode_response,
    encode_request,
    request_schema,
    supports,
)
from proxy.wire.convert import _build

CLIENT_ID: Final = "group-replay-proxy"
BROKER_RESOURCE: Final = 4  # ConfigResource.Type.BROKER
DEFAULT_TIMEOUT_MS: Final = 5000
_SIZE = struct.Struct(">i")
_MAX_ANSWER_BYTES = 16 << 20

# Newest request version per API in each Kafka release line, from Kafka's message JSON
# (clients/src/main/resources/common/message/*Request.json `validVersions` at the release tags;
# "trunk-2024-10" is the tree after 3.8, i.e. 3.9 and later). Produce, Fetch, ListOffsets,
# Metadata, OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, ApiVersions, CreateTopics.
_FINGERPRINT_APIS: Final = (
    ApiKey.PRODUCE,
    ApiKey.FETCH,
    ApiKey.LIST_OFFSETS,
    ApiKey.METADATA,
    ApiKey.OFFSET_COMMIT,
    ApiKey.OFFSET_FETCH,
    ApiKey.FIND_COORDINATOR,
    ApiKey.JOIN_GROUP,
    ApiKey.API_VERSIONS,
    ApiKey.CREATE_TOPICS,
)
_RELEASES: Final[tuple[tuple[str, tuple[int, ...]], ...]] = (
    ("2.2", (7, 10, 5, 7, 6, 5, 2, 4, 2, 3)),
    ("2.3", (7, 11, 5, 8, 7, 5, 2, 5, 2, 3)),
    ("2.4", (8, 11, 5, 9, 8, 6, 3, 6, 3, 5)),
    ("2.5", (8, 11, 5, 9, 8, 7, 3, 7, 3, 5)),
    ("2.6", (8, 11, 5, 9, 8, 7, 3, 7, 3, 5)),
    ("2.7", (8, 12, 5, 9, 8, 7, 3, 7, 3, 6)),
    ("2.8", (9, 12, 6, 11, 8, 7, 3, 7, 3, 7)),
    ("3.0", (9, 12, 7, 11, 8, 8, 4, 7, 3, 7)),
    ("3.1", (9, 13, 7, 12, 8, 8, 4, 7, 3, 7)),
    ("3.2", (9, 13, 7, 12, 8, 8, 4, 9, 3, 7)),
    ("3.3", (9, 13, 7, 12, 8, 8, 4, 9, 3, 7)),
    ("3.4", (9, 13, 7, 12, 8, 8, 4, 9, 3, 7)),
    ("3.5", (9, 15, 8, 12, 8, 8, 4, 9, 3, 7)),
    ("3.6", (9, 15, 8, 12, 9, 8, 4, 9, 3, 7)),
    ("3.7", (10, 16, 8, 12, 9, 9, 4, 9, 3, 7)),
    ("3.8", (11, 16, 8, 12, 9, 9, 5, 9, 3, 7)),
    # Measured from the ApiVersions answers of Kafka 3.9.2 and 4.3.1 brokers (harness, default
    # configuration); 4.0-4.2 are not in the table yet and read as "3.9+".
    ("3.9", (11, 17, 9, 12, 9, 9, 6, 9, 4, 7)),
    ("4.3", (13, 18, 11, 13, 10, 10, 6, 9, 4, 7)),
)


def broker_version_label(ranges: dict[int, tuple[int, int]]) -> str:
    """The Kafka release line(s) whose newest versions a broker's ApiVersions match: "2.8",
    "3.2-3.4" when releases look alike, "3.9+" between or past the lines we know."""
    seen = tuple(ranges.get(int(api), (0, -1))[1] for api in _FINGERPRINT_APIS)
    exact = [name for name, versions in _RELEASES if versions == seen]
    if exact:
        return exact[0] if len(exact) == 1 else f"{exact[0]}-{exact[-1]}"
    older = [name for name, versions in _RELEASES if all(v <= s for v, s in zip(versions, seen, strict=True))]
    return f"{older[-1]}+" if older else "unknown"


def _version(ranges: dict[int, tuple[int, int]], api_key: int, newest: int) -> int | None:
    """The newest version of `api_key` both the broker and kio speak, at most `newest`."""
    low, high = ranges.get(api_key, (0, -1))
    for api_version in range(min(high, newest), low - 1, -1):
        if supports(api_key, api_version):
            return api_version
    return None


class _Refused(Exception):
    """The upstream answered, but not with what we need (the reason is the message)."""


class _Link:
    """One admin connection: request, wait for its answer (nothing pipelined)."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.correlation_id = 0

    async def call(self, api_key: int, api_version: int, values: dict[str, Any]) -> Any:
        self.correlation_id += 1
        entity = _build(request_schema(api_key, api_version), values, "", [])
        self.writer.write(encode_request(entity, self.correlation_id, CLIENT_ID))
        await self.writer.drain()
        (size,) = _SIZE.unpack(await self.reader.readexactly(4))
        if not 4 <= size <= _MAX_ANSWER_BYTES:
            raise _Refused(f"answer of {size} bytes")
        correlation_id, response = decode_response(await self.reader.readexactly(size), api_key, api_version)
        if correlation_id != self.correlation_id:
            raise _Refused(f"answer for correlation id {correlation_id}, expected {self.correlation_id}")
        return response


async def _describe(host: str, port: int, tls: ssl.SSLContext | None) -> GroupSettings:
    if tls is None:
        reader, writer = await asyncio.open_connection(host, port)
    else:
        reader, writer = await asyncio.open_connection(host, port, ssl=tls, server_hostname=host)
    link = _Link(reader, writer)
    try:
        versions = await link.call(ApiKey.API_VERSIONS, 0, {})
        if int(versions.error_code):
            raise _Refused(f"ApiVersions: {ErrorCode(int(versions.error_code)).name}")
        ranges = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in versions.api_keys}
        label = broker_version_label(ranges)
        try:
            node_id = await _node_id(link, ranges, host, port)
        except (OSError, asyncio.IncompleteReadError):
            # SASL listeners answer ApiVersions, then close on anything before a login: the proxy
            # relays its clients' logins and never logs in itself.
            return GroupSettings(
                broker_version=label,
                unknown_reason="the broker closed the connection after ApiVersions (a SASL listener?: "
                "the proxy relays its clients' logins and does not log in itself)",
            )
        describe_version = _version(ranges, ApiKey.DESCRIBE_CONFIGS, 4)  # DescribeConfigs
        if node_id is None or describe_version is None:
            reason = "the broker's node id is not in Metadata" if describe_version else "no DescribeConfigs"
            return GroupSettings(broker_version=label, unknown_reason=reason)
        resource = {"resource_type": BROKER_RESOURCE, "resource_name": str(node_id)}
        described = await link.call(
            ApiKey.DESCRIBE_CONFIGS,
            describe_version,
            {
                "resources": [{**resource, "configuration_keys": GROUP_CONFIG_NAMES}],
                "include_synonyms": False,
            },
        )
        if len(described.results) != 1:
            return GroupSettings(broker_version=label, unknown_reason="DescribeConfigs answered no result")
        result = described.results[0]
        if int(result.error_code):
            name = ErrorCode(int(result.error_code)).name
            why = f"DescribeConfigs refused: {name}" + (
                f" ({result.error_message})" if result.error_message else ""
            )
            return GroupSettings(broker_version=label, unknown_reason=why)
        configs = {
            str(entry.name): entry.value for entry in result.configs if entry.name in GROUP_CONFIG_NAMES
        }
        return GroupSettings.from_configs(configs, label)
    finally:
        writer.close()


async def _node_id(link: _Link, ranges: dict[int, tuple[int, int]], host: str, port: int) -> int | None:
    """The id of the broker at host:port: its own entry in Metadata (by address, then by port,
    then the only broker)."""
    api_version = _version(ranges, ApiKey.METADATA, 9)
    if api_version is None:
        return None
    metadata = await link.call(ApiKey.METADATA, api_version, {"topics": ()})
    brokers = [(int(b.node_id), str(b.host), int(b.port)) for b in metadata.brokers]
    for matches in (
        lambda b: (b[1], b[2]) == (host, port),
        lambda b: b[2] == port,
        lambda b: len(brokers) == 1,
    ):
        found = [b[0] for b in brokers if matches(b)]
        if len(found) == 1:
            return found[0]
    return None


async def describe_upstream(
    host: str, port: int, timeout_ms: int = DEFAULT_TIMEOUT_MS, tls: ssl.SSLContext | None = None
) -> GroupSettings:
    """The upstream's group settings; unknown (with `unknown_reason`) rather than an exception.
    `tls`: the upstream leg's context (`proxy.tls`), for a TLS listener."""
    from proxy.tls import explain_upstream_error

    try:
        async with asyncio.timeout(timeout_ms / 1000):  # not wait_for: it can lose a cancel (3.11)
            return await _describe(host, port, tls)
    except TimeoutError:
        return GroupSettings(unknown_reason=f"upstream {host}:{port} did not answer within {timeout_ms} ms")
    except (OSError, asyncio.IncompleteReadError) as exc:
        return GroupSettings(
            unknown_reason=f"upstream {host}:{port} unreachable: "
            f"{explain_upstream_error(exc) if str(exc) else type(exc).__name__}"
        )
    except (_Refused, CodecError, FrameError) as exc:
        return GroupSettings(unknown_reason=f"upstream {host}:{port}: {exc}")


def describe_upstream_sync(host: str, port: int, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> GroupSettings:
    """`describe_upstream` for callers without an event loop (the demo)."""
    return asyncio.run(describe_upstream(host, port, timeout_ms))


__all__ = ["GroupSettings", "broker_version_label", "describe_upstream", "describe_upstream_sync"]
