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

from proxy.upstream import broker_version_label  # one table, shared with the recording proxy
from replay.coordinator import CoordinatorConfig, KafkaBehaviour

# The CoordinatorConfig fields that are Kafka's GroupCoordinatorConfig broker properties: the
# property is the name with dots (group_max_size -> group.max.size), the capture header's
# GroupSettings field the name without `group_`.
_BROKER_PROPERTIES: Final = (
    "group_initial_rebalance_delay_ms",
    "group_min_session_timeout_ms",
    "group_max_session_timeout_ms",
    "group_max_size",
)


@dataclass(frozen=True, slots=True)
class GroupSettingsView:
    """The group settings a run uses: the reference coordinator's `config` (Kafka's defaults
    where the capture says nothing) and where they came from."""

    config: CoordinatorConfig
    source: str  # "capture header" | "Kafka defaults" | "capture header + Kafka defaults"

    def describe(self) -> str:
        c = self.config
        return (
            f"initial delay {c.group_initial_rebalance_delay_ms} ms, session "
            f"{c.group_min_session_timeout_ms}..{c.group_max_session_timeout_ms} ms ({self.source})"
        )

    def broker_config(self) -> dict[str, str]:
        """server.properties lines for a broker `replay` starts (every one set, so the harness's
        own quick-test settings never leak into a product run)."""
        return {name.replace("_", "."): str(getattr(self.config, name)) for name in _BROKER_PROPERTIES}


def group_settings(recorded: Any | None) -> GroupSettingsView:
    """The capture header's settings (a `proxy.capture.reader.GroupSettings` or None), completed
    with Kafka's defaults (CoordinatorConfig's)."""
    recorded_values = {
        name: getattr(recorded, name.removeprefix("group_"), None) for name in _BROKER_PROPERTIES
    }
    values: dict[str, Any] = {
        name: int(value) for name, value in recorded_values.items() if value is not None
    }
    if len(values) == len(_BROKER_PROPERTIES):
        source = "capture header"
    elif values:
        source = "capture header + Kafka defaults"
    else:
        source = "Kafka defaults"
    new_coordinator = getattr(recorded, "new_coordinator", None)
    behaviour = KafkaBehaviour.NEW_COORDINATOR if new_coordinator else KafkaBehaviour.SCALA_3_9
    return GroupSettingsView(CoordinatorConfig(**values, kafka_behaviour=behaviour), source)


def run_name_for(version: str) -> str:
    return f"broker-{version}"


__all__ = ["GroupSettingsView", "broker_version_label", "group_settings", "run_name_for"]
