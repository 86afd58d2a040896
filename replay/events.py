"""Rebalance events: the table replay writes and the validator reads (design section 4).

One row per event. `EVENT_TABLE` below is the contract, declared once: column names, order, types,
nullability and which columns are optional extensions. Everything else is derived from it: the
JSON Lines reader's checks, the Parquet (pyarrow) schema here, and the validator's Spark
StructType (`validator/schemas.py`). `RebalanceEvent` is the typed row; an import-time check keeps
its fields in step with the table, so a column added to one and not the other fails at once.

Versions (`EVENTS_FORMAT_VERSION`; a reader accepts every one):
1. design section 4's columns, plus the optional `client_software` and `detail`;
2. the classic -> consumer protocol migration (issue 14): optional `protocol` (classic |
   consumer: what the member spoke in that exchange), `group_type` (classic | consumer: the
   group's type as the clients saw it then), `member_epoch` (the KIP-848 member epoch of a
   consumer-protocol row), and the event kinds `group_converted`, `assignment_revoked` and
   `assignment_received` (the partitions in `assignment`). Format 1 files read with those null.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

EVENTS_FORMAT_VERSION = 2


class ColumnType(StrEnum):
    """Column types by their design section 4 (and Spark DDL) names."""

    STRING = "string"
    INT = "int"  # 32-bit signed
    LONG = "long"  # 64-bit signed
    BOOLEAN = "boolean"
    STRING_LIST = "array<string>"


@dataclass(frozen=True, slots=True)
class EventColumn:
    """One column of the events table. `optional`: an extension column that older files lack (read
    as null); optional columns are always nullable and come after the contract columns."""

    name: str
    type: ColumnType
    nullable: bool
    optional: bool = False


EVENT_TABLE: tuple[EventColumn, ...] = (
    EventColumn("session_id", ColumnType.STRING, False),
    EventColumn("scenario", ColumnType.STRING, False),
    EventColumn("run", ColumnType.STRING, False),
    EventColumn("group_id", ColumnType.STRING, False),
    EventColumn("seq", ColumnType.INT, False),
    EventColumn("ts_ms", ColumnType.LONG, False),
    EventColumn("event", ColumnType.STRING, False),
    EventColumn("generation_id", ColumnType.INT, False),
    EventColumn("member_key", ColumnType.STRING, False),
    EventColumn("member_id", ColumnType.STRING, False),
    EventColumn("group_instance_id", ColumnType.STRING, True),
    EventColumn("protocol_name", ColumnType.STRING, True),
    EventColumn("is_leader", ColumnType.BOOLEAN, False),
    EventColumn("skip_assignment", ColumnType.BOOLEAN, True),
    EventColumn("join_api_version", ColumnType.INT, False),
    EventColumn("error_code", ColumnType.INT, False),
    EventColumn("assignment", ColumnType.STRING_LIST, True),
    # Extensions (not in design section 4's table; absent from older files):
    # the member's client as it named itself in ApiVersions v3+, `name/version`
    # (e.g. "apache-kafka-java/3.9.2"); the validator's compatibility matrix uses it as the client axis.
    EventColumn("client_software", ColumnType.STRING, True, optional=True),
    # AGREED #1: free text, e.g. why a run was not carried out (always set for `not_run`).
    EventColumn("detail", ColumnType.STRING, True, optional=True),
    # Format 2 (the protocol migration): `classic` or `consumer`, what the member spoke
    EventColumn("protocol", ColumnType.STRING, True, optional=True),
    # the group's type (`classic` | `consumer`) as the clients saw it at that event
    EventColumn("group_type", ColumnType.STRING, True, optional=True),
    # a consumer-protocol member's epoch after the event (ConsumerGroupHeartbeat's answer)
    EventColumn("member_epoch", ColumnType.INT, True, optional=True),
)
"""The events contract, declared once (design section 4 plus the optional extensions)."""

RECORDED_RUN, REFERENCE_RUN = "recorded", "reference"
"""The `run` names (AGREED #4) of the capture as it ran and of the reference coordinator's replay;
a live run is `broker-<version>` from what the broker advertises (`replay.brokers.run_name_for`,
never its address), a repeat `NAME~N`."""


class EventName(StrEnum):
    MEMBER_JOINED = "member_joined"
    REBALANCE_STARTED = "rebalance_started"
    GENERATION_COMPLETED = "generation_completed"
    MEMBER_LEFT = "member_left"
    MEMBER_EXPIRED = "member_expired"
    MEMBER_FENCED = "member_fenced"
    REQUEST_FAILED = "request_failed"
    NOT_RUN = "not_run"  # a run that could not be carried out: one row, the reason in `detail` (AGREED #1)
    # format 2: the group changed type (`group_type` is the new one, `detail` says from what)
    GROUP_CONVERTED = "group_converted"
    # format 2: partitions a member gave up / was given (`assignment` holds them)
    ASSIGNMENT_REVOKED = "assignment_revoked"
    ASSIGNMENT_RECEIVED = "assignment_received"


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
    """One row of the events contract: what one member saw happen to its group, at `ts_ms` of
    the run (EVENT_TABLE above declares the columns, their types and which are optional)."""

    session_id: str
    scenario: str
    run: str
    group_id: str
    seq: int
    ts_ms: int
    event: str
    generation_id: int
    member_key: str
    member_id: str
    group_instance_id: str | None
    protocol_name: str | None
    is_leader: bool
    skip_assignment: bool | None
    join_api_version: int
    error_code: int
    assignment: tuple[str, ...] | None
    client_software: str | None = None  # optional column (EVENT_TABLE)
    detail: str | None = None  # optional column (EVENT_TABLE); the reason of a `not_run` row
    protocol: str | None = None  # optional (format 2): classic | consumer
    group_type: str | None = None  # optional (format 2): classic | consumer
    member_epoch: int | None = None  # optional (format 2): KIP-848 member epoch

    @classmethod
    def not_run(
        cls, session_id: str, scenario: str, run: str, group_id: str, detail: str, seq: int = 0
    ) -> RebalanceEvent:
        """The one row that stands for a run that could not be carried out, and why."""
        return cls(
            session_id, scenario, run, group_id, seq, 0, EventName.NOT_RUN.value, -1, "", "", None, None,
            False, None, -1, 0, None, detail=detail,
        )  # fmt: skip

    def to_json_dict(self) -> dict[str, Any]:
        row = asdict(self)
        if self.assignment is not None:
            row["assignment"] = list(self.assignment)
        return row

    @classmethod
    def from_json_dict(cls, row: dict[str, Any]) -> RebalanceEvent:
        """A row as `to_json_dict` (or the Parquet reader) gives it, checked against EVENT_TABLE."""
        unknown = set(row) - _BY_NAME.keys()
        missing = _BY_NAME.keys() - set(row) - set(OPTIONAL_EVENT_COLUMNS)
        if unknown or missing:
            raise ValueError(
                f"event row: unknown columns {sorted(unknown)}, missing columns {sorted(missing)}"
            )
        values = dict(row)
        for name, value in values.items():
            problem = _value_problem(_BY_NAME[name], value)
            if problem is not None:
                raise ValueError(f"event row: column {name}: {problem}")
        if values["assignment"] is not None:
            values["assignment"] = tuple(values["assignment"])
        return cls(**values)


_INT_RANGES = {ColumnType.INT: (-(2**31), 2**31 - 1), ColumnType.LONG: (-(2**63), 2**63 - 1)}
_BY_NAME: dict[str, EventColumn] = {c.name: c for c in EVENT_TABLE}


def _value_problem(column: EventColumn, value: Any) -> str | None:
    """Why `value` does not fit `column` (None when it does): the JSON reader's checks, which
    match what the Spark reader and the Parquet writer refuse."""
    if value is None:
        return None if column.nullable else "null in a required column"
    match column.type:
        case ColumnType.STRING:
            ok = isinstance(value, str)
        case ColumnType.BOOLEAN:
            ok = isinstance(value, bool)
        case ColumnType.INT | ColumnType.LONG:
            low, high = _INT_RANGES[column.type]
            ok = isinstance(value, int) and not isinstance(value, bool) and low <= value <= high
        case ColumnType.STRING_LIST:
            ok = isinstance(value, list | tuple) and all(isinstance(v, str) for v in value)
    return None if ok else f"expected {column.type.value}, got {value!r}"


# The Python annotation each column type is declared with on RebalanceEvent.
_ANNOTATIONS = {
    ColumnType.STRING: "str",
    ColumnType.INT: "int",
    ColumnType.LONG: "int",
    ColumnType.BOOLEAN: "bool",
    ColumnType.STRING_LIST: "tuple[str, ...]",
}


def _check_table() -> None:
    """RebalanceEvent and EVENT_TABLE declare the same columns, in order, with matching types."""
    declared = [(f.name, str(f.type)) for f in fields(RebalanceEvent)]
    expected = [(c.name, _ANNOTATIONS[c.type] + (" | None" if c.nullable else "")) for c in EVENT_TABLE]
    if declared != expected:
        raise RuntimeError(f"RebalanceEvent {declared} does not match EVENT_TABLE {expected}")
    seen_optional = False
    for column in EVENT_TABLE:
        if column.optional and not column.nullable:
            raise RuntimeError(f"optional column {column.name} must be nullable")
        if seen_optional and not column.optional:
            raise RuntimeError(f"contract column {column.name} after an optional one")
        seen_optional = seen_optional or column.optional


_check_table()

OPTIONAL_EVENT_COLUMNS: tuple[str, ...] = tuple(c.name for c in EVENT_TABLE if c.optional)
"""Extension columns: nullable, may be absent from a file."""

EVENT_COLUMNS: tuple[str, ...] = tuple(c.name for c in EVENT_TABLE if not c.optional)
"""The contract columns of design section 4, in order."""


def write_jsonl(events: Iterable[RebalanceEvent], out: IO[str]) -> int:
    """Write events as JSON Lines; returns how many were written."""
    count = 0
    for event in events:
        out.write(json.dumps(event.to_json_dict(), separators=(",", ":")))
        out.write("\n")
        count += 1
    return count


def read_jsonl(path: Path) -> Iterator[RebalanceEvent]:
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                yield RebalanceEvent.from_json_dict(json.loads(line))
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}:{line_no}: {exc}") from exc


# ---- Parquet (pyarrow, an optional extra: imported only here) -------------------------------------


def arrow_schema() -> Any:
    """The pyarrow schema derived from EVENT_TABLE (every column, optional ones included)."""
    import pyarrow as pa

    types = {
        ColumnType.STRING: pa.string(),
        ColumnType.INT: pa.int32(),
        ColumnType.LONG: pa.int64(),
        ColumnType.BOOLEAN: pa.bool_(),
        ColumnType.STRING_LIST: pa.list_(pa.string()),
    }
    return pa.schema([pa.field(c.name, types[c.type], nullable=c.nullable) for c in EVENT_TABLE])


def write_parquet(events: Iterable[RebalanceEvent], path: Path) -> int:
    """One Parquet file with every EVENT_TABLE column, in order; returns how many rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [e.to_json_dict() for e in events]
    pq.write_table(pa.Table.from_pylist(rows, schema=arrow_schema()), path)
    return len(rows)


def read_parquet(path: Path) -> Iterator[RebalanceEvent]:
    """Events from a Parquet file (optional columns may be absent), checked like JSON Lines rows."""
    import pyarrow.parquet as pq

    for index, row in enumerate(pq.read_table(path).to_pylist()):
        try:
            yield RebalanceEvent.from_json_dict(row)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{path}: row {index}: {exc}") from exc
