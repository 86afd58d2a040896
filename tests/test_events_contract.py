"""The events contract is declared once (replay.events.EVENT_TABLE) and every writer and reader
agrees on it: JSON Lines writer and reader, the Parquet writer and reader, and the validator's
Spark reader (validator.jobs.read_events) over both files, optional columns included."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from replay.coordinator import GroupEventKind
from replay.events import (
    EVENT_COLUMNS,
    EVENT_TABLE,
    OPTIONAL_EVENT_COLUMNS,
    EventName,
    RebalanceEvent,
    read_jsonl,
    write_jsonl,
)
from validator.session import java_problem

# Every column set, unset and at its edges: 64-bit ts_ms, negative ints, empty vs absent
# assignment, non-ASCII text, both optional columns.
EVENTS = [
    RebalanceEvent("s1", "as-recorded", "reference", "g", 0, 0, EventName.MEMBER_JOINED, -1, "inst-1", "m-1",
                   "inst-1", None, False, None, 9, 0, None, client_software="apache-kafka-java/3.9.2"),
    RebalanceEvent("s1", "as-recorded", "reference", "g", 1, 12_345_678_901,
                   EventName.GENERATION_COMPLETED, 1, "inst-1", "m-1", "inst-1", "range", True, False, 9, 0,
                   ("t-0", "t-1"),
                   client_software="librdkafka/2.6.1", detail="größe ✓"),
    RebalanceEvent("s1", "as-recorded", "reference", "g", 2, 2**63 - 1, EventName.REQUEST_FAILED, 2**31 - 1,
                   "c-0#1", "", None, None, False, True, 0, -(2**31), ()),
    RebalanceEvent.not_run("s1", "as-recorded", "broker-2.2.0", "g", "JoinGroup v9 needs Kafka 2.3+", seq=3),
    # format 2: a consumer-protocol member's partitions, the group's type, its member epoch
    RebalanceEvent("s1", "upgrade", "reference", "g", 4, 60_000, EventName.ASSIGNMENT_RECEIVED, 7, "c-0#1",
                   "Ab3-uuid", None, None, False, None, -1, 0, ("t-2",), protocol="consumer",
                   group_type="consumer", member_epoch=7),
    RebalanceEvent("s1", "upgrade", "reference", "g", 5, 60_001, EventName.GROUP_CONVERTED, -1, "c-0#1",
                   "Ab3-uuid", None, None, False, None, -1, 0, None, detail="classic -> consumer",
                   protocol="consumer", group_type="consumer", member_epoch=-(2**31)),
]  # fmt: skip


def _jsonl(tmp_path: Path) -> Path:
    buffer = io.StringIO()
    assert write_jsonl(EVENTS, buffer) == len(EVENTS)
    path = tmp_path / "reference.jsonl"
    path.write_text(buffer.getvalue(), encoding="utf-8")
    return path


def test_the_table_is_the_dataclass_and_optional_columns_come_last() -> None:
    assert tuple(c.name for c in EVENT_TABLE) == (*EVENT_COLUMNS, *OPTIONAL_EVENT_COLUMNS)
    optional = {"client_software", "detail", "protocol", "group_type", "member_epoch"}
    assert optional == set(OPTIONAL_EVENT_COLUMNS)
    assert all(c.nullable for c in EVENT_TABLE if c.optional)


def test_one_event_name_enum_the_coordinator_names_are_a_subset() -> None:
    """The coordinator's server-side kinds carry the same names (plus its own state changes)."""
    names = {e.value for e in EventName}
    kinds = {k.value for k in GroupEventKind} - {GroupEventKind.STATE_CHANGED.value}
    assert kinds <= names, kinds - names


def test_jsonl_writer_and_reader_agree(tmp_path: Path) -> None:
    assert list(read_jsonl(_jsonl(tmp_path))) == EVENTS


def test_format_1_files_still_read(tmp_path: Path) -> None:
    """A file written before format 2 lacks protocol, group_type and member_epoch: read as null."""
    format_2 = {"protocol", "group_type", "member_epoch"}
    path = tmp_path / "format-1.jsonl"
    old = [{k: v for k, v in e.to_json_dict().items() if k not in format_2} for e in EVENTS[:4]]
    path.write_text("".join(json.dumps(row) + "\n" for row in old), encoding="utf-8")
    assert list(read_jsonl(path)) == EVENTS[:4]
    assert all(e.protocol is None and e.member_epoch is None for e in read_jsonl(path))


