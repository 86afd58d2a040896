"""Rewrite policies through a real proxy session: caps, re-encoding both ways, membership edits."""

from __future__ import annotations

from pathlib import Path

import pytest
from kio.schema.api_versions.v3.response import ApiVersion, ApiVersionsResponse
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16

from proxy.commands import SendClient, SendUpstream
from proxy.rewrite import PolicyError, RewritePolicy, load_policy, parse_policy
from proxy.session import ProxySession, Record
from proxy.wire import decode_request, decode_response, encode_request, encode_response, peek_request_prefix
from tests.support.group_entities import join_request, join_response, ms


def _join(api_version: int = 9, instance_id: str | None = None, reason: str | None = None) -> object:
    return join_request(api_version, group_instance_id=instance_id, reason=reason, metadata=b"\x00")


def _join_response(api_version: int) -> object:
    return join_response(api_version, members=(("m-1", "a", b"\x00"),))


def _through(
    session: ProxySession, request: object, client_id: str, response_at: int
) -> tuple[object, object, list[Record]]:
    """Send a request through the session and answer it upstream in `response_at`."""
    out = session.client_data(encode_request(request, 5, client_id), now_ns=1)
    [upstream] = [c.data for c in out if isinstance(c, SendUpstream)]
    _, upstream_request = decode_request(upstream[4:])
    assert peek_request_prefix(upstream[4:])[1] == response_at
    back = session.upstream_data(encode_response(_join_response(response_at), 5), now_ns=2)
    [client] = [c.data for c in back if isinstance(c, SendClient)]
    _, client_response = decode_response(client[4:], 11, int(type(request).__version__))
    records = [c for c in out + back if isinstance(c, Record)]
    return upstream_request, client_response, records


def test_reencode_joingroup_v9_to_v5_and_convert_the_response_back() -> None:
    policy = parse_policy("reencode: {JoinGroup: 5}\n", "cap.yaml")
    session = ProxySession(1, record=True, policy=policy)
    upstream, response, records = _through(session, _join(9, instance_id="a"), "c-1", 5)
    assert type(upstream).__version__ == 5 and upstream.group_instance_id == "a"
    assert type(response).__version__ == 9 and response.member_id == "m-1"
    request_record = records[0]
    assert (request_record.api_version, request_record.upstream_api_version) == (9, 5)
    assert request_record.rewritten


def test_lossy_reencode_is_refused_unless_the_field_may_drop() -> None:
    strict = parse_policy("reencode: {JoinGroup: 5}\n", "p.yaml")
    session = ProxySession(1, policy=strict)
    out = session.client_data(encode_request(_join(9, reason="bounce"), 5, "c-1"), now_ns=1)
    [upstream] = [c.data for c in out if isinstance(c, SendUpstream)]
    assert peek_request_prefix(upstream[4:])[1] == 9
    assert "reason='bounce'" in strict.refused[0]

    lenient = parse_policy("reencode: {JoinGroup: 5}\nallow_drop: [reason]\n", "p.yaml")
    upstream_request, _, _ = _through(ProxySession(1, policy=lenient), _join(9, reason="bounce"), "c-1", 5)
    assert type(upstream_request).__version__ == 5


def test_membership_add_lifts_an_old_client_to_a_version_with_instance_ids() -> None:
    policy = parse_policy(
        "membership:\n  - match: {client_id: 'svc-*'}\n    action: add\n"
        "    instance_id: '{client_id}-static'\n",
        "m.yaml",
    )
    upstream, response, _ = _through(ProxySession(1, policy=policy), _join(4), "svc-7", 5)
    assert upstream.group_instance_id == "svc-7-static"
    assert type(response).__version__ == 4
    untouched = policy.rewrite_request(11, _join(4), "other")
    assert type(untouched).__version__ == 4


def test_membership_strip_by_ordinal() -> None:
    policy = parse_policy("membership:\n  - {match: {ordinal: 1}, action: strip}\n", "m.yaml")
    first = policy.rewrite_request(11, _join(9, instance_id="a"), "c-0")
    second = policy.rewrite_request(11, _join(9, instance_id="b"), "c-1")
    assert first.group_instance_id == "a"
    assert second.group_instance_id is None


