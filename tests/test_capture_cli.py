"""`group-replay capture show|export`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from group_replay import main
from tests.test_capture import _write


def test_show_and_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "220")
    path = tmp_path / "c.pcapng"
    _write(path)
    assert main(["capture", "show", str(path)]) == 0
    table = capsys.readouterr().out
    assert "JoinGroup" in table and "inst-1" in table and "Heartbeat" in table
    rows, _, per_api = table.partition("requests per API (client leg): ")
    assert "Produce" not in rows  # group APIs only unless --all
    assert "Produce 1" in per_api and "JoinGroup" in per_api  # every API is counted below it
    assert main(["capture", "export", str(path), "--format", "jsonl"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [row["api"] for row in rows] == ["JoinGroup", "Produce", "Heartbeat", "SaslAuthenticate"]
    assert rows[0]["group_instance_id"] == "inst-1" and rows[0]["api_version"] == 5
    assert rows[0]["answered"] and not rows[2]["answered"]


def test_bad_and_damaged_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["capture", "show", str(tmp_path / "missing.pcapng")]) == 2
    junk = tmp_path / "junk.pcapng"
    junk.write_bytes(b"junk" * 10)
    assert main(["capture", "show", str(junk)]) == 2
    path = tmp_path / "c.pcapng"
    _write(path)
    cut = tmp_path / "cut.pcapng"
    cut.write_bytes(path.read_bytes()[:-100])
    capsys.readouterr()
    assert main(["capture", "show", str(cut)]) == 0
    assert "capture damaged" in capsys.readouterr().out
    assert main(["capture", "frobnicate", str(cut)]) == 2


CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "captures"


def test_show_counts_each_groups_members_by_protocol(capsys: pytest.CaptureFixture[str]) -> None:
    """A recorded consumer-protocol group, a classic one and a migration (members restarted with
    group.protocol=consumer), each told by the APIs its members spoke."""
    consumer = CORPUS / "consumer-protocol" / "kafka-4.3.1--confluent--consumer-protocol-restart.pcapng"
    assert main(["capture", "show", str(consumer)]) == 0
    out = capsys.readouterr().out
    assert "group confluent-consumer-protocol: 4 consumer protocol members" in out
    assert main(["capture", "show", str(CORPUS / "kafka-3.9.2--confluent--mixed.pcapng")]) == 0
    assert "group confluent-mixed: 4 classic protocol members" in capsys.readouterr().out
    migration = next((CORPUS / "consumer-protocol").glob("*classic-to-consumer-rolling-upgrade.pcapng"))
    assert main(["capture", "show", str(migration)]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "group migration-rolling-upgrade: 3 classic and 3 consumer protocol members; 1 spoke both" in shown


def test_a_member_seen_in_both_protocols_switched() -> None:
    from proxy.capture.cli import protocol_lines
    from proxy.wire import ApiKey

    def row(api_key: ApiKey, protocol: str, instance: str | None, member: str) -> dict[str, object]:
        return {
            "api_key": int(api_key),
            "protocol": protocol,
            "group_id": "g",
            "group_instance_id": instance,
            "member_id": member,
        }

    rows = [
        row(ApiKey.JOIN_GROUP, "classic", "pod-1", "m1"),
        row(ApiKey.JOIN_GROUP, "classic", "pod-2", "m2"),
        row(ApiKey.CONSUMER_GROUP_HEARTBEAT, "consumer", "pod-1", "c1"),  # pod-1 upgraded
        row(ApiKey.CONSUMER_GROUP_DESCRIBE, "consumer", None, "admin"),  # not a member
    ]
    assert protocol_lines(rows) == [
        "group g: 2 classic and 1 consumer protocol members; 1 spoke both (switched protocol)"
    ]
