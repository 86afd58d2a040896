"""Explicit Spark schemas: the events contract (design section 4) and the validator's output tables.

Schemas are never inferred: an inferred schema silently turns a typo into a new column and a
number into a string. The event schema is derived from `replay.events.EVENT_TABLE`, the one
declaration of the contract (names, order, types, nullability, optional columns).
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from replay.events import EVENT_TABLE, ColumnType, EventColumn, EventName

CORRUPT_RECORD_COLUMN = "_corrupt_record"
"""Where Spark's PERMISSIVE JSON reader keeps a line it could not parse against the schema."""

EVENT_NAMES: tuple[str, ...] = tuple(name.value for name in EventName)

SPARK_TYPES: dict[ColumnType, DataType] = {
    ColumnType.STRING: StringType(),
    ColumnType.INT: IntegerType(),
    ColumnType.LONG: LongType(),
    ColumnType.BOOLEAN: BooleanType(),
    ColumnType.STRING_LIST: ArrayType(StringType(), True),
}


def _spark_field(column: EventColumn) -> StructField:
    return StructField(column.name, SPARK_TYPES[column.type], column.nullable)


# The contract columns, in order, with the contract's nullability (`?` in design section 4).
CONTRACT_EVENT_FIELDS: tuple[StructField, ...] = tuple(_spark_field(c) for c in EVENT_TABLE if not c.optional)

# Optional extension columns: nullable, absent from older files (read as null).
# `client_software` is the member's client as it named itself in ApiVersions v3+
# (ClientSoftwareName/ClientSoftwareVersion, e.g. "librdkafka/2.6.1"); the compatibility matrix uses
# it as the client dimension and falls back to the JoinGroup versions when it is null. `detail` is
# the reason of a `not_run` row (AGREED #1), shown as the verdict's explanation.
OPTIONAL_EVENT_FIELDS: tuple[StructField, ...] = tuple(_spark_field(c) for c in EVENT_TABLE if c.optional)

EVENT_SCHEMA = StructType([*CONTRACT_EVENT_FIELDS, *OPTIONAL_EVENT_FIELDS])
"""The events table as the contract describes it (nullability as documented)."""

REQUIRED_EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in CONTRACT_EVENT_FIELDS if not f.nullable)

# File sources read every column as nullable; a null in a required column is a bad row we count.
READ_SCHEMA = StructType([StructField(f.name, f.dataType, True) for f in EVENT_SCHEMA.fields])
JSON_READ_SCHEMA = StructType([*READ_SCHEMA.fields, StructField(CORRUPT_RECORD_COLUMN, StringType(), True)])

RUN_KEY: tuple[str, ...] = ("session_id", "scenario", "run", "group_id")
GROUP_KEY: tuple[str, ...] = ("session_id", "scenario", "group_id")
COMPARISON_KEY: tuple[str, ...] = ("session_id", "scenario", "group_id", "expected_run", "observed_run")
"""What a row of a comparison table is about: one group's observed run against its expected run."""


# The output tables' column types. Every output column is nullable (a file source reads each
# column as nullable anyway), so a table is declared as `name=TYPE` pairs, in column order.
STRING, INT, LONG, BOOLEAN = StringType(), IntegerType(), LongType(), BooleanType()
STRINGS, INTS = ArrayType(StringType(), True), ArrayType(IntegerType(), True)


def _columns(**types: DataType) -> list[StructField]:
    return [StructField(name, data_type, True) for name, data_type in types.items()]


def _keyed(key: tuple[str, ...], **types: DataType) -> StructType:
    """An output table whose first columns are `key` (strings, in that order), then `types`."""
    return StructType(_columns(**dict.fromkeys(key, STRING), **types))


def _per_member(**types: DataType) -> ArrayType:
    """A list of per-member values: `member_key`, then `types`."""
    return ArrayType(StructType(_columns(member_key=STRING, **types)), True)


# ---- output tables -------------------------------------------------------------------------------

OBSERVED_REBALANCES_SCHEMA = _keyed(
    RUN_KEY,
    ordinal=INT,
    generation_id=INT,
    ts_ms=LONG,
    leader=STRING,
    members=LONG,
    protocol_name=STRING,
    partitions_moved=INT,
    pause_ms=LONG,
)
"""One row per completed generation; `ordinal` counts completed generations 1, 2, ... per run.
`partitions_moved`: partitions that changed owner at this generation; `pause_ms`: from the
rebalance's start to this completion, when (eager protocol) no member holds partitions
(validator.churn)."""

