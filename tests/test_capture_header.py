"""The capture's section-header comment: one versioned codec, read back by the reader (AGREED #2)."""

from __future__ import annotations

import json
from pathlib import Path

from proxy.capture.blocks import PcapNgBlocks
from proxy.capture.header import (
    CAPTURE_FORMAT,
    GroupSettings,
    decode_section_header,
    encode_section_header,
)
from proxy.capture.reader import read_capture
from proxy.capture.writer import CaptureWriter

SETTINGS = GroupSettings.from_configs(
    {
        "group.initial.rebalance.delay.ms": "0",
        "group.min.session.timeout.ms": "1000",
        "group.max.session.timeout.ms": "1800000",
        "group.max.size": "50",
        "group.coordinator.new.enable": "false",
        "group.coordinator.rebalance.protocols": "classic",
    },
    "3.9+",
)


def test_group_settings_round_trip_through_a_capture(tmp_path: Path) -> None:
    path = tmp_path / "c.pcapng"
    CaptureWriter(path, upstream="broker:9092", group_settings=SETTINGS).close()
    capture = read_capture(path)
    assert capture.damage is None
    assert capture.group_settings == SETTINGS
    assert capture.group_settings.max_size == 50 and capture.group_settings.new_coordinator is False
    assert capture.header["upstream_group_config"]["initial_rebalance_delay_ms"] == 0


def test_unknown_settings_keep_their_reason(tmp_path: Path) -> None:
    path = tmp_path / "c.pcapng"
    unknown = GroupSettings(broker_version="3.9+", unknown_reason="DescribeConfigs refused: x")
    CaptureWriter(path, upstream="broker:9092", group_settings=unknown).close()
    settings = read_capture(path).group_settings
    assert settings is not None and settings.initial_rebalance_delay_ms is None
    assert settings.unknown_reason == "DescribeConfigs refused: x"


def test_old_captures_without_settings_read_as_none(tmp_path: Path) -> None:
    path = tmp_path / "old.pcapng"
    old = {
        "format": CAPTURE_FORMAT,
        "format_version": 1,
        "tool_version": "0.1",
        "upstream": "b:1",
        "policy": "p",
    }
    with path.open("wb") as handle:
        handle.write(PcapNgBlocks(handle).header_blocks(json.dumps(old)))
    capture = read_capture(path)
    assert capture.group_settings is None and capture.damage is None
    assert capture.header["upstream"] == "b:1"


def test_coordinator_kind_from_configs() -> None:
    assert GroupSettings.from_configs(
        {"group.coordinator.rebalance.protocols": "classic,consumer"}, None
    ).new_coordinator
    assert GroupSettings.from_configs({"group.max.size": "5"}, None).new_coordinator is False  # before 3.7
    assert GroupSettings.from_configs({}, None).new_coordinator is None
    assert GroupSettings.from_configs({"group.max.size": "many"}, None).max_size is None


def test_wrong_types_are_damage_not_exceptions() -> None:
    comment = encode_section_header(tool_version="1", upstream="b:1", policy="p", group_settings=SETTINGS)
    raw = json.loads(comment)
    raw["upstream"] = 7
    raw["upstream_group_config"]["max_size"] = "fifty"
    raw["upstream_group_config"]["new_coordinator"] = 1
    raw["upstream_group_config"]["min_session_timeout_ms"] = True
    header = decode_section_header(json.dumps(raw))
    assert header is not None and header.upstream is None
    assert header.group_settings is not None
    assert header.group_settings.max_size is None and header.group_settings.new_coordinator is None
    assert header.group_settings.min_session_timeout_ms is None
    assert header.damage is not None and "max_size" in header.damage and "upstream" in header.damage
    assert decode_section_header(json.dumps([1, 2])) is None
    assert decode_section_header("{") is None


def test_packet_comment_encoders_and_decoder_agree() -> None:
    """One codec: what the writer's encoders produce, the reader's decoder accepts field for field."""
    from proxy.capture.header import (
        FRAME_COMMENT_FIELDS,
        close_comment,
        decode_packet_comment,
        frame_comment,
        frame_comment_head,
        frame_comment_tail,
        open_comment,
    )

    whole = decode_packet_comment(
        frame_comment(3, "request", 11, 5, 7, '"c"', "null", 99, True, 12, 30).decode()
    )
    assert whole is not None and set(whole) == set(FRAME_COMMENT_FIELDS)
    assert (whole["client_id"], whole["group_id"], whole["rewritten"], whole["redacted_body_bytes"]) == (
        "c",
        None,
        True,
        12,
    )
    cached = decode_packet_comment(
        frame_comment_head(3, "response", 11, 5, '"c"', '"g"') + frame_comment_tail(7, 99)
    )
    assert cached is not None and (cached["correlation_id"], cached["ts_ns"], cached["group_id"]) == (
        7,
        99,
        "g",
    )
    assert decode_packet_comment(open_comment(3, "a:1", "b:2").decode()) == {
        "conn": 3,
        "event": "open",
        "client": "a:1",
        "upstream": "b:2",
    }
    assert decode_packet_comment(close_comment(3, "bye").decode())["reason"] == "bye"  # type: ignore[index]


def test_capture_show_names_the_recorded_group_settings(tmp_path: Path) -> None:
    import io

    from rich.console import Console

    from proxy.capture.cli import show

    path = tmp_path / "c.pcapng"
    CaptureWriter(path, upstream="broker:9092", group_settings=SETTINGS).close()
    out = io.StringIO()
    assert show(str(path), console=Console(file=out, width=200)) == 0
    assert "Kafka 3.9+, classic coordinator, initial rebalance delay 0 ms" in out.getvalue()
