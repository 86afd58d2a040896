"""What a capture says about its KIP-848 consumer-protocol members, for `replay.plan`.

A recorded ConsumerGroupHeartbeat (API 68) member is planned like a classic one (one script per
`member_key`, one session per connection) with what the consumer protocol adds:

- its identity: a connection belongs to the member whose first joining heartbeat (member epoch 0)
  it carried, or, when its first heartbeat is a later one (the client reconnected), to the member
  that used the same member id; since KIP-1082 (Kafka 4.0, ConsumerGroupHeartbeat v1) the client
  generates its member id once per process (AbstractMembershipManager.memberId(): "generated at
  startup and remains unchanged for the entire lifetime of the process"), so a member id names
  one process;
- each session's member id as recorded: an as-recorded replay sends it again, so the coordinator
  iterates its members in the recorded hash order (GroupMetadataManager keeps them in a
  TimelineHashMap; the uniform assignor walks a HashMap of member ids);
- the topic names of the recorded topic ids (Metadata v10+ answers), so the recorded run names
  assigned partitions as the replayed runs do, and the reference uses the recorded ids;
- answers from a broker that was not the group's coordinator then (NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS: the coordinator runtime answers them
  - CoordinatorRuntime.scheduleWriteOperation, called by GroupCoordinatorService.
  consumerGroupHeartbeat - before GroupMetadataManager.consumerGroupHeartbeat runs, while the
  __consumer_offsets partition is elsewhere or loading) are left out of the plan: the group never
  saw those requests, and the reference is the coordinator from the first request on;
- a classic JoinGroup template for a member that only spoke the consumer protocol, so a scenario
  can switch it to classic (what the Java consumer with `group.protocol=classic` sends: JoinGroup
  v9, session.timeout.ms 45000, the range and cooperative-sticky assignors, ConsumerConfig's
  defaults since 3.0).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final
from uuid import UUID

from proxy.wire import CodecError
from proxy.wire.apis import ApiKey
from proxy.wire.consumer_protocol import encode_subscription
from proxy.wire.errors import ErrorCode
from replay.member import JOIN, _duration, companion_versions, entity

CONSUMER_HEARTBEAT: Final = int(ApiKey.CONSUMER_GROUP_HEARTBEAT)
METADATA: Final = int(ApiKey.METADATA)
NOT_AT_COORDINATOR: Final = frozenset(
    int(code)
    for code in (
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        ErrorCode.coordinator_load_in_progress,
    )
)
CLASSIC_SESSION_TIMEOUT_MS: Final = 45_000  # ConsumerConfig session.timeout.ms default (3.0+)
CLASSIC_JOIN_API_VERSION: Final = 9  # the Java consumer's JoinGroup since 3.2 (KIP-814)
CLASSIC_ASSIGNORS: Final = ("range", "cooperative-sticky")  # partition.assignment.strategy default


def reached_the_group(api_key: int, response: Any) -> bool:
    """False for an answer that came from a broker that was not the group's coordinator."""
    if response is None or api_key not in (CONSUMER_HEARTBEAT, JOIN):
        return True
    return int(getattr(response, "error_code", 0)) not in NOT_AT_COORDINATOR


def is_heartbeat_join(request: Any) -> bool:
    """A joining ConsumerGroupHeartbeat: member epoch 0 (a first join, or a rejoin once fenced)."""
    return int(request.member_epoch) == 0


def recorded_member_id(request: Any, response: Any) -> str | None:
    """The member id a consumer-protocol session used: the client's own (v1), else the one the
    coordinator gave (v0)."""
    given = str(request.member_id or "") or (str(response.member_id or "") if response is not None else "")
    return given or None


def topic_names(metadata_answers: Iterable[Any]) -> dict[UUID, str]:
    """topic id -> name from Metadata v10+ answers (what the clients resolved their topics with)."""
    names: dict[UUID, str] = {}
    for answer in metadata_answers:
        for topic in getattr(answer, "topics", ()):
            topic_id = getattr(topic, "topic_id", None)
            if topic_id is None or topic.name is None or int(topic.error_code):
                continue
            uid = UUID(str(topic_id))
            if uid.int:
                names[uid] = str(topic.name)
    return names


def metadata_answers(pairs: Iterable[Any]) -> list[Any]:
    """The decoded Metadata answers of a capture's exchanges (undecodable ones skipped)."""
    answers = []
    for ex in pairs:
        if ex.request.api_key != METADATA:
            continue
        try:
            _, response = ex.decode()
        except CodecError:
            continue
        if response is not None:
            answers.append(response)
    return answers


def assigned(response: Any, names: dict[UUID, str]) -> list[tuple[str, int]]:
    """The (topic, partition)s a heartbeat answer assigned (topics the capture cannot name skipped)."""
    if response is None or int(response.error_code) or response.assignment is None:
        return []
    return [
        (names[UUID(str(tp.topic_id))], int(p))
        for tp in response.assignment.topic_partitions
        if UUID(str(tp.topic_id)) in names
        for p in tp.partitions
    ]


def classic_join_template(heartbeat: Any, client_id: str) -> Any:
    """The JoinGroup this member would send with group.protocol=classic (see the module doc)."""
    topics = tuple(sorted(heartbeat.subscribed_topic_names or ()))
    metadata = encode_subscription(topics)
    rebalance_ms = int(heartbeat.rebalance_timeout.total_seconds() * 1000)
    return entity(
        JOIN,
        CLASSIC_JOIN_API_VERSION,
        {
            "group_id": str(heartbeat.group_id),
            "session_timeout": _duration(CLASSIC_SESSION_TIMEOUT_MS),
            "rebalance_timeout": _duration(rebalance_ms),
            "member_id": "",
            "group_instance_id": heartbeat.instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": name, "metadata": metadata} for name in CLASSIC_ASSIGNORS],
            "reason": None,
        },
    )


def classic_versions() -> dict[int, int]:
    return companion_versions(CLASSIC_JOIN_API_VERSION)


__all__ = [
    "CONSUMER_HEARTBEAT",
    "NOT_AT_COORDINATOR",
    "assigned",
    "classic_join_template",
    "classic_versions",
    "is_heartbeat_join",
    "metadata_answers",
    "reached_the_group",
    "recorded_member_id",
    "topic_names",
]
