"""The classic <-> consumer protocol migration rehearsed on a recorded group (issue 14): the
built-in migration scenarios (mirroring Kafka's consumer_protocol_migration_test.py) replayed
against the reference coordinator on a real capture from fixtures/captures, each with its
expectations met; members switching protocol at their step keep their identity; the new
scenario fields name file, line and field when wrong."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from group_replay import main as group_replay
from proxy.capture.reader import read_capture
from proxy.wire.errors import ErrorCode
from replay.coordinator.consumer.group import MigrationPolicy
from replay.events import EventName
from replay.migration import BrokerBuild, GroupProtocol, refused_members, step_stats
from replay.plan import ReplayPlan, build_plan
from replay.run import replay_reference
from replay.scenario import ScenarioError, Sessions, load_builtin, parse_scenario

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "captures"
# Java 4.3.1 consumers (range) on Kafka 4.3.1, three static members a, b, c: the client and
# broker a migration to group.protocol=consumer would start from.
CAPTURE = CAPTURES / "kafka-4.3.1--java-4.3.1--static-bounce.pcapng"

MIGRATION_SCENARIOS = (
    "classic-to-consumer-rolling-upgrade",
    "classic-to-consumer-rolling-upgrade-static",
    "classic-to-consumer-rolling-upgrade-cooperative",
    "classic-to-consumer-rolling-upgrade-static-cooperative",
    "consumer-to-classic-rolling-downgrade",
    "classic-to-consumer-offline-migration",
    "migration-policy-disabled-refuses-upgrade",
    "migration-policy-upgrade-keeps-consumer-group",
    "migration-policy-downgrade-refuses-upgrade",
    "classic-to-consumer-upgrade-refused-custom-assignor",
    "instance-id-shared-across-protocols",
    "mixed-protocols-steady-state",
)


@pytest.fixture(scope="module")
def plan() -> ReplayPlan:
    return build_plan(read_capture(CAPTURE), CAPTURE.stem)


@pytest.mark.parametrize("name", MIGRATION_SCENARIOS)
def test_each_migration_scenario_meets_its_expectations_against_the_reference(
    plan: ReplayPlan, name: str
) -> None:
    scenario = load_builtin(name)
    assert scenario.uses_consumer_protocol
    assert scenario.expect.migration.group_type is not None, f"{name} states no final group type"
    result = replay_reference(plan, scenario)
    assert result.failures == (), result.failures
    # deterministic: virtual time, the same events twice
    assert replay_reference(plan, scenario).events == result.events


def test_rolling_upgrade_members_keep_their_identity_and_speak_consumer_after_their_step(
    plan: ReplayPlan,
) -> None:
    scenario = load_builtin("classic-to-consumer-rolling-upgrade")
    events = replay_reference(plan, scenario).events
    keys = {s.member_key for s in plan.scripts}
    assert {e.member_key for e in events} == keys  # the recorded identities, in every row
    converted = [e for e in events if e.event == EventName.GROUP_CONVERTED]
    assert [(c.detail, c.group_type, c.protocol) for c in converted] == [
        ("classic -> consumer", "consumer", "consumer")
    ]
    for key in keys:
        joins = [e for e in events if e.member_key == key and e.event == EventName.MEMBER_JOINED]
        assert joins[0].protocol == GroupProtocol.CLASSIC and joins[-1].protocol == GroupProtocol.CONSUMER
        switched = next(e.ts_ms for e in joins if e.protocol == GroupProtocol.CONSUMER)
        later = [e for e in events if e.member_key == key and e.ts_ms > switched and e.protocol]
        assert {e.protocol for e in later} == {GroupProtocol.CONSUMER}
        assert all(e.member_epoch is not None and e.member_epoch > 0 for e in later if not e.error_code)
    # every partition has one owner at the end: the last received minus the last revoked
    owned: dict[str, set[str]] = {}
    for e in events:
        if e.event == EventName.ASSIGNMENT_RECEIVED:
            owned.setdefault(e.member_key, set()).update(e.assignment or ())
        elif e.event == EventName.ASSIGNMENT_REVOKED:
            owned.setdefault(e.member_key, set()).difference_update(e.assignment or ())
    held = sorted(tp for tps in owned.values() for tp in tps)
    assert len(held) == len(set(held)) == 3


def test_expectations_can_fail_the_same_upgrade_under_a_disabled_policy(plan: ReplayPlan) -> None:
    upgrade = load_builtin("classic-to-consumer-rolling-upgrade")
    disabled = dataclasses.replace(
        upgrade, broker=dataclasses.replace(upgrade.broker, migration_policy=MigrationPolicy.DISABLED)
    )
    result = replay_reference(plan, disabled)
    # the first two bounced members die (GROUP_ID_NOT_FOUND is fatal for the Java consumer); the
    # last finds the classic group empty, which any policy lets a consumer group replace
    assert [f for f in result.failures if f.startswith("refused:")] == [
        "refused: expected 0, saw 2: {'java-431-static-bounce-b': 'group_id_not_found', "
        "'java-431-static-bounce-c': 'group_id_not_found'}"
    ]
    assert set(refused_members(result.events).values()) == {69}


def test_eager_members_rejoin_more_than_static_ones_per_step(plan: ReplayPlan) -> None:
    """The rebalance-storm question: dynamic eager members rejoin at each step, static ones
    replaced by their consumer-protocol selves do not."""

    def worst(name: str) -> int:
        scenario = load_builtin(name)
        result = replay_reference(plan, scenario)
        assert scenario.rolling is not None
        first_bounce = min(
            e.ts_ms for e in result.events if e.event == EventName.MEMBER_LEFT or e.ts_ms >= 10_000
        )
        steps = step_stats(result.events, first_bounce, scenario.rolling.interval_ms, ["x"] * 3)
        return max((n for step in steps for n in step.rejoins.values()), default=0)

    assert worst("classic-to-consumer-rolling-upgrade") >= 2
    assert worst("classic-to-consumer-rolling-upgrade-static") == 0


def test_the_replay_command_runs_a_migration_scenario_and_exits_1_when_unmet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ok"
    argv = ["replay", str(CAPTURE), "--scenario", "consumer-to-classic-rolling-downgrade"]
    assert group_replay([*argv, "--against", "reference", "--out", str(out), "--progress", "off"]) == 0
    printed = capsys.readouterr().out
    assert "migration steps" in printed and "classic rejoins" in printed  # the per-step view
    rows = [json.loads(line) for line in (out / "events.jsonl").read_text().splitlines()]
    reference = [r for r in rows if r["run"] == "reference"]
    assert {r["protocol"] for r in reference} == {"classic", "consumer"}
    assert [r["detail"] for r in reference if r["event"] == "group_converted"] == ["consumer -> classic"]
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(
        load_builtin("consumer-to-classic-rolling-downgrade").text.replace(
            "group_type: classic", "group_type: consumer"
        ),
        encoding="utf-8",
    )
    argv = ["replay", str(CAPTURE), "--scenario", str(wrong), "--against", "reference"]
    assert group_replay([*argv, "--out", str(tmp_path / "bad"), "--progress", "off"]) == 1


def test_migration_fields_parse_into_the_typed_plan() -> None:
    scenario = load_builtin("classic-to-consumer-rolling-upgrade-cooperative")
    assert scenario.broker.build is BrokerBuild.KAFKA_4_3
    assert scenario.broker.migration_policy is MigrationPolicy.BIDIRECTIONAL
    assert scenario.sessions is Sessions.KEEP_RUNNING
    assert scenario.members[0].settings.protocol is GroupProtocol.CLASSIC
    assert scenario.members[0].settings.assignors == ("cooperative-sticky",)
    assert scenario.rolling is not None and scenario.rolling.after.protocol is GroupProtocol.CONSUMER
    assert scenario.rolling.after.server_assignor == "uniform"
    refused = load_builtin("migration-policy-disabled-refuses-upgrade").expect.migration.refused
    assert refused is not None and refused.members == (("*", 69),)


HEAD = "name: x\ndescription: y\n"


ALL = "members:\n  - match: {all: true}\n"  # a member rule whose settings follow (line 5)


@pytest.mark.parametrize(
    ("body", "line", "field", "message"),
    [
        (ALL + "    protocol: kip848\n", 5, "members[0].protocol", "not one of classic"),
        ("broker:\n  build: '3.9'\n", 4, "broker.build", "the reference knows Kafka 4.0, 4.3"),
        ("broker:\n  migration_policy: sometimes\n", 4, "broker.migration_policy", "not one of"),
        ("broker:\n  rules: x\n", 4, "broker.rules", "unknown key"),
        ("rolling:\n  after:\n    server_assignor: 'a b'\n", 5, "rolling.after.server_assignor", "letters"),
        (ALL + "    assignors: [range, magic]\n", 5, "members[0].assignors[1]", "'magic'"),
        (ALL + "    assignors: []\n", 5, "members[0].assignors", "at least one"),
        (ALL + "    assignor_user_data: ''\n", 5, "members[0].assignor_user_data", "give some"),
        ("sessions: forever\n", 3, "sessions", "not one of as-recorded, keep-running"),
        ("expect:\n  group_type: streams\n", 4, "expect.group_type", "not one of"),
        ("expect:\n  refused: {'*': NO_SUCH_ERROR}\n", 4, "expect.refused.*", "not a Kafka error"),
        ("expect:\n  rejoins_per_step: {min: 3, max: 1}\n", 4, "expect.rejoins_per_step", "min 3 > max 1"),
        ("expect:\n  partitions_moved_per_step: -1\n", 4, "expect.partitions_moved_per_step", "must be in"),
    ],
)
def test_migration_field_errors_name_file_line_and_field(
    body: str, line: int, field: str, message: str
) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(HEAD + body, "bad.yaml")
    text = str(caught.value)
    assert text.startswith(f"bad.yaml:{line}: {field}: "), text
    assert message in text


def test_a_heartbeat_without_instance_id_is_not_fenced_it_takes_the_shared_instance_back() -> None:
    """instance-id-shared-across-protocols on aiokafka, whose Heartbeat (v1) has no
    group_instance_id: Kafka checks it by member id only (GroupMetadataManager
    .validateConsumerGroupMember, null instance id -> UNKNOWN_MEMBER_ID, not FENCED_INSTANCE_ID), the
    client rejoins with JoinGroup v5 carrying the instance id and replaces the consumer-protocol
    member (classicGroupJoinToConsumerGroup), the group goes back to classic
    (validateOnlineDowngradeWithReplacedMember) and the consumer-protocol member is refused with
    GROUP_ID_NOT_FOUND. A live replay against Kafka 4.3.1 gave these errors and rebalances too
    (docs/ci.md)."""
    path = CAPTURES / "kafka-3.9.2--aiokafka--mixed.pcapng"
    aiokafka = build_plan(read_capture(path), path.stem)
    result = replay_reference(aiokafka, load_builtin("instance-id-shared-across-protocols"))
    failed = [
        (e.member_key, e.protocol, e.error_code) for e in result.events if e.event == EventName.REQUEST_FAILED
    ]
    assert failed == [
        ("aiokafka-c#0", GroupProtocol.CLASSIC, ErrorCode.unknown_member_id),
        ("aiokafka-mixed-a", GroupProtocol.CONSUMER, ErrorCode.group_id_not_found),
    ]
    assert [e.detail for e in result.events if e.event == EventName.GROUP_CONVERTED] == [
        "classic -> consumer",
        "consumer -> classic",
    ]
    assert refused_members(result.events) == {"aiokafka-mixed-a": ErrorCode.group_id_not_found}
    assert {e.member_key for e in result.events if e.event == EventName.MEMBER_FENCED} == set()
