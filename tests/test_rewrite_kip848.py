"""ApiVersions and the KIP-848 APIs (issue 13): a rewrite policy hides ConsumerGroupHeartbeat (68)
and ConsumerGroupDescribe (69) only when its `hide_apis` names them, a cap never removes an API,
the proxy prints which API keys a policy changes, and the reference coordinator advertises 68/69
as Kafka 4.3.1 does. Kafka's answer is a recorded one: the ApiVersions response of the 4.3.1
broker in the fixture corpus (fixtures/captures), not a broker started here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from proxy.capture.reader import read_capture
from proxy.rewrite import PolicyError, parse_policy
from proxy.wire import decode_response
from proxy.wire.apis import ApiKey, api_name
from replay.coordinator import CoordinatorConfig, GroupCoordinator
from replay.coordinator.types import KafkaBehaviour

RECORDED_43 = Path(__file__).parent.parent / "fixtures/captures/kafka-4.3.1--java-4.3.1--mixed.pcapng"
HEARTBEAT, DESCRIBE = int(ApiKey.CONSUMER_GROUP_HEARTBEAT), int(ApiKey.CONSUMER_GROUP_DESCRIBE)


def _recorded_api_versions() -> Any:
    """The first ApiVersions answer Kafka 4.3.1 gave a client in the recorded capture."""
    capture = read_capture(RECORDED_43)
    frame = next(f for f in capture.frames if f.api_key == ApiKey.API_VERSIONS and f.direction == "response")
    return decode_response(frame.payload, frame.api_key, frame.api_version)[1]


def _ranges(response: Any) -> dict[int, tuple[int, int]]:
    return {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}


KAFKA_43 = _ranges(_recorded_api_versions())


def test_the_reference_advertises_what_kafka_43_advertises_for_the_kip848_apis() -> None:
    """ConsumerGroupHeartbeat v0-1 (v1: KIP-1082 client-generated member ids) and
    ConsumerGroupDescribe v0-1, as Kafka 4.3.1's ApiVersions answer says."""
    served = GroupCoordinator(
        CoordinatorConfig(kafka_behaviour=KafkaBehaviour.NEW_COORDINATOR)
    ).supported_versions()
    assert KAFKA_43[HEARTBEAT] == (0, 1) and KAFKA_43[DESCRIBE] == (0, 1)
    assert {k: served[k] for k in (HEARTBEAT, DESCRIBE)} == {k: KAFKA_43[k] for k in (HEARTBEAT, DESCRIBE)}


def test_capping_every_other_api_keeps_the_kip848_apis_as_kafka_advertises_them() -> None:
    caps = {
        api_name(k): 0 for k in KAFKA_43 if k not in (HEARTBEAT, DESCRIBE) and api_name(k) != "ApiVersions"
    }
    text = "api_versions:\n" + "".join(f"  {name}: 0\n" for name in sorted(caps) if _knows(name))
    policy = parse_policy(text, "caps.yaml")
    capped = _ranges(policy.cap_api_versions(_recorded_api_versions()))
    assert set(capped) == set(KAFKA_43)  # nothing removed
    assert capped[HEARTBEAT] == KAFKA_43[HEARTBEAT] and capped[DESCRIBE] == KAFKA_43[DESCRIBE]
    assert capped[int(ApiKey.JOIN_GROUP)] == (0, 0)


def _knows(name: str) -> bool:
    try:
        parse_policy(f"api_versions: {{{name}: 0}}\n", "one.yaml")
    except PolicyError:
        return False  # kio has no v0 of it (e.g. OffsetCommit starts at v2 on 4.x)
    return True


@settings(deadline=None)
@given(st.dictionaries(st.sampled_from(sorted(KAFKA_43)), st.integers(0, 20), max_size=12))
def test_a_cap_never_removes_an_api(caps: dict[int, int]) -> None:
    policy = parse_policy("name: any\n", "any.yaml")
    policy.api_version_caps = caps
    capped = _ranges(policy.cap_api_versions(_recorded_api_versions()))
    assert set(capped) == set(KAFKA_43)
    for key, (low, high) in capped.items():
        assert low == KAFKA_43[key][0] and low <= high <= KAFKA_43[key][1]


def test_hide_apis_removes_only_what_it_names() -> None:
    policy = parse_policy("hide_apis: [ConsumerGroupHeartbeat]\napi_versions: {JoinGroup: 5}\n", "no848.yaml")
    hidden = _ranges(policy.cap_api_versions(_recorded_api_versions()))
    assert set(KAFKA_43) - set(hidden) == {HEARTBEAT}
    assert hidden[DESCRIBE] == KAFKA_43[DESCRIBE] and hidden[int(ApiKey.JOIN_GROUP)] == (0, 5)
    assert policy.api_versions_changes() == (
        "JoinGroup (11): max_version capped at 5",
        "ConsumerGroupHeartbeat (68): hidden (hide_apis)",
    )
    both = parse_policy("hide_apis: [ConsumerGroupHeartbeat, ConsumerGroupDescribe]\n", "none.yaml")
    assert set(KAFKA_43) - set(_ranges(both.cap_api_versions(_recorded_api_versions()))) == {
        HEARTBEAT,
        DESCRIBE,
    }


def test_the_proxy_prints_which_api_keys_its_policy_changes(tmp_path: Path) -> None:
    policy = tmp_path / "rehearse-no-kip848.yaml"
    policy.write_text("api_versions: {JoinGroup: 5}\nhide_apis: [ConsumerGroupDescribe]\n", encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "group_replay", "proxy", "--upstream", "127.0.0.1:9",
         "--listen", "127.0.0.1:0", "--policy", str(policy)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline().strip() for _ in range(2)]
    finally:
        process.terminate()
        process.wait(timeout=30)
    prefix = "group-replay proxy: policy rehearse-no-kip848: ApiVersions"
    assert lines == [
        f"{prefix} JoinGroup (11): max_version capped at 5",
        f"{prefix} ConsumerGroupDescribe (69): hidden (hide_apis)",
    ]
