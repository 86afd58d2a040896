"""API keys group-replay decodes, by name (values from Kafka's message JSON `apiKey`)."""

from __future__ import annotations

from enum import IntEnum

from kio.schema.index import api_key_map


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DESCRIBE_CONFIGS = 32
    DELETE_GROUPS = 42
    OFFSET_DELETE = 47
    SASL_AUTHENTICATE = 36
    DESCRIBE_CLUSTER = 60
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69


# The classic group protocol, the consumer group protocol (KIP-848: ConsumerGroupHeartbeat and
# ConsumerGroupDescribe, Kafka 3.7+; kio knows v0-v1 of each, all Kafka 4.3.1 serves), and the
# lookups that route a client to its coordinator.
GROUP_API_KEYS: frozenset[int] = frozenset(
    {
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        ApiKey.JOIN_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.FIND_COORDINATOR,
        ApiKey.DESCRIBE_GROUPS,
    }
)


# Every API key kio has a schema for (Kafka's message JSON); anything else cannot be Kafka.
KNOWN_API_KEYS: frozenset[int] = frozenset(api_key_map)

# The APIs only a KIP-848 consumer-protocol member (or a tool describing its group) sends.
CONSUMER_PROTOCOL_API_KEYS: frozenset[int] = frozenset(
    {ApiKey.CONSUMER_GROUP_HEARTBEAT, ApiKey.CONSUMER_GROUP_DESCRIBE}
)


def api_name(api_key: int) -> str:
    """Kafka's name for an API key (`JoinGroup`), or `Unknown(N)`."""
    try:
        snake = api_key_map[api_key]
    except KeyError:
        return f"Unknown({api_key})"
    return "".join(part.capitalize() for part in snake.split("_"))
