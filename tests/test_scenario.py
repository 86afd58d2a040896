"""Scenario YAML: the built-in library loads, and bad files name their file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

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
from tests.test_migration_scenarios import MIGRATION_SCENARIOS

BUILTINS = {
    "dynamic-to-static-rolling-upgrade",
    "static-to-dynamic-rolling-downgrade",
    "client-joingroup-v5-to-v9-upgrade",
    "client-joingroup-v9-to-v5-downgrade",
    "broker-downgrade-2.3-api-versions",
    "mixed-static-dynamic-group",
    "static-leader-bounce",
    "duplicate-instance-id",
    "static-member-persisted-after-broker-roll",
    *MIGRATION_SCENARIOS,  # the classic <-> consumer protocol migration
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


# ---- issue 18 defect 4: any file gives a Scenario or a file:line:field error, never a traceback

REFUSALS = Path(__file__).parent / "data" / "scenario_refusals.yaml"
DEEP_FLOW = "[" * 5000 + "]" * 5000
DEEP_BLOCK = "".join(f"{' ' * i}k:\n" for i in range(1, 1000))  # 1,000 deep in 0.5 MB


def _refusals() -> list[tuple[str, int, str, str]]:
    """The refused bodies written as YAML (tests/data/scenario_refusals.yaml), as users write them."""
    cases = yaml.safe_load(REFUSALS.read_text(encoding="utf-8"))
    return [(case["body"], case["line"], case["field"], case["message"]) for case in cases]


@pytest.mark.parametrize(
    ("body", "line", "field", "message"),
    [
        *_refusals(),
        (f"members: {DEEP_FLOW}\n", 3, "", "nested deeper than 32 levels"),
        (f"expect:\n{DEEP_BLOCK}", 34, "", "nested deeper than 32 levels"),  # where level 33 starts
    ],
    ids=lambda v: v if isinstance(v, int) else None,
)
def test_errors_name_file_line_and_field(body: str, line: int, field: str, message: str) -> None:
    assert_refused(body, line, field, message)


def assert_refused(body: str, line: int, field: str, message: str) -> None:
    """`body` after GOOD_HEAD is refused at `line`, naming `field` (if any), with `message`."""
    with pytest.raises(ScenarioError) as caught:
        parse_scenario(GOOD_HEAD + body, "bad.yaml")
    text = str(caught.value)
    assert text.startswith(f"bad.yaml:{line}: {field}: " if field else f"bad.yaml:{line}: "), text
    assert message in text


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("c-{client_id[0]}", "unknown placeholder {client_id[0]}"),
        ("{ordinal:>999999999}", "no format spec"),
        ("{}", "placeholder"),
        ("a{", "template"),
    ],
)
def test_instance_id_template_errors_name_the_template_line(template: str, message: str) -> None:
    """Whatever is wrong with an instance_id template, the error names its line and field."""
    body = f"members:\n  - match: {{all: true}}\n    instance_id: '{template}'\n"
    assert_refused(body, 5, "members[0].instance_id", message)


def test_scenario_names_are_identifiers_and_as_recorded_is_reserved() -> None:
    with pytest.raises(ScenarioError, match=r"^s.yaml:1: name: letters"):
        parse_scenario("name: '[/x]'\ndescription: y\n", "s.yaml")
    with pytest.raises(ScenarioError, match=r"^s.yaml:1: name: 'as-recorded' is reserved"):
        parse_scenario("name: as-recorded\ndescription: y\n", "s.yaml")


def test_unreadable_and_oversized_files_are_errors(tmp_path: Path) -> None:
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"name: x\ndescription: \xff\xfe\n")
    with pytest.raises(ScenarioError, match=r"binary\.yaml:2: not UTF-8"):
        load_scenario_file(binary)
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: x\ndescription: " + "y" * (2 << 20) + "\n", encoding="utf-8")
    with pytest.raises(ScenarioError, match=r"huge\.yaml: larger than"):
        load_scenario_file(huge)


@pytest.mark.parametrize(
    ("body", "where"),
    [
        ("members:\n  - match: {client_id: 'svc-*'\n", "bad.yaml:5: not valid YAML"),
        (f"members: {DEEP_FLOW}\n", "bad.yaml:3: nested deeper"),
        (
            "members:\n  - match: {all: true}\n    instance_id: '{colour}'\n",
            "bad.yaml:5: members[0].instance_id:",
        ),
        ("rolling:\n  interval_ms: 2147483648\n", "bad.yaml:4: rolling.interval_ms: must be in"),
        ('"[/x]": 1\n', "bad.yaml:3: [/x]: unknown key"),  # printed as text, never as rich markup
    ],
)
def test_the_cli_exits_2_with_the_error_never_a_traceback(
    body: str, where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(GOOD_HEAD + body, encoding="utf-8")
    argv = ["replay", str(tmp_path / "none.pcapng"), "--scenario", str(path), "--out", str(tmp_path / "out")]
    for command in (argv, ["scenarios", "show", str(path)]):
        assert group_replay([*command]) == 2
        err = capsys.readouterr().err
        assert f"{tmp_path}/{where}" in err, err
        assert "Traceback" not in err


def test_a_rolling_bounce_longer_than_the_bound_is_refused_before_it_runs(tmp_path: Path) -> None:
    """Per-value bounds cannot know the group's size: a run refuses members x interval > 6 h
    (a 13-member group bounced every 30 min) at once, instead of simulating it for minutes."""
    from proxy.capture.reader import read_capture
    from replay.plan import build_plan
    from replay.run import replay_reference
    from tests.support.synth import synthesize_capture

    capture = tmp_path / "big-group.pcapng"
    synthesize_capture(capture, members=13, static=False, duration_ms=10_000)
    plan = build_plan(read_capture(capture), "big")
    scenario = parse_scenario(GOOD_HEAD + "rolling: {interval_ms: 1800000}\n", "long.yaml")
    with pytest.raises(ValueError, match=r"^long.yaml: rolling.interval_ms: a bounce of 13 members .* 6.5 h"):
        replay_reference(plan, scenario)
