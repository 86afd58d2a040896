"""The capture's section-header comment: one JSON object, declared and versioned here.

The writer encodes it (`encode_section_header`) and the reader decodes it
(`decode_section_header`); nothing else spells its keys. Format version 1 has `format`,
`format_version`, `tool_version`, `upstream` and `policy`; version 2 adds
`upstream_group_config` (AGREED #2): the recorded broker's group settings, asked for when the
recording started (`proxy.upstream.describe_upstream`); version 3 adds `record_scope` (issue 12):
which frames the capture holds (`RecordScope`; a header without it recorded everything); version
4 adds header-only frames (a frame comment's `omitted_body_bytes`: the packet keeps the frame's
original length, the pcapng block holds only the frame's size prefix and fixed header fields);
version 5 writes header-only frames without a comment (`proxy.capture.snapped`: one per Produce
or Fetch frame and leg was most of group scope's cost): a reader takes their connection from the
TCP stream and their fields from the captured bytes; version 6 writes them on the client leg
only (the upstream leg relays the same bytes: a reader shows each on both legs, and the upstream
leg's TCP stream skips their bytes, as a capture missing those segments would). Format 4's
comments are still decoded.
Decoding validates every field it uses: a wrong type is reported in `SectionHeader.damage`,
never raised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

from kio.schema.index import api_key_map

from proxy.wire import GROUP_API_KEYS, ApiKey

CAPTURE_FORMAT: Final = "group-replay-capture"
# 2: upstream_group_config; 3: record_scope; 4: header-only frames (`omitted_body_bytes`);
# 5: header-only frames without a comment; 6: header-only frames on the client leg only
CAPTURE_FORMAT_VERSION: Final = 6
GROUP_CONFIG_KEY: Final = "upstream_group_config"
RECORD_SCOPE_KEY: Final = "record_scope"


def tool_version() -> str:
    """The installed group-replay's version, for the section header."""
    try:
        return version("group-replay")
    except PackageNotFoundError:
        return "unknown"


class RecordScope(StrEnum):
    """Which frames a capture holds (`--record-scope`).

    GROUP (the default): every group API (classic, KIP-848 and the share/streams group APIs),
    and the frames a reader needs around them: ApiVersions (the client's software), Metadata,
    FindCoordinator and DescribeCluster (where the coordinator is), SaslHandshake and
    SaslAuthenticate (bodies redacted). Produce, Fetch and every other API are recorded as their
    header only: a request's size prefix, api_key, api_version and correlation_id (client_id in
    the comment), a response's size prefix and correlation_id, in a packet that keeps the frame's
    original length (a snapped pcapng block: Wireshark shows it truncated). They are most of a
    cluster's bytes and nothing group-replay reads (issue 12: 703 MB of capture for a few MB of
    group traffic). The close comment keeps each connection's byte counts. ALL: every frame.
    """

    GROUP = "group"
    ALL = "all"

    @property
    def api_keys(self) -> frozenset[int] | None:
        """The API keys recorded, or None for every one."""
        return GROUP_SCOPE_API_KEYS if self is RecordScope.GROUP else None


GROUP_SCOPE_API_KEYS: Final[frozenset[int]] = (
    GROUP_API_KEYS
    | {api_key for api_key, name in api_key_map.items() if "group" in name}
    | {
        ApiKey.API_VERSIONS,
        ApiKey.METADATA,
        ApiKey.FIND_COORDINATOR,
        ApiKey.DESCRIBE_CLUSTER,
        ApiKey.SASL_HANDSHAKE,
        ApiKey.SASL_AUTHENTICATE,
    }
)