def test_api_versions_caps_lower_max_version() -> None:
    policy = parse_policy("api_versions: {JoinGroup: 5, Heartbeat: 3}\n", "caps.yaml")
    response = ApiVersionsResponse(
        error_code=ErrorCode.none,
        api_keys=(
            ApiVersion(api_key=i16(11), min_version=i16(0), max_version=i16(9)),
            ApiVersion(api_key=i16(12), min_version=i16(0), max_version=i16(4)),
            ApiVersion(api_key=i16(14), min_version=i16(0), max_version=i16(5)),
        ),
        throttle_time=ms(0),
    )
    capped = policy.cap_api_versions(response)
    assert [(int(k.api_key), int(k.max_version)) for k in capped.api_keys] == [(11, 5), (12, 3), (14, 5)]


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("reencode: {JoinGroup: 11}\n", "p.yaml:1: reencode.JoinGroup: JoinGroup has no version 11"),
        ("api_versions: {JoinGruop: 5}\n", "p.yaml:1: api_versions.JoinGruop: unknown API"),
        ("membership:\n  - {match: {ordinal: 0}, action: paint}\n", "p.yaml:2: membership[0].action"),
        ("colour: red\n", "p.yaml:1: colour: unknown key"),
        ("hide_apis: [JoinGroup]\n", "p.yaml:1: hide_apis[0]: JoinGroup cannot be hidden"),
        ("hide_apis: [ConsumerGroupHartbeat]\n", "p.yaml:1: hide_apis[0]: unknown API"),
        ("hide_apis: ConsumerGroupHeartbeat\n", "p.yaml:1: hide_apis: expected a list"),
    ],
)
def test_policy_errors_name_file_line_and_field(text: str, where: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    assert str(caught.value).startswith(where), str(caught.value)


def test_load_policy_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "cap-v5.yaml"
    path.write_text("api_versions: {JoinGroup: 5}\nreencode: {JoinGroup: 5}\n", encoding="utf-8")
    policy = load_policy(path)
    assert isinstance(policy, RewritePolicy)
    assert policy.name == "cap-v5" and policy.reencode == {11: 5}
    with pytest.raises(PolicyError):
        load_policy(tmp_path / "missing.yaml")


def test_membership_words_are_the_scenarios_and_the_older_action_still_reads() -> None:
    """One vocabulary (proxy.membership): `membership: static | dynamic | as-recorded`, as in a
    scenario; `action: add | strip` is the older spelling of static | dynamic."""
    new = parse_policy(
        "membership:\n"
        "  - {match: {instance_id: 'keep-*'}, membership: as-recorded}\n"
        "  - {match: {all: true}, membership: static, instance_id: '{client_id}-{ordinal}'}\n",
        "m.yaml",
    )
    old = parse_policy(
        "membership:\n  - {match: {all: true}, action: add, instance_id: '{client_id}-{ordinal}'}\n", "m.yaml"
    )
    assert new.membership[1] == old.membership[0]
    kept = new.rewrite_request(11, _join(9, instance_id="keep-1"), "c-0")
    assert kept.group_instance_id == "keep-1"
    added = new.rewrite_request(11, _join(9), "c-1")
    assert added.group_instance_id == "c-1-1"
    stripped = parse_policy("membership:\n  - {match: {all: true}, membership: dynamic}\n", "m.yaml")
    assert stripped.rewrite_request(11, _join(9, instance_id="a"), "c-0").group_instance_id is None


DEEP_FLOW = "[" * 5000 + "]" * 5000


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("membership:\n  - match: {client_id: 'svc-*'\n", "p.yaml:3: not valid YAML"),  # truncated
        (f"allow_drop: {DEEP_FLOW}\n", "p.yaml:1: nested deeper than 32 levels"),
        (
            "membership:\n  - {match: {all: true}, action: add, instance_id: '{colour}'}\n",
            "p.yaml:2: membership[0].instance_id: unknown placeholder {colour}",
        ),
        (
            "membership:\n  - {match: {all: true}, action: add, instance_id: '{client_id[0]}'}\n",
            "p.yaml:2: membership[0].instance_id: unknown placeholder",
        ),
        (
            "membership:\n  - {match: {all: true}, membership: static, instance_id: '{member_key}'}\n",
            "p.yaml:2: membership[0].instance_id: unknown placeholder {member_key}",  # replay only
        ),
        (
            "membership:\n  - {match: {leader: true}, action: strip}\n",
            "p.yaml:2: membership[0].match.leader: unknown key",
        ),
        (
            "membership:\n  - {match: {ordinal: 99999999999}, action: strip}\n",
            "p.yaml:2: membership[0].match.ordinal",
        ),
        (
            "membership:\n  - {match: {all: true}, action: add, membership: static}\n",
            "p.yaml:2: membership[0].action",
        ),
        ("name: [a]\n", "p.yaml:1: name: expected a value"),
    ],
)
def test_damaged_policies_name_file_line_and_field(text: str, where: str) -> None:
    with pytest.raises(PolicyError) as caught:
        parse_policy(text, "p.yaml")
    assert str(caught.value).startswith(where), str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        "membership:\n  - match: {client_id: 'svc-*'\n",
        f"reencode: {DEEP_FLOW}\n",
        "reencode: {JoinGroup: 99}\n",
    ],
)
def test_the_proxy_cli_exits_2_on_a_bad_policy_before_it_listens(
    text: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from group_replay import main as group_replay

    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    assert (
        group_replay(["proxy", "--upstream", "127.0.0.1:9", "--listen", "127.0.0.1:0", "--policy", str(path)])
        == 2
    )
    err = capsys.readouterr().err
    assert f"{path}:" in err and "Traceback" not in err, err