RUN_SUMMARY_SCHEMA = _keyed(
    RUN_KEY,
    rebalance_count=INT,
    rebalances_started=LONG,
    members=LONG,
    fenced=STRINGS,
    expired=STRINGS,
    left=STRINGS,
    error_codes=INTS,
    last_ts_ms=LONG,
    not_run_detail=STRING,
    join_api_versions=INTS,
    left_without_instance_id=STRINGS,
    skip_assignment_seen=BOOLEAN,
    partitions_moved=INT,
    member_churn=_per_member(moved=INT, unassigned_ms=LONG),
)
"""One row per run; `not_run_detail` is set (and nothing else happened) when the run could not be
carried out. The last three columns are context for explaining differences (validator.explain)."""

# What a fact is about: a difference compares two runs' values of one fact.
_FACT_TYPES: dict[str, DataType] = {"aspect": STRING, "subject": STRING, "ordinal": INT}

FACTS_SCHEMA = _keyed(RUN_KEY, **_FACT_TYPES, value=STRING)
"""What must not drift, one comparable fact per row. `ordinal` 0 means "the whole run"."""

PAIRS_SCHEMA = _keyed(COMPARISON_KEY, role=STRING)

# What one difference says (the CI outputs list these per case), then how it is explained.
_DIFF_TYPES: dict[str, DataType] = {
    **_FACT_TYPES,
    "expected_value": STRING,
    "observed_value": STRING,
    "change": STRING,
    "severity": INT,
}
DIFF_COLUMNS: tuple[str, ...] = tuple(_DIFF_TYPES)

REBALANCE_DIFF_SCHEMA = _keyed(
    COMPARISON_KEY,
    **_DIFF_TYPES,
    is_noise=BOOLEAN,
    cause=STRING,
    next_step=STRING,
)

SESSION_VERDICT_SCHEMA = _keyed(
    COMPARISON_KEY,
    status=STRING,
    diffs=LONG,
    noise_diffs=LONG,
    expected_rebalances=INT,
    observed_rebalances=INT,
    rebalance_count_delta=INT,
    first_divergent_ordinal=INT,
    members_changed=STRINGS,
    unexpected_fenced=STRINGS,
    unexpected_expired=STRINGS,
    error_changes=STRINGS,
    worst_severity=INT,
    worst_aspect=STRING,
    not_run_detail=STRING,
    explanation=STRING,
    expected_partitions_moved=INT,
    observed_partitions_moved=INT,
)

COMPATIBILITY_MATRIX_SCHEMA = StructType(
    _columns(
        scenario=STRING,
        client=STRING,
        expected_run=STRING,
        observed_run=STRING,
        broker_version=STRING,
        sessions=LONG,
        passed=LONG,
        differs=LONG,
        failed=LONG,
        not_run=LONG,
        diffs=LONG,
        noise_diffs=LONG,
        worst_severity=INT,
        worst_aspect=STRING,
        worst_session=STRING,
        worst_group=STRING,
        expected_partitions_moved=LONG,
        partitions_moved=LONG,
        protocol=STRING,
    )
)
"""`protocol` is the matrix's protocol axis: what the group's members spoke in the expected run
(validator.migration.protocol_path: `classic`, `consumer`, `classic -> consumer`, ...)."""

# ---- the protocol migration view (validator.migration) -------------------------------------------

MIGRATION_STEPS_SCHEMA = _keyed(
    RUN_KEY,
    step=INT,
    start_ms=LONG,
    end_ms=LONG,
    switched=STRINGS,
    group_type=STRING,
    conversions=STRINGS,
    partitions_moved=INT,
    rejoins=_per_member(rejoins=INT),
    unassigned=_per_member(unassigned_ms=LONG),
)
"""One row per run and migration step. Step 0 is the group before any member switched protocol;
step k begins where the k-th switch began (the member's LeaveGroup before it, else its first
request on the new protocol). `switched`: `member_key:protocol` of the members that switched at
it; `group_type`: the group's type at the step's end; `conversions`: `group_converted` details;
`partitions_moved`: partitions received (assignment_received) in the step; `rejoins`: successful
classic JoinGroups per classic member (those that switched at the step left out; members with
none not listed); `unassigned`: per member, time in the group holding no partition."""

MIGRATION_TIMELINE_SCHEMA = _keyed(
    RUN_KEY,
    lane=STRING,
    state=STRING,
    protocol=STRING,
    start_ms=LONG,
    end_ms=LONG,
)
"""The migration timeline plot's segments: per member (`lane` = member_key) the stretches it was in
the group `holding` partitions or `empty` (holding none), with the protocol it spoke; per run one
`lane` "" of `group_type` stretches whose `protocol` is the group's type."""

GROUP_PROTOCOL_SCHEMA = _keyed(RUN_KEY, protocol=STRING)
"""Per run: the protocols its members spoke first and last (`classic -> consumer`)."""
