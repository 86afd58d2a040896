"""Which group settings a run starts from, and what to call a live broker.

Both sides of a comparison start from the same group settings (issue 17): the reference
coordinator and a broker `replay` starts itself get the recorded broker's settings from the
capture header (`Capture.group_settings`, AGREED #2), and Kafka's own defaults for whatever the
header does not say (or for captures without one). Never a test knob on the product path.

A live run is named `broker-<version>` (AGREED #4), never by its address: the version comes from
what the broker advertises in ApiVersions (`broker_version_label`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from proxy.wire.apis import ApiKey
from replay.coordinator import CoordinatorConfig, KafkaBehaviour

# Kafka's GroupCoordinatorConfig defaults (the reference coordinator's CoordinatorConfig defaults).
_KAFKA_DEFAULTS: Final = CoordinatorConfig()


@dataclass(frozen=True, slots=True)
class GroupSettingsView:
    """The group settings a run uses, each with where it came from ("capture" or "Kafka default")."""

    initial_rebalance_delay_ms: int
    min_session_timeout_ms: int
    max_session_timeout_ms: int
    max_size: int
    new_coordinator: bool | None
    source: str  # "capture header" | "Kafka defaults" | "capture header + Kafka defaults"

    def coordinator_config(self) -> CoordinatorConfig:
        behaviour = KafkaBehaviour.NEW_COORDINATOR if self.new_coordinator else KafkaBehaviour.SCALA_3_9
        return CoordinatorConfig(
            group_min_session_timeout_ms=self.min_session_timeout_ms,
            group_max_session_timeout_ms=self.max_session_timeout_ms,
            group_initial_rebalance_delay_ms=self.initial_rebalance_delay_ms,
            group_max_size=self.max_size,
            kafka_behaviour=behaviour,
        )

    def broker_config(self) -> dict[str, str]:
        """server.properties lines for a broker `replay` starts (every one set, so the harness's
        own quick-test settings never leak into a product run)."""
        return {
            "group.initial.rebalance.delay.ms": str(self.initial_rebalance_delay_ms),
            "group.min.session.timeout.ms": str(self.min_session_timeout_ms),
            "group.max.session.timeout.ms": str(self.max_session_timeout_ms),
            "group.max.size": str(self.max_size),
        }


def group_settings(recorded: Any | None) -> GroupSettingsView:
    """The capture header's settings (a `proxy.capture.reader.GroupSettings` or None), completed
    with Kafka's defaults."""
    fields = (
        ("initial_rebalance_delay_ms", _KAFKA_DEFAULTS.group_initial_rebalance_delay_ms),
        ("min_session_timeout_ms", _KAFKA_DEFAULTS.group_min_session_timeout_ms),
        ("max_session_timeout_ms", _KAFKA_DEFAULTS.group_max_session_timeout_ms),
        ("max_size", _KAFKA_DEFAULTS.group_max_size),
    )
    values: dict[str, int] = {}
    from_capture = 0
    for name, default in fields:
        value = getattr(recorded, name, None) if recorded is not None else None
        values[name] = default if value is None else int(value)
        from_capture += value is not None
    if from_capture == len(fields):
        source = "capture header"
    elif from_capture:
        source = "capture header + Kafka defaults"
    else:
        source = "Kafka defaults"
    new_coordinator = getattr(recorded, "new_coordinator", None) if recorded is not None else None
    return GroupSettingsView(new_coordinator=new_coordinator, source=source, **values)


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
)


def broker_version_label(ranges: dict[int, tuple[int, int]]) -> str:
    """The Kafka release line(s) whose newest versions a broker's ApiVersions match: "2.8",
    "3.2-3.4" when releases look alike, "3.9+" past the newest line we know."""
    seen = tuple(ranges.get(int(api), (0, -1))[1] for api in _FINGERPRINT_APIS)
    exact = [name for name, versions in _RELEASES if versions == seen]
    if exact:
        return exact[0] if len(exact) == 1 else f"{exact[0]}-{exact[-1]}"
    older = [name for name, versions in _RELEASES if all(v <= s for v, s in zip(versions, seen, strict=True))]
    if older and older[-1] == _RELEASES[-1][0]:
        return "3.9+"
    return f"{older[-1]}+" if older else "unknown"


def run_name_for(version: str) -> str:
    return f"broker-{version}"


__all__ = ["GroupSettingsView", "broker_version_label", "group_settings", "run_name_for"]
