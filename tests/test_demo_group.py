"""The demo group on a real broker: mixed clients settle, and a static bounce moves nothing."""

from __future__ import annotations

import pytest

from demo.clients import ClientKind
from demo.group import DEFAULT_MEMBERS, MemberPlan, render_table, run_group
from harness.lines import KAFKA_4X, KAFKA_39


def test_bounce_must_name_a_static_member() -> None:
    with pytest.raises(ValueError, match="static member"):
        run_group("127.0.0.1:9", "t", 1, bounce="dynamic-aiokafka")
    with pytest.raises(ValueError, match="static member"):
        run_group("127.0.0.1:9", "t", 1, bounce="nobody")


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("fixture_name", ["kafka_39", "kafka_4x"])
def test_static_bounce_keeps_the_assignment_and_rebalances_no_one(
    fixture_name: str, request: pytest.FixtureRequest, make_topic
) -> None:
    broker = request.getfixturevalue(fixture_name)
    assert broker.kafka_version in (KAFKA_39, KAFKA_4X)
    topic = make_topic(broker.bootstrap, partitions=6, prefix="demo")
    run = run_group(broker.bootstrap, topic, 6, bounce="static-confluent")

    joined = {o.member: o for o in run.observations if o.phase == "joined"}
    after = {o.member: o for o in run.observations if o.phase == "after bounce"}
    assert set(joined) == set(after) == {m.name for m in DEFAULT_MEMBERS}
    owned = sorted(tp for o in joined.values() for tp in o.assignment)
    assert owned == sorted(f"{topic}-{p}" for p in range(6))
    # KIP-345: a static member that comes back with the same group.instance.id while the group is
    # stable gets its old assignment, and no other member goes through a rebalance.
    assert after["static-confluent"].assignment == joined["static-confluent"].assignment
    for name in joined:
        if name != "static-confluent":
            assert after[name].rebalances == joined[name].rebalances, name
            assert after[name].assignment == joined[name].assignment, name
    # Clients that expose the generation agree on it.
    generations = {o.generation_id for o in joined.values() if o.generation_id is not None}
    assert len(generations) == 1
    assert render_table(run).row_count == len(run.observations)


@pytest.mark.integration
@pytest.mark.timeout(300)
def test_dynamic_members_split_the_topic(kafka_39, make_topic) -> None:
    members = (
        MemberPlan("d-confluent", ClientKind.CONFLUENT, False),
        MemberPlan("d-kafka-python", ClientKind.KAFKA_PYTHON, False),
    )
    topic = make_topic(kafka_39.bootstrap, partitions=4, prefix="dyn")
    run = run_group(kafka_39.bootstrap, topic, 4, members=members, bounce=None)
    sizes = sorted(len(o.assignment) for o in run.observations)
    assert sizes == [2, 2]