def test_jsonl_reader_refuses_what_the_contract_refuses(tmp_path: Path) -> None:
    good = EVENTS[0].to_json_dict()
    for column, value in [
        ("seq", "1"), ("is_leader", 1), ("generation_id", 2**31), ("member_id", None), ("member_epoch", "7"),
    ]:  # fmt: skip
        path = tmp_path / f"{column}.jsonl"
        path.write_text(json.dumps({**good, column: value}) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=rf"{column}.jsonl:1: event row: column {column}: "):
            list(read_jsonl(path))


def test_parquet_writer_and_reader_agree_and_keep_optional_columns(tmp_path: Path) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    from replay.events import arrow_schema, read_parquet, write_parquet

    path = tmp_path / "events.parquet"
    assert write_parquet(EVENTS, path) == len(EVENTS)
    stored = pq.read_schema(path)
    assert stored.names == [c.name for c in EVENT_TABLE]
    assert stored.equals(arrow_schema(), check_metadata=False)
    assert list(read_parquet(path)) == EVENTS


@pytest.mark.spark
@pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}")
def test_the_spark_reader_reads_both_files_as_written(tmp_path: Path) -> None:
    pytest.importorskip("pyarrow")
    from replay.events import write_parquet
    from tests.support.spark import shared_test_session
    from validator.jobs import discover_inputs, read_events
    from validator.schemas import READ_SCHEMA
    from validator.transforms import flag_bad_rows

    json_dir, parquet_dir = tmp_path / "json", tmp_path / "parquet"
    json_dir.mkdir()
    parquet_dir.mkdir()
    _jsonl(json_dir)
    write_parquet(EVENTS, parquet_dir / "events.parquet")
    spark = shared_test_session()
    # The Parquet writer's physical types are the Spark contract's: no cast needed when read.
    stored = spark.read.parquet(str(parquet_dir / "events.parquet")).schema
    assert [(f.name, f.dataType) for f in stored.fields] == [(f.name, f.dataType) for f in READ_SCHEMA.fields]
    for where in (json_dir, parquet_dir):
        frame = flag_bad_rows(read_events(spark, discover_inputs([where])))
        rows = frame.orderBy("seq").collect()
        assert [r["bad_reason"] for r in rows] == [None] * len(EVENTS), where
        back = [RebalanceEvent.from_json_dict({c.name: r[c.name] for c in EVENT_TABLE}) for r in rows]
        assert back == EVENTS, where
        assert rows[3]["detail"] == "JoinGroup v9 needs Kafka 2.3+"
        assert rows[1]["client_software"] == "librdkafka/2.6.1"
        format_2 = (rows[4]["protocol"], rows[4]["group_type"], rows[4]["member_epoch"])
        assert format_2 == ("consumer", "consumer", 7)


REFUSED = [
    ("seq", "1"), ("is_leader", 1), ("generation_id", 2**31), ("member_id", None), ("ts_ms", 1.5),
    ("assignment", "t-0"),
]  # fmt: skip


@pytest.mark.spark
@pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}")
def test_both_readers_refuse_a_value_the_contract_refuses(tmp_path: Path) -> None:
    """Wrong types, an int past 32 bits, a null in a required column: the JSONL reader raises, the
    Spark reader flags the row bad. (Spark's JSON reader turns any value into a string column's
    text, so a number in `detail` is refused only by the JSONL reader.)"""
    from tests.support.spark import shared_test_session
    from validator.jobs import discover_inputs, read_events
    from validator.transforms import flag_bad_rows

    good = EVENTS[0].to_json_dict()
    for index, (column, value) in enumerate(REFUSED):
        path = tmp_path / f"{index}.jsonl"
        path.write_text(json.dumps({**good, column: value}) + "\n", encoding="utf-8")
        with pytest.raises(ValueError, match=f"column {column}"):
            list(read_jsonl(path))
    rows = flag_bad_rows(read_events(shared_test_session(), discover_inputs([tmp_path]))).collect()
    by_file = {Path(r["source_file"]).stem: r["bad_reason"] for r in rows}
    assert sorted(by_file) == [str(i) for i in range(len(REFUSED))]
    assert all(by_file.values()), by_file
