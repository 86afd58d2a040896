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


def _keyed(key: tuple[str, ...], fields: list[StructField]) -> StructType:
    """An output table whose first columns are `key` (strings, in that order), then `fields`."""
    return StructType([*(StructField(name, StringType(), True) for name in key), *fields])


def _per_member(name: str, fields: list[StructField]) -> StructField:
    """A column holding a list of per-member values: `member_key`, then `fields`."""
    member = StructType([StructField("member_key", StringType(), True), *fields])
    return StructField(name, ArrayType(member, True), True)


# ---- output tables -------------------------------------------------------------------------------

OBSERVED_REBALANCES_SCHEMA = _keyed(
    RUN_KEY,
    [
        StructField("ordinal", IntegerType(), True),
        StructField("generation_id", IntegerType(), True),
        StructField("ts_ms", LongType(), True),
        StructField("leader", StringType(), True),
        StructField("members", LongType(), True),
        StructField("protocol_name", StringType(), True),
        StructField("partitions_moved", IntegerType(), True),
        StructField("pause_ms", LongType(), True),
    ],
)
"""One row per completed generation; `ordinal` counts completed generations 1, 2, ... per run.
`partitions_moved`: partitions that changed owner at this generation; `pause_ms`: from the
rebalance's start to this completion, when (eager protocol) no member holds partitions
(validator.churn)."""

RUN_SUMMARY_SCHEMA = _keyed(
    RUN_KEY,
    [
        StructField("rebalance_count", IntegerType(), True),
        StructField("rebalances_started", LongType(), True),
        StructField("members", LongType(), True),
        StructField("fenced", ArrayType(StringType(), True), True),
        StructField("expired", ArrayType(StringType(), True), True),
        StructField("left", ArrayType(StringType(), True), True),
        StructField("error_codes", ArrayType(IntegerType(), True), True),
        StructField("last_ts_ms", LongType(), True),
        StructField("not_run_detail", StringType(), True),
        StructField("join_api_versions", ArrayType(IntegerType(), True), True),
        StructField("left_without_instance_id", ArrayType(StringType(), True), True),
        StructField("skip_assignment_seen", BooleanType(), True),
        StructField("partitions_moved", IntegerType(), True),
        _per_member(
            "member_churn",
            [StructField("moved", IntegerType(), True), StructField("unassigned_ms", LongType(), True)],
        ),
    ],
)
"""One row per run; `not_run_detail` is set (and nothing else happened) when the run could not be
carried out. The last three columns are context for explaining differences (validator.explain)."""

# What a fact is about: a difference compares two runs' values of one fact.
_FACT_FIELDS = [
    StructField("aspect", StringType(), True),
    StructField("subject", StringType(), True),
    StructField("ordinal", IntegerType(), True),
]

FACTS_SCHEMA = _keyed(RUN_KEY, [*_FACT_FIELDS, StructField("value", StringType(), True)])
"""What must not drift, one comparable fact per row. `ordinal` 0 means "the whole run"."""

PAIRS_SCHEMA = _keyed(
    COMPARISON_KEY,
    [
        StructField("role", StringType(), True),
    ],
)

# What one difference says (the CI outputs list these per case), then how it is explained.
_DIFF_FIELDS = [
    *_FACT_FIELDS,
    StructField("expected_value", StringType(), True),
    StructField("observed_value", StringType(), True),
    StructField("change", StringType(), True),
    StructField("severity", IntegerType(), True),
]
DIFF_COLUMNS: tuple[str, ...] = tuple(f.name for f in _DIFF_FIELDS)

REBALANCE_DIFF_SCHEMA = _keyed(
    COMPARISON_KEY,
    [
        *_DIFF_FIELDS,
        StructField("is_noise", BooleanType(), True),
        StructField("cause", StringType(), True),
        StructField("next_step", StringType(), True),
    ],
)

SESSION_VERDICT_SCHEMA = _keyed(
    COMPARISON_KEY,
    [
        StructField("status", StringType(), True),
        StructField("diffs", LongType(), True),
        StructField("noise_diffs", LongType(), True),
        StructField("expected_rebalances", IntegerType(), True),
        StructField("observed_rebalances", IntegerType(), True),
        StructField("rebalance_count_delta", IntegerType(), True),
        StructField("first_divergent_ordinal", IntegerType(), True),
        StructField("members_changed", ArrayType(StringType(), True), True),
        StructField("unexpected_fenced", ArrayType(StringType(), True), True),
        StructField("unexpected_expired", ArrayType(StringType(), True), True),
        StructField("error_changes", ArrayType(StringType(), True), True),
        StructField("worst_severity", IntegerType(), True),
        StructField("worst_aspect", StringType(), True),
        StructField("not_run_detail", StringType(), True),
        StructField("explanation", StringType(), True),
        StructField("expected_partitions_moved", IntegerType(), True),
        StructField("observed_partitions_moved", IntegerType(), True),
    ],
)

COMPATIBILITY_MATRIX_SCHEMA = StructType(
    [
        StructField("scenario", StringType(), True),
        StructField("client", StringType(), True),
        StructField("expected_run", StringType(), True),
        StructField("observed_run", StringType(), True),
        StructField("broker_version", StringType(), True),
        StructField("sessions", LongType(), True),
        StructField("passed", LongType(), True),
        StructField("differs", LongType(), True),
        StructField("failed", LongType(), True),
        StructField("not_run", LongType(), True),
        StructField("diffs", LongType(), True),
        StructField("noise_diffs", LongType(), True),
        StructField("worst_severity", IntegerType(), True),
        StructField("worst_aspect", StringType(), True),
        StructField("worst_session", StringType(), True),
        StructField("worst_group", StringType(), True),
        StructField("expected_partitions_moved", LongType(), True),
        StructField("partitions_moved", LongType(), True),
        StructField("protocol", StringType(), True),
    ]
)
"""`protocol` is the matrix's protocol axis: what the group's members spoke in the expected run
(validator.migration.protocol_path: `classic`, `consumer`, `classic -> consumer`, ...)."""

# ---- the protocol migration view (validator.migration) -------------------------------------------

MIGRATION_STEPS_SCHEMA = _keyed(
    RUN_KEY,
    [
        StructField("step", IntegerType(), True),
        StructField("start_ms", LongType(), True),
        StructField("end_ms", LongType(), True),
        StructField("switched", ArrayType(StringType(), True), True),
        StructField("group_type", StringType(), True),
        StructField("conversions", ArrayType(StringType(), True), True),
        StructField("partitions_moved", IntegerType(), True),
        _per_member("rejoins", [StructField("rejoins", IntegerType(), True)]),
        _per_member("unassigned", [StructField("unassigned_ms", LongType(), True)]),
    ],
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
    [
        StructField("lane", StringType(), True),
        StructField("state", StringType(), True),
        StructField("protocol", StringType(), True),
        StructField("start_ms", LongType(), True),
        StructField("end_ms", LongType(), True),
    ],
)
"""The migration timeline plot's segments: per member (`lane` = member_key) the stretches it was in
the group `holding` partitions or `empty` (holding none), with the protocol it spoke; per run one
`lane` "" of `group_type` stretches whose `protocol` is the group's type."""

GROUP_PROTOCOL_SCHEMA = _keyed(
    RUN_KEY,
    [
        StructField("protocol", StringType(), True),
    ],
)
"""Per run: the protocols its members spoke first and last (`classic -> consumer`)."""
