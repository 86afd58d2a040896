"""Which Kafka release lines the harness can run, and how each one differs.

Kafka changed its launch recipe several times (ZooKeeper -> KRaft, reload4j -> log4j2, old
Scala group coordinator -> the KIP-848 Java one). One row per line keeps those differences in
data, so adding a line (e.g. ZooKeeper-mode 2.4..3.x) is a new row plus, at most, a new
launcher branch. Facts are from /work/shared/kafka-from-maven.md, checked by starting them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Mode(enum.Enum):
    KRAFT = "kraft"
    ZOOKEEPER = "zookeeper"


class LogBinding(enum.Enum):
    """The SLF4J binding the release tarball adds; POMs leave it out, so SLF4J would be NOP."""

    RELOAD4J = "reload4j"  # Kafka 2.x-3.9: -Dlog4j.configuration
    LOG4J2 = "log4j2"  # Kafka 4.x: -Dlog4j2.configurationFile


class Coordinators(enum.Enum):
    """Which group coordinators a line ships (`group.coordinator.new.enable` chooses on BOTH_*)."""

    CLASSIC_ONLY = "classic-only"  # <= 3.5, and every ZooKeeper-mode broker
    BOTH_DEFAULT_CLASSIC = "both, default classic"  # 3.6 - 3.9 (KRaft)
    BOTH_DEFAULT_NEW = "both, default new"  # 4.0 (checked on 4.0.1: =false starts the Scala one)
    # 4.1+: the Scala GroupCoordinator was deleted (KAFKA-18329). Checked on 4.3.1: the broker
    # accepts group.coordinator.new.enable=false without complaint and still runs the new one.
    NEW_ONLY = "new-only"


@dataclass(frozen=True)
class KafkaLine:
    """One major.minor line of Kafka and how to fetch and launch it."""

    major: int
    minor: int
    mode: Mode
    scala_version: str
    pom_template: str  # file in harness/poms/
    log_binding: LogBinding
    coordinators: Coordinators
    implemented: bool = True  # a row may describe a line the launcher cannot start yet

    @property
    def name(self) -> str:
        return f"{self.major}.{self.minor}"

    def coordinator_key(self, new_coordinator: bool | None) -> dict[str, str]:
        """Broker settings that select the coordinator; raises ValueError if the line lacks it."""
        if new_coordinator is None:
            return {}
        match self.coordinators:
            case Coordinators.CLASSIC_ONLY if new_coordinator:
                raise ValueError(
                    f"Kafka {self.name} ({self.mode.value}) has only the classic group coordinator"
                )
            case Coordinators.NEW_ONLY if not new_coordinator:
                raise ValueError(
                    f"Kafka {self.name} has only the new group coordinator "
                    "(the classic one was removed in 4.1)"
                )
            case Coordinators.BOTH_DEFAULT_CLASSIC | Coordinators.BOTH_DEFAULT_NEW:
                return {"group.coordinator.new.enable": "true" if new_coordinator else "false"}
        return {}

    def effective_new_coordinator(self, new_coordinator: bool | None) -> bool:
        if new_coordinator is not None:
            self.coordinator_key(new_coordinator)  # validate
            return new_coordinator
        return self.coordinators in (Coordinators.BOTH_DEFAULT_NEW, Coordinators.NEW_ONLY)


def _zk(major: int, minor: int) -> KafkaLine:
    return KafkaLine(
        major,
        minor,
        Mode.ZOOKEEPER,
        "2.12" if (major, minor) <= (2, 3) else "2.13",
        "kafka-zk.xml",
        LogBinding.RELOAD4J,
        Coordinators.CLASSIC_ONLY,
    )


def _kraft3(minor: int) -> KafkaLine:
    coordinators = Coordinators.CLASSIC_ONLY if minor < 6 else Coordinators.BOTH_DEFAULT_CLASSIC
    return KafkaLine(3, minor, Mode.KRAFT, "2.13", "kafka-kraft-3.xml", LogBinding.RELOAD4J, coordinators)


def _kraft4(minor: int) -> KafkaLine:
    coordinators = Coordinators.BOTH_DEFAULT_NEW if minor == 0 else Coordinators.NEW_ONLY
    return KafkaLine(4, minor, Mode.KRAFT, "2.13", "kafka-kraft-4.xml", LogBinding.LOG4J2, coordinators)


LINES: dict[tuple[int, int], KafkaLine] = {
    **{(2, m): _zk(2, m) for m in range(4, 9)},
    **{(3, m): _zk(3, m) for m in range(0, 3)},
    # KRaft is production-ready from 3.3 (KIP-833); the harness runs KRaft there.
    **{(3, m): _kraft3(m) for m in range(3, 10)},
    **{(4, m): _kraft4(m) for m in range(0, 4)},
}

# Newest patch releases resolvable on Maven Central (checked 2026-11-22: 3.9.3 does not exist;
# kafka_2.13:4.4.0 has a POM but its dependency kafka-tools-api:4.4.0 is missing, so 4.4.0 cannot
# be assembled; 4.3.1 is the newest complete 4.x).
KAFKA_39 = "3.9.2"
KAFKA_4X = "4.3.1"
DEFAULT_KAFKA_VERSION = KAFKA_39


def parse_version(kafka_version: str) -> tuple[int, int, int]:
    parts = kafka_version.split(".")
    if len(parts) != 3 or not all(p.isdigit() for p in parts):
        raise ValueError(f"Kafka version must look like 3.9.2, got {kafka_version!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def line_for(kafka_version: str) -> KafkaLine:
    major, minor, _ = parse_version(kafka_version)
    try:
        return LINES[(major, minor)]
    except KeyError:
        known = ", ".join(f"{a}.{b}" for a, b in LINES)
        raise ValueError(f"no Kafka line {major}.{minor} in the harness table (known: {known})") from None
