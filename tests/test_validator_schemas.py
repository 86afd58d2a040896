"""The validator's Spark schema stays in step with replay's event contract (design section 4)."""

from __future__ import annotations

import io
import types
import typing

import pytest

pytest.importorskip("pyspark")

from pyspark.sql.types import ArrayType, BooleanType, IntegerType, LongType, StringType

from replay.events import EVENT_COLUMNS, RebalanceEvent, write_jsonl
from validator.schemas import (
    CONTRACT_EVENT_FIELDS,
    CORRUPT_RECORD_COLUMN,
    EVENT_SCHEMA,
    JSON_READ_SCHEMA,
    OPTIONAL_EVENT_FIELDS,
    READ_SCHEMA,
)
from validator.session import java_problem

# Python annotation -> the Spark types that hold it (ts_ms is a Python int but a Spark long).
SPARK_TYPES = {str: {StringType()}, int: {IntegerType(), LongType()}, bool: {BooleanType()}}


def test_contract_columns_match_replay_events_in_name_and_order() -> None:
    assert tuple(f.name for f in CONTRACT_EVENT_FIELDS) == EVENT_COLUMNS
    optional = [f.name for f in OPTIONAL_EVENT_FIELDS]
    assert not set(optional) & set(EVENT_COLUMNS), "an optional column became contract: move it"
    assert EVENT_SCHEMA.fieldNames() == [*EVENT_COLUMNS, *optional]
    assert all(f.nullable for f in OPTIONAL_EVENT_FIELDS)


def test_contract_types_and_nullability_match_the_dataclass() -> None:
    hints = typing.get_type_hints(RebalanceEvent)
    by_name = {f.name: f for f in CONTRACT_EVENT_FIELDS}
    for name in EVENT_COLUMNS:
        hint = hints[name]
        args = typing.get_args(hint)
        nullable = isinstance(hint, types.UnionType) and type(None) in args
        inner = next(a for a in args if a is not type(None)) if nullable else hint
        field = by_name[name]
        assert field.nullable == nullable, name
        if typing.get_origin(inner) is tuple:
            assert field.dataType == ArrayType(StringType(), True), name
        else:
            assert field.dataType in SPARK_TYPES[inner], (name, field.dataType)
    assert by_name["ts_ms"].dataType == LongType()


def test_read_schemas_are_all_nullable_and_json_keeps_corrupt_records() -> None:
    assert all(f.nullable for f in READ_SCHEMA.fields)
    assert JSON_READ_SCHEMA.fieldNames() == [*READ_SCHEMA.fieldNames(), CORRUPT_RECORD_COLUMN]


@pytest.mark.spark
@pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}")
def test_replay_written_jsonl_reads_back_with_no_bad_rows(tmp_path) -> None:
    from tests.support.spark import shared_test_session
    from validator.transforms import flag_bad_rows

    events = [
        RebalanceEvent("s1", "as-recorded", "reference", "g", 0, 0, "member_joined", -1, "inst-1", "m-1",
                       "inst-1", None, False, None, 9, 0, None),
        RebalanceEvent("s1", "as-recorded", "reference", "g", 1, 12_345_678_901, "generation_completed", 1,
                       "inst-1", "m-1", "inst-1", "range", True, False, 9, 0, ("t-0", "t-1")),
    ]  # fmt: skip
    buffer = io.StringIO()
    write_jsonl(events, buffer)
    path = tmp_path / "reference.jsonl"
    path.write_text(buffer.getvalue())
    spark = shared_test_session()
    frame = spark.read.schema(JSON_READ_SCHEMA).option("mode", "PERMISSIVE").json(str(path))
    rows = flag_bad_rows(frame).orderBy("seq").collect()
    assert [r["bad_reason"] for r in rows] == [None, None]
    assert rows[1]["ts_ms"] == 12_345_678_901
    assert rows[1]["assignment"] == ["t-0", "t-1"]
    assert rows[0]["client_software"] is None  # optional column absent from replay's files
    back = [RebalanceEvent.from_json_dict({c: r[c] for c in EVENT_COLUMNS}) for r in rows]
    assert back == events