# Broker configs asked for with DescribeConfigs (Kafka's GroupCoordinatorConfig names).
GROUP_CONFIG_NAMES: Final = (
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "group.coordinator.new.enable",
    "group.coordinator.rebalance.protocols",
    "group.consumer.migration.policy",
)


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """The recorded broker's group settings (AGREED #2); None where unknown.

    `broker_version` is the release range ApiVersions implies ("3.2-3.4", "3.9+"): Kafka
    advertises no exact version on the wire. `configs` holds the raw DescribeConfigs values;
    `unknown_reason` says why the settings are unknown (unreachable, refused by an ACL, ...).
    """

    initial_rebalance_delay_ms: int | None = None
    """group.initial.rebalance.delay.ms: how long a new group waits for more members to join."""
    min_session_timeout_ms: int | None = None
    """group.min.session.timeout.ms: a JoinGroup asking less is refused INVALID_SESSION_TIMEOUT."""
    max_session_timeout_ms: int | None = None
    """group.max.session.timeout.ms: the upper bound, refused the same way."""
    max_size: int | None = None
    """group.max.size: a member past it is refused GROUP_MAX_SIZE_REACHED."""
    new_coordinator: bool | None = None
    """The new group coordinator runs (KIP-848): group.coordinator.new.enable, or `consumer`
    among group.coordinator.rebalance.protocols."""
    consumer_migration_policy: str | None = None
    """group.consumer.migration.policy: which classic <-> consumer conversions the broker makes."""
    broker_version: str | None = None
    configs: Mapping[str, str | None] = field(default_factory=dict)
    unknown_reason: str | None = None

    @classmethod
    def from_configs(
        cls, configs: Mapping[str, str | None], broker_version: str | None, reason: str | None = None
    ) -> GroupSettings:
        """Settings from DescribeConfigs values (names as in Kafka's GroupCoordinatorConfig)."""

        def number(name: str) -> int | None:
            value = configs.get(name)
            try:
                return None if value is None else int(value)
            except ValueError:
                return None

        new_enable = configs.get("group.coordinator.new.enable")
        protocols = configs.get("group.coordinator.rebalance.protocols")
        new_coordinator: bool | None
        if new_enable is not None:
            new_coordinator = new_enable.strip().lower() == "true"
        elif protocols is not None and "consumer" in protocols.split(","):
            new_coordinator = True  # the consumer protocol runs only on the new coordinator (KIP-848)
        elif configs and protocols is None:
            new_coordinator = False  # before 3.7 there is only the classic coordinator
        else:
            new_coordinator = None
        return cls(
            initial_rebalance_delay_ms=number("group.initial.rebalance.delay.ms"),
            min_session_timeout_ms=number("group.min.session.timeout.ms"),
            max_session_timeout_ms=number("group.max.session.timeout.ms"),
            max_size=number("group.max.size"),
            new_coordinator=new_coordinator,
            consumer_migration_policy=configs.get("group.consumer.migration.policy"),
            broker_version=broker_version,
            configs=dict(configs),
            unknown_reason=reason,
        )

    def to_json(self) -> dict[str, Any]:
        return {info.name: _plain(getattr(self, info.name)) for info in fields(self)}


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


_GROUP_TYPES: Final[dict[str, tuple[type, ...]]] = {
    "initial_rebalance_delay_ms": (int,),
    "min_session_timeout_ms": (int,),
    "max_session_timeout_ms": (int,),
    "max_size": (int,),
    "new_coordinator": (bool,),
    "consumer_migration_policy": (str,),
    "broker_version": (str,),
    "unknown_reason": (str,),
}


def _group_settings(raw: Any, problems: list[str]) -> GroupSettings | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        problems.append(f"{GROUP_CONFIG_KEY} is a {type(raw).__name__}, not an object")
        return None
    values: dict[str, Any] = {}
    for name, types in _GROUP_TYPES.items():
        value = raw.get(name)
        ok = value is None or (
            isinstance(value, types) and not (bool not in types and isinstance(value, bool))
        )
        if ok:
            values[name] = value
        else:
            problems.append(f"{GROUP_CONFIG_KEY}.{name} has the wrong type ({type(value).__name__})")
    configs = raw.get("configs") or {}
    if isinstance(configs, dict):
        values["configs"] = {str(k): v for k, v in configs.items() if v is None or isinstance(v, str)}
    else:
        problems.append(f"{GROUP_CONFIG_KEY}.configs is not an object")
    return GroupSettings(**values)


