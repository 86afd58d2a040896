"""Broker address rewriting: clients must reach every broker through the proxy.

A client bootstraps through the proxy, then connects to the brokers named in Metadata,
FindCoordinator and DescribeCluster responses. Like Kroxylicious' port-per-broker scheme, each
upstream broker gets its own proxy listener, and those responses are rewritten to name the
listeners instead of the brokers. The listener directory is owned by the asyncio shell, which
opens a listener the first time a broker appears; this module stays sans-IO.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from proxy.wire import ApiKey, decode_response, encode_response

ADDRESS_API_KEYS: frozenset[int] = frozenset(
    {ApiKey.METADATA, ApiKey.FIND_COORDINATOR, ApiKey.DESCRIBE_CLUSTER}
)


class BrokerDirectory(Protocol):
    """Maps an upstream broker to the proxy listener that fronts it (opening it if new)."""

    def listener_for(self, node_id: int, host: str, port: int) -> tuple[str, int]: ...


class StaticDirectory:
    """A directory with fixed answers (tests) or one that numbers listeners from a base port."""

    def __init__(self, host: str, base_port: int) -> None:
        self.host = host
        self.base_port = base_port
        self.seen: dict[tuple[str, int], tuple[str, int]] = {}

    def listener_for(self, node_id: int, host: str, port: int) -> tuple[str, int]:
        key = (host, port)
        if key not in self.seen:
            self.seen[key] = (self.host, self.base_port + max(node_id, 0))
        return self.seen[key]


class AddressRewriter:
    """Rewrites broker endpoints in the responses that carry them."""

    def __init__(self, directory: BrokerDirectory) -> None:
        self.directory = directory

    def rewrite_response(self, api_key: int, api_version: int, response_frame: bytes) -> bytes | None:
        """The response frame (no size prefix) with proxy endpoints, or None when nothing changed."""
        correlation_id, body = decode_response(response_frame, api_key, api_version)
        match api_key:
            case ApiKey.METADATA:
                new_body = dataclasses.replace(body, brokers=self._brokers(body.brokers, "node_id"))
            case ApiKey.DESCRIBE_CLUSTER:
                new_body = dataclasses.replace(body, brokers=self._brokers(body.brokers, "broker_id"))
            case ApiKey.FIND_COORDINATOR if api_version >= 4:
                new_body = dataclasses.replace(body, coordinators=self._brokers(body.coordinators, "node_id"))
            case ApiKey.FIND_COORDINATOR:
                new_body = self._endpoint(body, "node_id")
            case _:
                return None
        if new_body == body:
            return None
        return encode_response(new_body, correlation_id)[4:]

    def _endpoint(self, entity: Any, id_field: str) -> Any:
        node_id = int(getattr(entity, id_field))
        if node_id < 0 or entity.port < 0 or not entity.host:
            return entity  # an error answer (no coordinator yet): nothing to route
        host, port = self.directory.listener_for(node_id, entity.host, int(entity.port))
        return dataclasses.replace(entity, host=host, port=type(entity.port)(port))

    def _brokers(self, brokers: tuple[Any, ...], id_field: str) -> tuple[Any, ...]:
        return tuple(self._endpoint(broker, id_field) for broker in brokers)
