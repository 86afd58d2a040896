"""The embedded consumer protocol: subscription metadata in JoinGroup, assignments in SyncGroup.

Both are versioned blobs: an int16 version, then the body of `ConsumerProtocolSubscription` or
`ConsumerProtocolAssignment` (Kafka's `clients/.../common/message/ConsumerProtocol*.json`, which kio
generates). Like Kafka's `ConsumerProtocol.deserializeAssignment`, a version newer than we know is
read with the newest schema we have, since later versions only append fields.
"""

from __future__ import annotations

import io
import struct
import typing
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from kio.index import load_entity_schema
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i32

from proxy.wire.codec import CodecError

_VERSION = struct.Struct(">h")
_MAX_ASSIGNMENT_VERSION = 3
_MAX_SUBSCRIPTION_VERSION = 3


@lru_cache(maxsize=16)
def _schema(name: str, api_version: int) -> Any:
    return load_entity_schema(name, api_version, EntityType.data)


def _decode(name: str, newest: int, data: bytes) -> tuple[int, Any]:
    if len(data) < 2:
        raise CodecError(f"{name}: {len(data)} bytes, too short for a version")
    (blob_version,) = _VERSION.unpack_from(data, 0)
    if blob_version < 0:
        raise CodecError(f"{name}: negative version {blob_version}")
    schema = _schema(name, min(blob_version, newest))
    try:
        entity, _size = entity_reader(schema)(data, 2)
    except Exception as exc:
        raise CodecError(f"cannot decode {name} v{blob_version}: {exc}") from exc
    return int(blob_version), entity


def _encode(name: str, blob_version: int, entity: Any) -> bytes:
    buffer = io.BytesIO()
    buffer.write(_VERSION.pack(blob_version))
    entity_writer(_schema(name, blob_version))(buffer, entity)
    return buffer.getvalue()


def decode_assignment(data: bytes) -> tuple[str, ...]:
    """Sorted `topic-partition` strings of a SyncGroup assignment blob (empty blob: no partitions)."""
    if not data:
        return ()
    _, entity = _decode("consumer_protocol_assignment", _MAX_ASSIGNMENT_VERSION, data)
    return tuple(
        sorted(
            (f"{tp.topic}-{partition}" for tp in entity.assigned_partitions for partition in tp.partitions),
            key=_partition_sort_key,
        )
    )


def decode_assignment_detail(data: bytes) -> tuple[dict[str, frozenset[int]], bytes | None]:
    """A SyncGroup assignment blob as (topic -> partitions, userData or None)."""
    _, entity = _decode("consumer_protocol_assignment", _MAX_ASSIGNMENT_VERSION, data)
    by_topic: dict[str, frozenset[int]] = {}
    for tp in entity.assigned_partitions:
        by_topic[str(tp.topic)] = by_topic.get(str(tp.topic), frozenset()) | {int(p) for p in tp.partitions}
    return by_topic, None if entity.user_data is None else bytes(entity.user_data)


def encode_assignment(
    partitions: dict[str, list[int]], blob_version: int = 0, user_data: bytes | None = None
) -> bytes:
    schema = _schema("consumer_protocol_assignment", blob_version)
    tp_cls = _tuple_element_type(schema, "assigned_partitions")
    entity = schema(
        assigned_partitions=tuple(
            tp_cls(topic=topic, partitions=tuple(i32(p) for p in sorted(parts)))
            for topic, parts in sorted(partitions.items())
        ),
        user_data=user_data,
    )
    return _encode("consumer_protocol_assignment", blob_version, entity)


def decode_subscription_topics(data: bytes) -> tuple[str, ...]:
    """Subscribed topics of a JoinGroup protocol metadata blob."""
    _, entity = _decode("consumer_protocol_subscription", _MAX_SUBSCRIPTION_VERSION, data)
    return tuple(entity.topics)


@dataclass(frozen=True, slots=True)
class Subscription:
    """A decoded ConsumerProtocolSubscription: what the assignors read (owned partitions from v1,
    generation from v2, KIP-429/KIP-792)."""

    topics: tuple[str, ...]
    user_data: bytes | None
    owned_partitions: tuple[tuple[str, int], ...]
    generation_id: int | None  # None below v2
    blob_version: int


def decode_subscription(data: bytes) -> Subscription:
    blob_version, entity = _decode("consumer_protocol_subscription", _MAX_SUBSCRIPTION_VERSION, data)
    owned = tuple(
        (str(tp.topic), int(p)) for tp in getattr(entity, "owned_partitions", ()) for p in tp.partitions
    )
    generation = getattr(entity, "generation_id", None)
    return Subscription(
        tuple(entity.topics),
        None if entity.user_data is None else bytes(entity.user_data),
        owned,
        None if generation is None else int(generation),
        blob_version,
    )


def encode_subscription(
    topics: list[str] | tuple[str, ...],
    blob_version: int = 0,
    *,
    owned_partitions: tuple[tuple[str, int], ...] = (),
    generation_id: int = -1,
    user_data: bytes | None = None,
) -> bytes:
    """A subscription blob; fields the blob version lacks are left out (as Kafka's ConsumerProtocol)."""
    schema = _schema("consumer_protocol_subscription", blob_version)
    kwargs: dict[str, Any] = {"topics": tuple(topics), "user_data": user_data}
    if "owned_partitions" in schema.__dataclass_fields__:
        tp_cls = _tuple_element_type(schema, "owned_partitions")
        by_topic: dict[str, list[int]] = {}
        for topic, partition in owned_partitions:
            by_topic.setdefault(topic, []).append(partition)
        kwargs["owned_partitions"] = tuple(
            tp_cls(topic=topic, partitions=tuple(i32(p) for p in parts)) for topic, parts in by_topic.items()
        )
    if "generation_id" in schema.__dataclass_fields__:
        kwargs["generation_id"] = i32(generation_id)
    if "rack_id" in schema.__dataclass_fields__:
        kwargs["rack_id"] = None
    return _encode("consumer_protocol_subscription", blob_version, schema(**kwargs))


@cache
def _tuple_element_type(schema: Any, field_name: str) -> Any:
    """The element class of a `tuple[Nested, ...]` field (kio annotates nested tuples this way).
    Cached: `get_type_hints` evaluates every annotation of the class, and a replayed member encodes
    a subscription per JoinGroup (a third of a 1,000-member bounce's time went there)."""
    return typing.get_args(typing.get_type_hints(schema)[field_name])[0]


def _partition_sort_key(topic_partition: str) -> tuple[str, int]:
    topic, _, partition = topic_partition.rpartition("-")
    return topic, int(partition)


__all__ = [
    "Subscription",
    "decode_assignment",
    "decode_assignment_detail",
    "decode_subscription",
    "decode_subscription_topics",
    "encode_assignment",
    "encode_subscription",
]
