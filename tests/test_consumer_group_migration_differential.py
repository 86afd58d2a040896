"""Differential: the online classic <-> consumer group migration against a real Kafka 4.3.1 broker
started with group.consumer.migration.policy (static: it is not in GroupCoordinatorConfig's
RECONFIGURABLE_CONFIGS, and IncrementalAlterConfigs answers INVALID_REQUEST), one broker per
policy, module-scoped so every script of a policy runs on one broker. The same script of raw kio
requests - classic JoinGroup/SyncGroup/Heartbeat/LeaveGroup/OffsetCommit and
ConsumerGroupHeartbeat - goes to the broker and to the reference GroupCoordinator (in virtual time;
a JoinGroup Kafka holds lets virtual time run to the reference's next timer, as the wall clock
runs for the blocked call); the error codes, generations / member epochs, assignments, group
types and states (DescribeGroups v5, ConsumerGroupDescribe v1) must be the same. Every built-in
migration scenario (replay/scenarios) names the script that plays its path (BUILT_IN_SCRIPTS),
and every script runs under all four policies. Member ids the coordinator makes are named by
their first appearance.

The live replays of the built-in migration scenarios (tests/test_migration_broker.py's scenarios:
replay's members in scaled real time, checked against the reference replaying the same scenario)
run here too, on the same brokers: one broker spec per policy (`policy_broker_config`) serves
both, and the tests go in batches of `tests.conftest.batch_brokers()` policies (module-scoped
`policy_brokers`), so each policy's broker starts once for both (docs/ci.md, "keeping its
budget"). Each comparison configures the reference as that broker runs: the harness's
TEST_SETTINGS and BROKER_CONFIG below."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, NamedTuple

import pytest
from kio.schema.consumer_group_describe.v1.request import ConsumerGroupDescribeRequest
from kio.schema.describe_groups.v5.request import DescribeGroupsRequest
from kio.schema.find_coordinator.v4.request import FindCoordinatorRequest
from kio.static.primitive import i8

from harness.admin import create_topic
from harness.launch import TEST_SETTINGS
from harness.lines import KAFKA_4X
from proxy.wire.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from proxy.wire.errors import ErrorCode
from replay.brokers import group_settings
from replay.coordinator import CoordinatorConfig, GroupCoordinator, RequestContext, Respond
from replay.coordinator import requests as Q
from replay.coordinator.consumer import ConsumerGroupConfig, HeartbeatRequest
from replay.coordinator.consumer.group import MigrationPolicy
from replay.coordinator.consumer.wire import heartbeat_to_kio
from replay.events import EventName
from replay.migration import refused_members
from replay.plan import ReplayPlan
from replay.run import RunResult, replay_reference
from replay.scenario import Scenario, builtin_names, load_builtin
from tests.conftest import batch_brokers
from tests.test_consumer_group_differential import (
    KafkaConnection,
    await_topics_in_group_coordinator,
    topic_ids,
)
from tests.test_migration_broker import MIGRATION_SCENARIOS, joins, live_replay, trace

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSION_MS = 10_000
BROKER_CONFIG = {
    "group.consumer.assignment.interval.ms": "0",
    "group.consumer.min.session.timeout.ms": "5000",
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.initial.rebalance.delay.ms": "0",
}
RETRY = (
    ErrorCode.not_coordinator,
    ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available,
)


class Reference:
    """The reference coordinator behind a blocking `call`, in virtual time."""

    def __init__(self, policy: MigrationPolicy, topics: dict[str, int], ids: dict[str, uuid.UUID]) -> None:
        self.coordinator = GroupCoordinator(CoordinatorConfig(group_initial_rebalance_delay_ms=0))
        consumer = self.coordinator.consumer.coordinator
        consumer.config = ConsumerGroupConfig(
            migration_policy=policy, assignment_interval_ms=0, session_timeout_ms=SESSION_MS
        )
        consumer.topic_partitions.clear()
        for name, n in topics.items():
            consumer.add_topic(name, n, ids[name])
        self.now_ms = 1_000
        self.correlation = 0

    def call(self, entity: Any) -> Any:
        self.now_ms += 10
        self.correlation += 1
        ctx = RequestContext(
            1, "kip848-differential", "/127.0.0.1", type(entity).__version__, self.correlation
        )
        outputs = self.coordinator.handle(self.now_ms, ctx, entity)
        outputs += self.coordinator.advance(self.now_ms)  # a join completed by a timer due now
        answers = [o.response for o in outputs if isinstance(o, Respond) and o.context is ctx]
        while not answers:  # a held JoinGroup: time passes, as it does for the blocked call to Kafka
            deadline = self.coordinator.next_deadline()
            assert deadline is not None, f"{type(entity).__name__} held with no timer to answer it"
            self.now_ms = max(self.now_ms, deadline)
            outputs = self.coordinator.advance(self.now_ms)
            answers = [o.response for o in outputs if isinstance(o, Respond) and o.context is ctx]
        assert len(answers) == 1, answers
        return answers[0]

    def close(self) -> None:
        pass


class Broker:
    def __init__(self, bootstrap: str) -> None:
        self.connection = KafkaConnection(bootstrap)

    def call(self, entity: Any) -> Any:
        for _ in range(100):
            answer = self.connection.call(entity)
            if int(getattr(answer, "error_code", 0)) not in RETRY:
                return answer
            group = getattr(entity, "group_id", None)
            if group is not None:
                self.connection.call(FindCoordinatorRequest(key_type=i8(0), coordinator_keys=(group,)))
            time.sleep(0.2)
        raise AssertionError("the broker never became the coordinator")

    def close(self) -> None:
        self.connection.close()


class Script:
    """Plays the steps on one side; every answer is recorded in a normalised form."""

    def __init__(self, side: Any, group_id: str, topic: str) -> None:
        self.side = side
        self.group_id = group_id
        self.topic = topic
        self.names: dict[str, str] = {}
        self.held: dict[str, frozenset[int]] = {}  # consumer member -> its last assignment
        self.ids: dict[str, str] = {}  # label -> real member id
        self.log: list[tuple[Any, ...]] = []
        self.counts_only = False  # log how many partitions a member holds, not which
        self.sub = encode_subscription([topic], 1)

    def _name(self, member_id: str) -> str:
        if not member_id:
            return ""
        return self.names.setdefault(member_id, f"m{len(self.names)}")

    def _view(self, parts: tuple[Any, ...]) -> tuple[Any, ...] | int:
        return len(parts) if self.counts_only else parts

    def classic_join(
        self,
        label: str,
        protocol_type: str = "consumer",
        instance: str | None = None,
        protocol: str = "range",
    ) -> int:
        member_id = self.ids.get(label, "")
        answer = self.side.call(
            Q.join_group(
                9,
                self.group_id,
                member_id,
                session_timeout_ms=SESSION_MS,
                protocol_type=protocol_type,
                protocols=((protocol, self.sub),),
                group_instance_id=instance,
            )
        )
        if int(answer.error_code) == ErrorCode.member_id_required:
            self.ids[label] = str(answer.member_id)
            self._name(str(answer.member_id))
            return self.classic_join(label, protocol_type, instance, protocol)
        self.ids.setdefault(label, str(answer.member_id))
        self._name(str(answer.member_id))
        self.log.append(
            (
                "join",
                label,
                int(answer.error_code),
                int(answer.generation_id),
                answer.protocol_type,
                answer.protocol_name,
                self._name(str(answer.leader)),
                len(answer.members),
            )
        )
        return int(answer.generation_id)

    def classic_sync(
        self,
        label: str,
        generation: int,
        assign: dict[str, list[int]] | None = None,
        user_data: bytes | None = None,
        protocol_type: str = "consumer",
    ) -> None:
        assignments = None
        if assign is not None:
            assignments = {
                self.ids[who]: encode_assignment({self.topic: parts}, user_data=user_data)
                for who, parts in assign.items()
            }
        answer = self.side.call(
            Q.sync_group(
                5,
                self.group_id,
                generation,
                self.ids[label],
                protocol_type=protocol_type,
                assignments=assignments,
            )
        )
        parts = tuple(p.rsplit("-", 1)[1] for p in decode_assignment(bytes(answer.assignment)))
        self.log.append(("sync", label, int(answer.error_code), self._view(parts)))

    def classic_heartbeat(self, label: str, generation: int) -> None:
        answer = self.side.call(Q.heartbeat(4, self.group_id, generation, self.ids[label]))
        self.log.append(("heartbeat", label, int(answer.error_code)))

    def classic_commit(self, label: str, generation: int, api_version: int = 8) -> None:
        """OffsetCommit of partition 0 by a classic member (its generation as the member epoch)."""
        request = Q.offset_commit(
            api_version, self.group_id, generation, self.ids[label], {(self.topic, 0): 7}
        )
        answer = self.side.call(request)
        self.log.append(
            ("commit", label, generation, [int(p.error_code) for t in answer.topics for p in t.partitions])
        )

    def classic_leave(self, label: str) -> None:
        answer = self.side.call(Q.leave_group(5, self.group_id, [(self.ids[label], None)]))
        self.log.append(("leave", label, int(answer.error_code), [int(m.error_code) for m in answer.members]))

    def consumer(
        self,
        member_id: str,
        epoch: int,
        owned: dict[uuid.UUID, frozenset[int]] | None,
        instance: str | None = None,
        assignor: str | None = None,
    ) -> int:
        request = HeartbeatRequest(
            self.group_id,
            member_id,
            epoch,
            instance_id=instance,
            server_assignor=assignor if epoch == 0 else None,
            rebalance_timeout_ms=30_000 if epoch == 0 else -1,
            subscribed_topic_names=(self.topic,) if epoch == 0 else None,
            owned={} if epoch == 0 else owned,
        )
        answer = self.side.call(heartbeat_to_kio(request))
        assignment = None
        if answer.assignment is not None:
            assignment = tuple(
                sorted(int(p) for tp in answer.assignment.topic_partitions for p in tp.partitions)
            )
        view = None if assignment is None else self._view(assignment)
        self.log.append(("consumer", member_id, int(answer.error_code), int(answer.member_epoch), view))
        if assignment is not None:
            self.held[member_id] = frozenset(assignment)
        return int(answer.member_epoch)

    def describe(self) -> None:
        classic = self.side.call(
            DescribeGroupsRequest(groups=(self.group_id,), include_authorized_operations=False)
        )
        g = classic.groups[0]
        modern = self.side.call(
            ConsumerGroupDescribeRequest(group_ids=(self.group_id,), include_authorized_operations=False)
        )
        d = modern.groups[0]
        members = sorted(
            (
                self.names.get(m.member_id, m.member_id),
                int(m.member_epoch),
                int(m.member_type),
                self._view(tuple(sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions))),
            )
            for m in d.members
        )
        self.log.append(
            (
                "describe",
                int(g.error_code),
                g.group_state,
                g.protocol_type,
                len(g.members),
                int(d.error_code),
                d.group_state,
                int(d.group_epoch),
                int(d.assignment_epoch),
                members,
            )
        )


def last_consumer_member_leaves(s: Script, member: str, gen: int) -> None:
    """The last consumer-protocol member leaves a group whose other member is the classic A: the
    group is converted to a classic group when the policy allows a downgrade
    (GroupMetadataManager.convertToClassicGroup), and A, told to rejoin, rejoins and leads."""
    s.consumer(member, -1, None)
    s.describe()
    s.classic_heartbeat("A", gen)
    gen = s.classic_join("A")
    s.classic_sync("A", gen, {"A": [0, 1, 2, 3]})
    s.describe()


def upgrade_then_downgrade(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """A one-member classic group (range, all 4 partitions) is joined by a consumer-protocol
    member: the group converts, the classic member rejoins as a follower and gives up half; then the
    consumer member leaves: the group is downgraded with a rebalance under `bidirectional`, and
    stays a consumer group of one classic member under `upgrade`."""
    topic_id = ids[s.topic]
    gen = s.classic_join("A")
    s.classic_sync("A", gen, {"A": [0, 1, 2, 3]})
    s.describe()
    c = "c0ffee00-0000-4000-8000-000000000001"
    epoch = s.consumer(c, 0, None)
    s.describe()
    s.classic_heartbeat("A", gen)
    gen = s.classic_join("A")
    s.classic_sync("A", gen)
    s.classic_heartbeat("A", gen)
    s.classic_commit("A", gen)
    s.classic_commit("A", gen + 1)
    epoch = s.consumer(c, epoch, {})
    epoch = s.consumer(c, epoch, {topic_id: frozenset()})
    s.describe()
    last_consumer_member_leaves(s, c, gen)


def refusals(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """validateOnlineUpgrade / convertToConsumerGroup refusals: an assignment with custom userData,
    a group whose protocol type is not "consumer"; both stay classic groups."""
    base = s.group_id
    s.group_id = f"{base}-userdata"
    gen = s.classic_join("U")
    s.classic_sync("U", gen, {"U": [0, 1, 2, 3]}, user_data=b"custom")
    s.consumer("c0ffee00-0000-4000-8000-000000000002", 0, None)
    s.describe()
    s.classic_heartbeat("U", gen)
    s.group_id = f"{base}-connect"
    gen = s.classic_join("K", protocol_type="connect")
    s.classic_sync("K", gen, {"K": [0]}, protocol_type="connect")
    s.consumer("c0ffee00-0000-4000-8000-000000000003", 0, None)
    s.describe()
    s.group_id = base


def static_replaced_across_protocols(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """A classic static member's instance id taken over by a consumer-protocol member (no
    UNRELEASED_INSTANCE_ID: the replaced member uses the classic protocol), then the dynamic
    consumer member leaves: nothing to downgrade, the static one uses the consumer protocol now."""
    topic_id = ids[s.topic]
    gen = s.classic_join("S", instance="i-s")
    s.classic_sync("S", gen, {"S": [0, 1, 2, 3]})
    c = "c0ffee00-0000-4000-8000-000000000004"
    epoch = s.consumer(c, 0, None)
    s.classic_heartbeat("S", gen)
    gen = s.classic_join("S", instance="i-s")
    s.classic_sync("S", gen)
    epoch = s.consumer(c, epoch, {})
    s.describe()
    static = "c0ffee00-0000-4000-8000-000000000005"
    static_epoch = s.consumer(static, 0, None, instance="i-s")
    s.classic_heartbeat("S", gen)
    s.describe()
    s.consumer(static, static_epoch, {topic_id: frozenset({0, 1})})
    s.consumer(c, -1, None)
    s.describe()


def static_rolling_downgrade(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """A consumer group of a static consumer-protocol member X and a classic member A; X leaves
    temporarily (epoch -2) and comes back as a classic static member with its instance id: the
    group is downgraded by that replacement under `bidirectional`
    (validateOnlineDowngradeWithReplacedMember), and X's successor joins the consumer group as a
    classic member under `upgrade`."""
    topic_id = ids[s.topic]
    x = "c0ffee00-0000-4000-8000-000000000006"
    epoch = s.consumer(x, 0, None, instance="i-x")
    gen = s.classic_join("A")
    s.classic_sync("A", gen)
    epoch = s.consumer(x, epoch, {topic_id: s.held[x]})
    epoch = s.consumer(x, epoch, {topic_id: s.held[x]})
    s.classic_heartbeat("A", gen)
    gen = s.classic_join("A")
    s.classic_sync("A", gen)
    s.describe()
    s.consumer(x, -2, None, instance="i-x")
    gen_y = s.classic_join("Y", instance="i-x")
    s.describe()
    s.classic_sync("Y", gen_y)
    s.classic_heartbeat("A", gen)
    s.describe()


# The consumer-protocol member ids below start with "~" so they sort after every id a coordinator
# makes for a classic member (Kafka: a random Uuid in base64, the reference: a counter): the server
# RangeAssignor orders dynamic members by member id, so a random order would make a random split.


def beat(s: Script, ids: dict[str, uuid.UUID], member: str, epoch: int, instance: str | None = None) -> int:
    """A well-behaved consumer-protocol heartbeat: it reports what it was last given."""
    return s.consumer(member, epoch, {ids[s.topic]: s.held.get(member, frozenset())}, instance=instance)


def offline_migration(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """classic-to-consumer-offline-migration (kafkatest's test_consumer_all_upgrade): the classic
    member leaves, the group is Empty, and the first ConsumerGroupHeartbeat replaces the empty
    classic group by a consumer group (GroupMetadataManager.maybeDeleteEmptyClassicGroup) under
    every policy: "conversions of empty groups in both directions are always enabled regardless of
    this policy" (GroupCoordinatorConfig.CONSUMER_GROUP_MIGRATION_POLICY_DOC)."""
    gen = s.classic_join("A")
    s.classic_sync("A", gen, {"A": [0, 1, 2, 3]})
    s.classic_commit("A", gen)
    s.classic_leave("A")
    s.describe()
    c1, c2 = "~c0ffee-11", "~c0ffee-12"
    e1 = s.consumer(c1, 0, None, assignor="range")
    e2 = s.consumer(c2, 0, None, assignor="range")
    e1 = beat(s, ids, c1, e1)
    e2 = beat(s, ids, c2, e2)
    beat(s, ids, c1, e1)
    s.describe()


def rolling_upgrade(
    s: Script, ids: dict[str, uuid.UUID], *, protocol: str, assignor: str, static: bool
) -> None:
    """classic-to-consumer-rolling-upgrade[-static][-cooperative] (kafkatest's
    consumer_protocol_migration_test.test_consumer_rolling_upgrade): classic members A and B (B
    joins the group A formed), then each is bounced onto the consumer protocol. A dynamic member
    leaves with LeaveGroup and comes back with a new id; a static one just comes back with its
    instance id and takes the classic member's place (GroupMetadataManager
    .getOrMaybeSubscribeStaticConsumerGroupMember). The first one converts a live classic group
    (ConsumerGroup.fromClassicGroup) under bidirectional and upgrade, and is refused
    (GROUP_ID_NOT_FOUND, validateOnlineUpgrade) under downgrade and disabled."""
    a_instance, b_instance = ("i-a", "i-b") if static else (None, None)
    # Static and uniform: which half each member keeps varies from run to run on Kafka itself
    # (seen: (0, 1) and (2, 3) for the same script): UniformHomogeneousAssignmentBuilder walks
    # a HashMap keyed by member id, and a classic member's id is a random Uuid there. The
    # comparison is then of how many partitions each member holds, beside every epoch and error.
    s.counts_only = static and assignor == "uniform"
    gen = s.classic_join("A", instance=a_instance, protocol=protocol)
    s.classic_sync("A", gen, {"A": [0, 1, 2, 3]})
    c1 = "~c0ffee-21"
    if not static:
        s.classic_leave("A")
    e1 = s.consumer(c1, 0, None, instance=a_instance, assignor=assignor)
    s.describe()
    gen_b = s.classic_join("B", instance=b_instance, protocol=protocol)
    s.classic_sync("B", gen_b)
    e1 = beat(s, ids, c1, e1, a_instance)
    s.classic_heartbeat("B", gen_b)
    gen_b = s.classic_join("B", instance=b_instance, protocol=protocol)
    s.classic_sync("B", gen_b)
    e1 = beat(s, ids, c1, e1, a_instance)
    s.classic_heartbeat("B", gen_b)
    s.describe()
    c2 = "~c0ffee-22"
    if not static:
        s.classic_leave("B")
    e2 = s.consumer(c2, 0, None, instance=b_instance, assignor=assignor)
    e1 = beat(s, ids, c1, e1, a_instance)
    e2 = beat(s, ids, c2, e2, b_instance)
    beat(s, ids, c1, e1, a_instance)
    s.describe()


def rolling_downgrade(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """consumer-to-classic-rolling-downgrade (the second half of test_consumer_rolling_upgrade):
    two consumer-protocol members; the first leaves and comes back as a classic member of the
    consumer group (classicGroupJoinToConsumerGroup), the second leaves: the last
    consumer-protocol member gone, the group is converted to a classic group under bidirectional
    and downgrade (convertToClassicGroup) and the classic member is asked to rejoin."""
    c1, c2 = "~c0ffee-31", "~c0ffee-32"
    e1 = s.consumer(c1, 0, None, assignor="range")
    e2 = s.consumer(c2, 0, None, assignor="range")
    e1 = beat(s, ids, c1, e1)
    e2 = beat(s, ids, c2, e2)
    s.describe()
    s.consumer(c1, -1, None)
    gen = s.classic_join("A")
    s.classic_sync("A", gen)
    e2 = beat(s, ids, c2, e2)
    s.classic_heartbeat("A", gen)
    gen = s.classic_join("A")
    s.classic_sync("A", gen)
    s.describe()
    last_consumer_member_leaves(s, c2, gen)


def instance_id_shared(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """instance-id-shared-across-protocols: a consumer-protocol member comes with the instance id
    a live classic member still uses; its first heartbeat converts the group and takes the
    static identity over (getOrMaybeSubscribeStaticConsumerGroupMember replaces a classic static
    member), so the classic member is fenced (FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID)."""
    gen = s.classic_join("S", instance="i-shared")
    s.classic_sync("S", gen, {"S": [0, 1, 2, 3]})
    c = "~c0ffee-41"
    epoch = s.consumer(c, 0, None, instance="i-shared")
    s.describe()
    s.classic_heartbeat("S", gen)
    s.classic_commit("S", gen)
    epoch = beat(s, ids, c, epoch, "i-shared")
    beat(s, ids, c, epoch, "i-shared")
    s.describe()


def mixed_steady_state(s: Script, ids: dict[str, uuid.UUID]) -> None:
    """mixed-protocols-steady-state: a consumer-protocol member and a classic member in one
    consumer group, settled; then rounds of heartbeats change nothing (no REBALANCE_IN_PROGRESS,
    no epoch bump: ConsumerGroup's classic members heartbeat through
    GroupMetadataManager.classicGroupHeartbeatToConsumerGroup)."""
    gen = s.classic_join("A")
    s.classic_sync("A", gen, {"A": [0, 1, 2, 3]})
    c = "~c0ffee-51"
    epoch = s.consumer(c, 0, None)
    s.classic_heartbeat("A", gen)
    gen = s.classic_join("A")
    s.classic_sync("A", gen)
    for _ in range(4):
        epoch = beat(s, ids, c, epoch)
        s.classic_heartbeat("A", gen)
    s.describe()


SCRIPTS = {
    "static-rolling-downgrade": static_rolling_downgrade,
    "upgrade-then-downgrade": upgrade_then_downgrade,
    "refusals": refusals,
    "static-replaced-across-protocols": static_replaced_across_protocols,
    "offline-migration": offline_migration,
    "rolling-upgrade": partial(rolling_upgrade, protocol="range", assignor="range", static=False),
    "rolling-upgrade-cooperative": partial(
        rolling_upgrade, protocol="cooperative-sticky", assignor="uniform", static=False
    ),
    "rolling-upgrade-static": partial(rolling_upgrade, protocol="range", assignor="range", static=True),
    "rolling-upgrade-static-cooperative": partial(
        rolling_upgrade, protocol="cooperative-sticky", assignor="uniform", static=True
    ),
    "rolling-downgrade": rolling_downgrade,
    "instance-id-shared": instance_id_shared,
    "mixed-steady-state": mixed_steady_state,
}
# The built-in migration scenarios (replay/scenarios) and the script here that plays the same
# protocol path against the broker; each script runs under every migration policy, so the
# policy scenarios (disabled / downgrade refuse the upgrade, upgrade keeps the consumer group)
# are the rolling upgrade and upgrade-then-downgrade scripts on those brokers.
BUILT_IN_SCRIPTS = {
    "classic-to-consumer-offline-migration": "offline-migration",
    "classic-to-consumer-rolling-upgrade": "rolling-upgrade",
    "classic-to-consumer-rolling-upgrade-cooperative": "rolling-upgrade-cooperative",
    "classic-to-consumer-rolling-upgrade-static": "rolling-upgrade-static",
    "classic-to-consumer-rolling-upgrade-static-cooperative": "rolling-upgrade-static-cooperative",
    "classic-to-consumer-upgrade-refused-custom-assignor": "refusals",
    "consumer-to-classic-rolling-downgrade": "rolling-downgrade",
    "instance-id-shared-across-protocols": "instance-id-shared",
    "migration-policy-disabled-refuses-upgrade": "rolling-upgrade",
    "migration-policy-downgrade-refuses-upgrade": "rolling-upgrade",
    "migration-policy-upgrade-keeps-consumer-group": "upgrade-then-downgrade",
    "mixed-protocols-steady-state": "mixed-steady-state",
}


def test_every_builtin_migration_scenario_has_a_differential_script() -> None:
    """A new built-in migration scenario must name the script that checks its path on Kafka."""
    builtin = {name for name in builtin_names() if load_builtin(name).uses_consumer_protocol}
    assert builtin == set(BUILT_IN_SCRIPTS)
    assert set(BUILT_IN_SCRIPTS.values()) <= set(SCRIPTS)


def policy_broker_config(policy: MigrationPolicy) -> dict[str, str]:
    """The one spec of the suite's broker for `policy` (tests/test_consumer_group_migration_serve.py
    takes the bidirectional one too): group.consumer.migration.policy is static (it is not in
    GroupCoordinatorConfig.RECONFIGURABLE_CONFIGS, and IncrementalAlterConfigs answers
    INVALID_REQUEST), so each policy needs its own broker."""
    return {**BROKER_CONFIG, "group.consumer.migration.policy": policy.value}


class PolicyBroker(NamedTuple):
    bootstrap: str
    ids: dict[str, uuid.UUID]  # the topic the scripts use -> its id


Batch = tuple[MigrationPolicy, ...]
# The policies in batches the factory keeps running at once beside its workhorse brokers.
BATCHES: list[Batch] = [
    tuple(list(MigrationPolicy)[i : i + batch_brokers()])
    for i in range(0, len(MigrationPolicy), batch_brokers())
]


def batch_of(policy: MigrationPolicy) -> Batch:
    return next(batch for batch in BATCHES if policy in batch)


class PolicyBatch(NamedTuple):
    brokers: dict[MigrationPolicy, PolicyBroker]
    live: dict[str, Future[tuple[ReplayPlan, RunResult]]]  # scenario name -> its live replay


@pytest.fixture(scope="module")
def policy_brokers(request: pytest.FixtureRequest, broker_factory) -> Iterator[PolicyBatch]:
    """The brokers of one batch of policies (the parameter), each with a 4-partition topic for
    the scripts, and the batch's live replays started in the background. Module-scoped and
    parametrized indirectly by every test here, so pytest runs all the tests of a batch while its
    brokers run: the scripts play while the replays wait on the broker's timers (each replay is
    about a minute of scaled real time, in its own renamed group)."""
    brokers = {}
    for policy in request.param:
        broker = broker_factory(KAFKA_4X, extra_config=policy_broker_config(policy))
        topic = f"mig-{policy.value}-{uuid.uuid4().hex[:8]}"
        create_topic(broker.bootstrap, topic, 4)
        probe = KafkaConnection(broker.bootstrap)
        try:
            ids = topic_ids(probe, [topic])
            await_topics_in_group_coordinator(probe, {topic: 4})
        finally:
            probe.close()
        brokers[policy] = PolicyBroker(broker.bootstrap, ids)
    names = _selected(request.session, request.param)
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        live = {name: pool.submit(live_replay, name, brokers[_policy(name)].bootstrap) for name in names}
        yield PolicyBatch(brokers, live)


# One parameter per (policy, script) beside the batch: module-scoped parameters that repeat (the
# policy, the script) would make pytest reorder the tests by them, and start the batches again.
@pytest.mark.parametrize(
    ("policy_brokers", "case"),
    [
        pytest.param(batch_of(policy), (policy, script), id=f"{policy.value}-{script}")
        for policy in MigrationPolicy
        for script in sorted(SCRIPTS)
    ],
    indirect=["policy_brokers"],
    scope="module",
)
def test_online_migration_matches_kafka(
    policy_brokers: PolicyBatch, case: tuple[MigrationPolicy, str]
) -> None:
    policy, script = case
    bootstrap, ids = policy_brokers.brokers[policy]
    (topic,) = ids
    group_id = f"mig-{policy.value}-{uuid.uuid4().hex[:8]}"
    play = SCRIPTS[script]
    kafka = Script(Broker(bootstrap), group_id, topic)
    try:
        play(kafka, ids)
    finally:
        kafka.side.close()
    reference = Script(Reference(policy, {topic: 4}, ids), group_id, topic)
    play(reference, ids)
    differences = [
        f"step {i}: kafka {k!r}\n        reference {r!r}"
        for i, (k, r) in enumerate(zip(kafka.log, reference.log, strict=True))
        if k != r
    ]
    assert not differences, "\n".join(differences)
    if script == "upgrade-then-downgrade" and policy.upgrade_enabled:  # the final group type
        final = kafka.log[-1]
        assert (final[2] == "Stable") is policy.downgrade_enabled, final


# The live replays: replay's members (ClassicMember, then ConsumerMember after their step) over
# TCP in scaled real time against the batch's brokers, meeting the expectations the reference
# meets (tests/test_migration_broker.py's MIGRATION_SCENARIOS, one per policy and direction).
_LIVE_TEST = "test_migration_on_kafka_43_meets_the_expectations_the_reference_meets"


def _policy(name: str) -> MigrationPolicy:
    return load_builtin(name).broker.migration_policy


def _live_params() -> list[Any]:
    params = []
    for p in MIGRATION_SCENARIOS:
        name, marks = (p, ()) if isinstance(p, str) else (p.values[0], p.marks)
        params.append(pytest.param(batch_of(_policy(str(name))), name, marks=marks, id=str(name)))
    return params


def _selected(session: pytest.Session, batch: Batch) -> list[str]:
    """The scenario names of `batch`'s policies this session runs (selected, not skipped)."""
    names = []
    for item in session.items:
        if item.originalname != _LIVE_TEST or not isinstance(item, pytest.Function):
            continue
        skipped = any(m.args and m.args[0] for m in item.iter_markers("skipif"))
        name = item.callspec.params["name"]
        if not skipped and _policy(name) in batch:
            names.append(name)
    return names


@pytest.fixture(scope="module")
def live_runs(policy_brokers: PolicyBatch) -> dict[str, tuple[ReplayPlan, RunResult]]:
    """scenario name -> (its plan, its live run): the batch's selected scenarios, which ran
    concurrently beside the batch's scripts."""
    return {name: future.result() for name, future in policy_brokers.live.items()}


def reference_like_the_broker(plan: ReplayPlan, scenario: Scenario) -> RunResult:
    """The reference replaying `scenario` configured as the policy brokers run: the harness's
    TEST_SETTINGS (group.initial.rebalance.delay.ms, group.min.session.timeout.ms) and
    BROKER_CONFIG's group.consumer.* settings, the rest from the capture header (Kafka's defaults)."""
    broker = {**TEST_SETTINGS, **BROKER_CONFIG}
    classic = dataclasses.replace(
        group_settings(plan.group_settings).config,
        group_initial_rebalance_delay_ms=int(broker["group.initial.rebalance.delay.ms"]),
        group_min_session_timeout_ms=int(broker["group.min.session.timeout.ms"]),
    )
    consumer = dataclasses.replace(
        scenario.broker.consumer_config(),
        session_timeout_ms=int(broker["group.consumer.session.timeout.ms"]),
        assignment_interval_ms=int(broker["group.consumer.assignment.interval.ms"]),
    )
    return replay_reference(plan, scenario, config=classic, consumer=consumer)


@pytest.mark.parametrize(
    ("policy_brokers", "name"), _live_params(), indirect=["policy_brokers"], scope="module"
)
def test_migration_on_kafka_43_meets_the_expectations_the_reference_meets(
    policy_brokers: PolicyBatch, live_runs: dict[str, tuple[ReplayPlan, RunResult]], name: str
) -> None:
    assert KAFKA_4X.startswith("4.")
    scenario = load_builtin(name)
    plan, live = live_runs[name]
    reference = reference_like_the_broker(plan, scenario)
    assert live.not_run is None and live.failures == (), (live.failures, trace(live.events))
    assert reference.failures == ()
    # the same migration: every member classic, then consumer; converted once; nobody refused
    assert joins(live.events) == joins(reference.events)
    converted = [e.detail for e in live.events if e.event == EventName.GROUP_CONVERTED]
    assert converted == [e.detail for e in reference.events if e.event == EventName.GROUP_CONVERTED]
    assert refused_members(live.events) == refused_members(reference.events)
    # the broker's assignments are named by topic (the ids come from its Metadata)
    received = {
        tp for e in live.events if e.event == EventName.ASSIGNMENT_RECEIVED for tp in e.assignment or ()
    }
    assert received == {f"corpus-java-431-static-bounce-{p}" for p in range(3)}