@dataclass(frozen=True, slots=True)
class SectionHeader:
    format_version: int
    tool_version: str | None
    upstream: str | None
    policy: str | None
    group_settings: GroupSettings | None
    damage: str | None = None  # fields present but unusable, described
    record_scope: RecordScope = RecordScope.ALL  # before format 3 every frame was recorded

    def as_dict(self) -> dict[str, Any]:
        """The header as a plain mapping (what `capture show` prints)."""
        result: dict[str, Any] = {
            "format": CAPTURE_FORMAT,
            "format_version": self.format_version,
            "tool_version": self.tool_version,
            "upstream": self.upstream,
            "policy": self.policy,
            RECORD_SCOPE_KEY: str(self.record_scope),
        }
        if self.group_settings is not None:
            result[GROUP_CONFIG_KEY] = self.group_settings.to_json()
        return result


def _json_object(comment: str) -> dict[str, Any] | None:
    """The JSON object a comment holds; None for any other comment (not JSON, or not an object):
    the reader skips comments other tools wrote."""
    try:
        raw = json.loads(comment)
    except ValueError:
        return None
    return raw if isinstance(raw, dict) else None


def encode_section_header(
    *,
    tool_version: str,
    upstream: str,
    policy: str,
    group_settings: GroupSettings | None,
    record_scope: RecordScope = RecordScope.ALL,
) -> str:
    header: dict[str, Any] = {
        "format": CAPTURE_FORMAT,
        "format_version": CAPTURE_FORMAT_VERSION,
        "tool_version": tool_version,
        "upstream": upstream,
        "policy": policy,
        RECORD_SCOPE_KEY: str(record_scope),
    }
    if group_settings is not None:
        header[GROUP_CONFIG_KEY] = group_settings.to_json()
    return json.dumps(header, separators=(",", ":"))


def decode_section_header(comment: str) -> SectionHeader | None:
    """The header in `comment`, or None when the comment is not a group-replay header."""
    raw = _json_object(comment)
    if raw is None or raw.get("format") != CAPTURE_FORMAT:
        return None
    problems: list[str] = []

    def text(name: str) -> str | None:
        value = raw.get(name)
        if value is None or isinstance(value, str):
            return value
        problems.append(f"{name} is a {type(value).__name__}, not a string")
        return None

    version = raw.get("format_version")
    if not isinstance(version, int) or isinstance(version, bool):
        problems.append(f"format_version is {version!r}")
        version = 1
    scope = RecordScope.ALL
    raw_scope = raw.get(RECORD_SCOPE_KEY)
    if raw_scope is not None:
        try:
            scope = RecordScope(raw_scope)
        except ValueError:
            problems.append(
                f"{RECORD_SCOPE_KEY} is {raw_scope!r}, not one of {[str(s) for s in RecordScope]}"
            )
    return SectionHeader(
        format_version=version,
        tool_version=text("tool_version"),
        upstream=text("upstream"),
        policy=text("policy"),
        group_settings=_group_settings(raw.get(GROUP_CONFIG_KEY), problems),
        damage="; ".join(problems) or None,
        record_scope=scope,
    )


__all__ = [
    "CAPTURE_FORMAT",
    "CAPTURE_FORMAT_VERSION",
    "GROUP_CONFIG_KEY",
    "GROUP_CONFIG_NAMES",
    "GROUP_SCOPE_API_KEYS",
    "RECORD_SCOPE_KEY",
    "CommentError",
    "GroupSettings",
    "RecordScope",
    "SectionHeader",
    "decode_packet_comment",
    "decode_section_header",
    "encode_section_header",
    "tool_version",
]


# ---------------------------------------------------------------------------------------------
# Per-packet comments (format 1 and 2 alike): one per frame, one per connection event.
# Encoded by the functions below (the writer process calls them; its hot path caches a frame
# comment's head per connection/API/client/group and appends only the tail), decoded by
# `decode_packet_comment`, which checks every field the reader uses.


def open_comment(conn: int, client: str | None, upstream: str | None) -> bytes:
    return json.dumps(
        {"conn": conn, "event": "open", "client": client, "upstream": upstream}, separators=(",", ":")
    ).encode()


def close_comment(conn: int, reason: str | None, client_bytes: int = 0, upstream_bytes: int = 0) -> bytes:
    """`client_bytes`/`upstream_bytes`: what the client and the broker sent on this connection, all
    of it (with `--record-scope group` most of it is not in the capture)."""
    return json.dumps(
        {
            "conn": conn,
            "event": "close",
            "reason": reason,
            "client_bytes": client_bytes,
            "upstream_bytes": upstream_bytes,
        },
        separators=(",", ":"),
    ).encode()


