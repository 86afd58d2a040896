"""Scenario YAML: the built-in library loads, and bad files name their file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from group_replay import main as group_replay
from replay.scenario import (
    BounceOrder,
    Membership,
    ScenarioError,
    builtin_names,
    load_builtin,
    load_scenario_file,
    parse_scenario,
)

BUILTINS = {
    "dynamic-to-static-rolling-upgrade",
    "static-to-dynamic-rolling-downgrade",
    "client-joingroup-v5-to-v9-upgrade",
    "client-joingroup-v9-to-v5-downgrade",
    "broker-downgrade-2.3-api-versions",
    "mixed-static-dynamic-group",
    "static-leader-bounce",
    "duplicate-instance-id",
}


def test_the_library_holds_every_migration_path_and_each_parses() -> None:
    assert set(builtin_names()) == BUILTINS
    for name in BUILTINS:
        scenario = load_builtin(name)
        assert scenario.name == name
        assert scenario.expect != type(scenario.expect)(), f"{name} states no expectation"


def test_upgrade_scenario_plan_is_typed() -> None:
    scenario = load_builtin("client-joingroup-v5-to-v9-upgrade")
    assert scenario.rolling is not None
    assert scenario.rolling.order == BounceOrder.LEADER_LAST
    assert scenario.members[0].settings.membership == Membership.STATIC
    (rule,) = scenario.members[0].settings.api_versions
    assert (rule.api_key, rule.api_version, rule.exact) == (11, 5, True)
    assert scenario.rolling.after.api_versions[0].api_version == 9
    assert scenario.expect.leader_skips_assignment is True


GOOD_HEAD = "name: x\ndescription: y\n"


@pytest.mark.parametrize(
    ("body", "line", "field", "message"),
    [
        ("colour: red\n", 3, "colour", "unknown key"),
        ("rolling:\n  start_ms: soon\n", 4, "rolling.start_ms", "expected an integer"),
        ("rolling:\n  order: random\n", 4, "rolling.order", "is not one of"),
        (
            "members:\n  - match: {ordinal: 0}\n    api_versions: {JoinGroup: 12}\n",
            5,
            "members[0].api_versions.JoinGroup",
            "has no version 12",
        ),
        (
            "members:\n  - match: {ordinal: 0}\n    api_versions: {JoinGruop: 5}\n",
            5,
            "members[0].api_versions",
            "unknown API 'JoinGruop'",
        ),
        ("members:\n  - membership: static\n", 4, "members[0].match", "required key is missing"),
        (
            "faults:\n  - match: {all: true}\n    api: Heartbeat\n    kind: error\n",
            4,
            "faults[0].error_code",
            "required for kind: error",
        ),
        ("expect:\n  rebalances: {min: 3, max: 1}\n", 4, "expect.rebalances", "min 3 > max 1"),
        ("expect:\n  leader_skips_assignment: maybe\n", 4, "expect.leader_skips_assignment", "true or false"),
        (
            "members:\n  - match: {ordinal: 0}\n    membership: dynamic\n    instance_id: a\n",
            6,
            "members[0].instance_id",
            "dynamic member has no instance id",
        ),
    ],
)
def test_errors_name_file_line_and_field(body: str, line: int, field: str, message: str) -> None:
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(GOOD_HEAD + body, "bad.yaml")
    text = str(caught.value)
    assert text.startswith(f"bad.yaml:{line}: {field}: "), text
    assert message in text


def test_missing_name_and_broken_yaml_are_errors(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"^s.yaml:1: name: required key is missing"):
        parse_scenario("description: y\n", "s.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: [unclosed\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"broken\.yaml:.*not valid YAML"):
        load_scenario_file(broken)


def test_scenarios_cli_list_show_and_unknown(capsys: pytest.CaptureFixture[str]) -> None:
    assert group_replay(["scenarios", "list"]) == 0
    listed = capsys.readouterr().out
    assert "static-leader-bounce" in listed
    assert group_replay(["scenarios", "show", "duplicate-instance-id"]) == 0
    assert "duplicate-instance" in capsys.readouterr().out
    assert group_replay(["scenarios", "show", "no-such-scenario"]) == 2
