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

    def describe(self) -> str:
        return (
            f"initial delay {self.initial_rebalance_delay_ms} ms, session "
            f"{self.min_session_timeout_ms}..{self.max_session_timeout_ms} ms ({self.source})"
        )

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


def run_name_for(version: str) -> str:
    return f"broker-{version}"


__all__ = ["GroupSettingsView", "broker_version_label", "group_settings", "run_name_for"]