def frame_comment_head(
    conn: int, direction: str, api_key: int, api_version: int, client_id_json: str, group_id_json: str
) -> str:
    """Everything of a frame comment but its correlation id and time (`frame_comment_tail`);
    `*_json` are the JSON texts of client_id and group_id (the writer caches them)."""
    return (
        f'{{"conn":{conn},"dir":"{direction}","api_key":{api_key},"api_version":{api_version},'
        f'"client_id":{client_id_json},"group_id":{group_id_json},"rewritten":false,"correlation_id":'
    )


def frame_comment_tail(correlation_id: int, ts_ns: int) -> str:
    return f'{correlation_id},"ts_ns":{ts_ns}}}'


def frame_comment(
    conn: int,
    direction: str,
    api_key: int,
    api_version: int,
    correlation_id: int,
    client_id_json: str,
    group_id_json: str,
    ts_ns: int,
    rewritten: bool,
    redacted_body_bytes: int | None,
    omitted_body_bytes: int | None = None,
) -> bytes:
    """A whole frame comment (the general path: rewritten frames, SASL, big frames; format 4's
    header-only frames had `omitted_body_bytes`: how much of the frame after its recorded header
    the capture leaves out; format 5 writes those without a comment, `proxy.capture.snapped`)."""
    extra = "" if redacted_body_bytes is None else f',"redacted_body_bytes":{redacted_body_bytes}'
    if omitted_body_bytes is not None:
        extra += f',"omitted_body_bytes":{omitted_body_bytes}'
    return (
        f'{{"conn":{conn},"dir":"{direction}","api_key":{api_key},"api_version":{api_version},'
        f'"correlation_id":{correlation_id},"client_id":{client_id_json},"group_id":{group_id_json},'
        f'"ts_ns":{ts_ns},"rewritten":{"true" if rewritten else "false"}{extra}}}'
    ).encode()


FRAME_COMMENT_FIELDS: Final[dict[str, tuple[type, ...]]] = {
    "conn": (int,),
    "dir": (str,),
    "api_key": (int,),
    "api_version": (int,),
    "correlation_id": (int,),
    "client_id": (str, type(None)),
    "group_id": (str, type(None)),
    "ts_ns": (int,),
    "rewritten": (bool,),
    "redacted_body_bytes": (int, type(None)),
    "omitted_body_bytes": (int, type(None)),
}
_OPTIONAL_FRAME_FIELDS: Final = frozenset(
    {"client_id", "group_id", "rewritten", "redacted_body_bytes", "omitted_body_bytes"}
)
EVENT_COMMENT_FIELDS: Final[dict[str, tuple[type, ...]]] = {
    "conn": (int,),
    "event": (str,),
    "client": (str, type(None)),
    "upstream": (str, type(None)),
    "reason": (str, type(None)),
    "client_bytes": (int,),
    "upstream_bytes": (int,),
}
DIRECTIONS: Final = ("request", "response")


class CommentError(ValueError):
    """A packet comment that names a frame or event but whose fields are missing or wrong."""


def _typed(raw: dict[str, Any], name: str, types: tuple[type, ...]) -> bool:
    value = raw.get(name)
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def decode_packet_comment(text: str) -> dict[str, Any] | None:
    """A frame or event comment as a checked mapping; None for comments that are neither (other
    tools may add comments); raises CommentError for one of ours that is damaged."""
    raw = _json_object(text)
    if raw is None or "conn" not in raw:
        return None
    table = EVENT_COMMENT_FIELDS if "event" in raw else FRAME_COMMENT_FIELDS
    for name, types in table.items():
        if name not in raw:
            if table is EVENT_COMMENT_FIELDS and name != "conn" and name != "event":
                continue
            if name in _OPTIONAL_FRAME_FIELDS:
                continue
            raise CommentError(f"comment without {name!r}")
        if not _typed(raw, name, types):
            raise CommentError(f"comment field {name!r} is {type(raw[name]).__name__}")
    if "dir" in raw and raw["dir"] not in DIRECTIONS:
        raise CommentError(f"comment field 'dir' is {raw['dir']!r}")
    if not 0 <= raw["conn"] < 1 << 63:
        raise CommentError(f"comment field 'conn' is {raw['conn']}")
    return raw
