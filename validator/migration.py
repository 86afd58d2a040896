"""The classic <-> consumer protocol migration, step by step: pure `DataFrame -> DataFrame` stages.

Events format 2 (replay/events.py) says which protocol each member spoke (`protocol`), the group's
type as the clients saw it (`group_type`, `group_converted`) and the partitions each member gave
up or was given (`assignment_revoked` / `assignment_received`). From those alone (the validator
does not know a scenario's timeline, and a recorded migration has none) this module derives:

- steps: step 0 is the group before any member switched protocol; step k begins where the k-th
  switch began: the switching member's LeaveGroup (`member_left`) since its last join, else its
  first exchange on the new protocol (a static member that stopped without leaving). Switches
  that begin at the same moment (an offline migration: all down, then all up) are one step. This
  is replay's step k-1 of a rolling restart (replay/migration.py counts bounces from 0).
- per step: the members that switched, the group's type at its end, its conversions, the
  partitions received (replay's `partitions_moved_per_step`), each classic member's successful
  JoinGroups, the switching member left out (replay's `rejoins_per_step`: the rebalance-storm
  risk of eager assignors), and each member's time in the group without a partition;
- the timeline plot's segments (per member: holding / empty, with its protocol; the group's
  type), and the protocol path of each run (`classic -> consumer`), the matrix's protocol axis;
- the facts compared across runs like the others (`migration_facts`): per step the group type,
  who switched, partitions moved, and classic rejoins per member. Times are shown, never
  compared (as `ts_ms` is not).

Time without a partition: a member holds what it received minus what it revoked; a classic member
on an eager assignor (anything but cooperative-sticky, Kafka's ConsumerPartitionAssignor default
RebalanceProtocol.EAGER) also holds nothing from its JoinGroup answer to its SyncGroup answer, as
ConsumerCoordinator.onJoinPrepare revokes everything before an eager rejoin. Only time in the
group counts (from a `member_joined` to a `member_left`, `member_expired` or `member_fenced`).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from replay.events import EventName
from validator.schemas import GROUP_KEY, RUN_KEY

CLASSIC, CONSUMER = "classic", "consumer"
COOPERATIVE_ASSIGNORS: tuple[str, ...] = ("cooperative-sticky",)
"""Classic assignors whose members keep their partitions while they rejoin (KIP-429)."""

HOLDING, EMPTY, OUT = "holding", "empty", "out"
GROUP_LANE, GROUP_TYPE_STATE = "", "group_type"

MIGRATION_ASPECTS: dict[str, int] = {
    "partitions_moved": 1,
    "protocol_switch": 2,
    "rejoins": 3,
    "group_type": 4,
}
"""The migration facts' aspects and their severity (validator.transforms.ASPECT_SEVERITY)."""

_LEFT = (EventName.MEMBER_LEFT.value, EventName.MEMBER_EXPIRED.value, EventName.MEMBER_FENCED.value)


def _is(name: EventName) -> Column:
    return F.col("event") == name.value


def consumer_groups(events: DataFrame) -> DataFrame:
    """(session, scenario, group) keys where some run saw the consumer protocol: the groups the
    migration view is for (every run of them, classic-only ones included)."""
    consumer = (F.col("protocol") == CONSUMER) | (F.col("group_type") == CONSUMER)
    return events.where(consumer).select(*GROUP_KEY).distinct()


def member_rows(events: DataFrame) -> DataFrame:
    """Each event of a member with what it was after it: `state` (out / empty / holding), whether
    it switched protocol there (`switch`) and where that switch began (`boundary_ms`), and when
    the member's next event came (`next_ts_ms`, null for its last)."""
    rows = events.where(F.col("event") != EventName.NOT_RUN.value).select(
        *RUN_KEY,
        "seq",
        "ts_ms",
        "event",
        "member_key",
        F.coalesce("protocol", F.lit(CLASSIC)).alias("protocol"),
        "group_type",
        F.coalesce("assignment", F.array().cast("array<string>")).alias("assignment"),
        "detail",
        "protocol_name",
    )
    member = Window.partitionBy(*RUN_KEY, "member_key").orderBy("seq")
    before = member.rowsBetween(Window.unboundedPreceding, -1)
    upto = member.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    size = F.size("assignment")
    held = F.sum(
        F.when(_is(EventName.ASSIGNMENT_RECEIVED), size).when(_is(EventName.ASSIGNMENT_REVOKED), -size)
    )
    in_group = F.last(
        F.when(_is(EventName.MEMBER_JOINED), F.lit(True)).when(F.col("event").isin(*_LEFT), F.lit(False)),
        ignorenulls=True,
    )
    eager_join = (
        _is(EventName.MEMBER_JOINED)
        & (F.col("protocol") == CLASSIC)
        & ~F.coalesce(F.col("protocol_name").isin(*COOPERATIVE_ASSIGNORS), F.lit(False))
    )
    synced = F.col("event").isin(
        EventName.GENERATION_COMPLETED.value, EventName.ASSIGNMENT_RECEIVED.value, *_LEFT
    )
    waiting = F.last(F.when(eager_join, F.lit(True)).when(synced, F.lit(False)), ignorenulls=True)
    last_left = F.last(F.when(_is(EventName.MEMBER_LEFT), F.struct("seq", "ts_ms")), ignorenulls=True)
    last_join = F.last(F.when(_is(EventName.MEMBER_JOINED), F.col("seq")), ignorenulls=True)
    windowed = rows.select(
        "*",
        F.lag("protocol").over(member).alias("_previous"),
        F.coalesce(held.over(upto), F.lit(0)).alias("_held"),
        F.coalesce(in_group.over(upto), F.lit(False)).alias("_in"),
        F.coalesce(waiting.over(upto), F.lit(False)).alias("_waiting"),
        last_left.over(before).alias("_left"),
        last_join.over(before).alias("_joined"),
        F.lead("ts_ms").over(member).alias("next_ts_ms"),
    )
    switch = F.col("_previous").isNotNull() & (F.col("protocol") != F.col("_previous"))
    left_since_join = F.col("_left").isNotNull() & (
        F.col("_joined").isNull() | (F.col("_left.seq") > F.col("_joined"))
    )
    state = (
        F.when(~F.col("_in"), F.lit(OUT))
        .when((F.col("_held") <= 0) | F.col("_waiting"), F.lit(EMPTY))
        .otherwise(F.lit(HOLDING))
    )
    return windowed.select(
        *rows.columns,
        switch.alias("switch"),
        F.when(switch, F.when(left_since_join, F.col("_left.ts_ms")).otherwise(F.col("ts_ms"))).alias(
            "boundary_ms"
        ),
        state.alias("state"),
        "next_ts_ms",
    )


def _step_of(bounds: Column, ts: Column) -> Column:
    """The step a moment falls in: how many step boundaries are at or before it."""
    return F.size(F.filter(bounds, lambda b: b <= ts)).cast("int")


def with_steps(members: DataFrame) -> DataFrame:
    """`member_rows` plus each run's sorted step boundaries (`bounds`), its first and last
    moment (`run_start_ms`, `run_end_ms`) and each row's `step` (switch rows: `switch_step`, the
    step their switch began)."""
    runs = members.groupBy(*RUN_KEY).agg(
        F.sort_array(F.collect_set("boundary_ms")).alias("bounds"),
        F.min("ts_ms").alias("run_start_ms"),
        F.max("ts_ms").alias("run_end_ms"),
    )
    joined = members.join(runs, list(RUN_KEY))
    return joined.select(
        "*",
        _step_of(F.col("bounds"), F.col("ts_ms")).alias("step"),
        F.when(F.col("switch"), _step_of(F.col("bounds"), F.col("boundary_ms"))).alias("switch_step"),
    )


def _step_frame(stepped: DataFrame) -> DataFrame:
    """Every step of every run with its start and end (also steps in which nothing happened)."""
    per_run = stepped.groupBy(*RUN_KEY).agg(
        F.first("bounds").alias("bounds"),
        F.min("run_start_ms").alias("run_start_ms"),
        F.max("run_end_ms").alias("run_end_ms"),
    )
    starts = F.concat(F.array(F.col("run_start_ms")), F.col("bounds"))
    ends = F.concat(F.col("bounds"), F.array(F.col("run_end_ms")))
    spans = F.transform(
        F.sequence(F.lit(0), F.size("bounds")),
        lambda i: F.struct(
            i.alias("step"),
            F.element_at(starts, i + 1).alias("start_ms"),
            F.element_at(ends, i + 1).alias("end_ms"),
        ),
    )
    return per_run.select(*RUN_KEY, F.explode(spans).alias("s")).select(
        *RUN_KEY,
        F.col("s.step").cast("int").alias("step"),
        F.col("s.start_ms").cast("long").alias("start_ms"),
        F.col("s.end_ms").cast("long").alias("end_ms"),
    )


def segments(stepped: DataFrame) -> DataFrame:
    """The timeline's segments (MIGRATION_TIMELINE_SCHEMA): consecutive events of a member with
    the same state and protocol merged into one stretch, up to the member's next event (its last
    one: the run's end); `out` stretches left out. Plus the group's type per run (lane "")."""
    member = Window.partitionBy(*RUN_KEY, "member_key").orderBy("seq")
    changed = (F.col("state") != F.lag("state").over(member)) | (
        F.col("protocol") != F.lag("protocol").over(member)
    )
    # a state that lasted no time (a SyncGroup answered with its JoinGroup) splits no stretch
    lasting = stepped.where(F.coalesce("next_ts_ms", "run_end_ms") > F.col("ts_ms"))
    marked = lasting.select(
        *RUN_KEY,
        "member_key",
        "seq",
        "ts_ms",
        "state",
        "protocol",
        F.coalesce("next_ts_ms", "run_end_ms").alias("until_ms"),
        F.coalesce(changed, F.lit(True)).cast("int").alias("_changed"),
    )
    blocks = marked.select(
        "*", F.sum("_changed").over(member.rowsBetween(Window.unboundedPreceding, 0)).alias("_block")
    )
    members = (
        blocks.groupBy(*RUN_KEY, "member_key", "_block")
        .agg(
            F.first("state").alias("state"),
            F.first("protocol").alias("protocol"),
            F.min("ts_ms").alias("start_ms"),
            F.max("until_ms").alias("end_ms"),
        )
        .where((F.col("state") != OUT) & (F.col("end_ms") > F.col("start_ms")))
        .select(*RUN_KEY, F.col("member_key").alias("lane"), "state", "protocol", "start_ms", "end_ms")
    )
    return members.unionByName(_group_type_segments(stepped)).select(
        *RUN_KEY,
        "lane",
        "state",
        "protocol",
        F.col("start_ms").cast("long").alias("start_ms"),
        F.col("end_ms").cast("long").alias("end_ms"),
    )


def _group_type_segments(stepped: DataFrame) -> DataFrame:
    """The group's type over a run: from each event that shows a new one to the next."""
    run = Window.partitionBy(*RUN_KEY).orderBy("seq")
    typed = stepped.select(
        *RUN_KEY,
        "seq",
        "ts_ms",
        "run_end_ms",
        F.last("group_type", ignorenulls=True).over(run.rowsBetween(Window.unboundedPreceding, 0)).alias("t"),
    ).where(F.col("t").isNotNull())
    changes = typed.select(
        "*", F.coalesce(F.col("t") != F.lag("t").over(run), F.lit(True)).alias("_new")
    ).where("_new")
    return changes.select(
        *RUN_KEY,
        F.lit(GROUP_LANE).alias("lane"),
        F.lit(GROUP_TYPE_STATE).alias("state"),
        F.col("t").alias("protocol"),
        F.col("ts_ms").alias("start_ms"),
        F.coalesce(F.lead("ts_ms").over(run), F.col("run_end_ms")).alias("end_ms"),
    )


def _unassigned(timeline: DataFrame, steps: DataFrame) -> DataFrame:
    """Per run, step and member: the time its `empty` stretches overlap the step."""
    empty = timeline.where(F.col("state") == EMPTY).select(
        *RUN_KEY, F.col("lane").alias("member_key"), F.col("start_ms").alias("a"), F.col("end_ms").alias("b")
    )
    overlap = F.least("b", "end_ms") - F.greatest("a", "start_ms")
    joined = empty.join(steps, list(RUN_KEY)).where(overlap > 0)
    per_member = joined.groupBy(*RUN_KEY, "step", "member_key").agg(F.sum(overlap).alias("unassigned_ms"))
    return per_member.groupBy(*RUN_KEY, "step").agg(
        F.sort_array(
            F.collect_list(F.struct("member_key", F.col("unassigned_ms").cast("long").alias("unassigned_ms")))
        ).alias("unassigned")
    )


def migration_steps(stepped: DataFrame, timeline: DataFrame) -> DataFrame:
    """One row per run and step (MIGRATION_STEPS_SCHEMA), from `with_steps` rows and `segments`."""
    steps = _step_frame(stepped)
    typed = F.when(F.col("group_type").isNotNull(), F.col("seq"))
    per_step = stepped.groupBy(*RUN_KEY, "step").agg(
        F.max_by("group_type", typed).alias("last_type"),
        F.sort_array(F.collect_list(F.when(_is(EventName.GROUP_CONVERTED), F.struct("seq", "detail")))).alias(
            "_conversions"
        ),
        F.sum(F.when(_is(EventName.ASSIGNMENT_RECEIVED), F.size("assignment")).otherwise(0)).alias("moved"),
    )
    switched = (
        stepped.where("switch")
        .groupBy(*RUN_KEY, F.col("switch_step").alias("step"))
        .agg(F.sort_array(F.collect_set(F.concat_ws(":", "member_key", "protocol"))).alias("switched"))
    )
    joins = stepped.where(_is(EventName.MEMBER_JOINED) & (F.col("protocol") == CLASSIC))
    per_member = joins.groupBy(*RUN_KEY, "step", "member_key").agg(F.count("*").cast("int").alias("rejoins"))
    rejoins = per_member.groupBy(*RUN_KEY, "step").agg(
        F.sort_array(F.collect_list(F.struct("member_key", "rejoins"))).alias("_rejoins")
    )
    key = [*RUN_KEY, "step"]
    merged = (
        steps.join(per_step, key, "left")
        .join(switched, key, "left")
        .join(rejoins, key, "left")
        .join(_unassigned(timeline, steps), key, "left")
    )
    run_steps = Window.partitionBy(*RUN_KEY).orderBy("step").rowsBetween(Window.unboundedPreceding, 0)
    switched_now = F.coalesce("switched", F.array().cast("array<string>"))
    not_switching = F.filter(
        F.coalesce("_rejoins", F.array().cast("array<struct<member_key:string,rejoins:int>>")),
        lambda r: ~F.exists(switched_now, lambda s: s.startswith(F.concat(r["member_key"], F.lit(":")))),
    )
    return merged.select(
        *RUN_KEY,
        "step",
        "start_ms",
        "end_ms",
        switched_now.alias("switched"),
        F.last("last_type", ignorenulls=True).over(run_steps).alias("group_type"),
        F.transform(F.coalesce("_conversions", F.array()), lambda c: c["detail"]).alias("conversions"),
        F.coalesce("moved", F.lit(0)).cast("int").alias("partitions_moved"),
        not_switching.alias("rejoins"),
        F.coalesce(
            "unassigned", F.array().cast("array<struct<member_key:string,unassigned_ms:bigint>>")
        ).alias("unassigned"),
    )


def protocol_paths(stepped: DataFrame) -> DataFrame:
    """Per run (GROUP_PROTOCOL_SCHEMA): the protocols its members spoke first, and, when other,
    last: `classic`, `consumer`, `classic -> consumer`, `classic+consumer` (a mixed group),
    `classic -> classic+consumer` (a member that switched was refused and stayed so)."""
    per_member = stepped.groupBy(*RUN_KEY, "member_key").agg(
        F.min_by("protocol", "seq").alias("first"), F.max_by("protocol", "seq").alias("last")
    )
    per_run = per_member.groupBy(*RUN_KEY).agg(
        F.array_join(F.sort_array(F.collect_set("first")), "+").alias("first"),
        F.array_join(F.sort_array(F.collect_set("last")), "+").alias("last"),
    )
    path = F.when(F.col("first") == F.col("last"), F.col("first")).otherwise(
        F.concat_ws(" -> ", "first", "last")
    )
    return per_run.select(*RUN_KEY, path.alias("protocol"))


def _fact(aspect: str, subject: Column | str, ordinal: Column, value: Column) -> Column:
    return F.struct(
        F.lit(aspect).alias("aspect"),
        (subject if isinstance(subject, Column) else F.lit(subject)).alias("subject"),
        ordinal.cast("int").alias("ordinal"),
        value.cast("string").alias("value"),
    )


def migration_facts(steps: DataFrame) -> DataFrame:
    """The migration facts of each run (FACTS_SCHEMA), `ordinal` the step: the group's type at the
    step's end, who switched (steps 1+), partitions moved, and each classic member's rejoins
    (only members that rejoined: one that did not has no fact, so an unrelated event cannot
    turn a 0 into a difference)."""
    step = F.col("step")
    facts = F.concat(
        F.array(
            _fact("group_type", "", step, F.coalesce("group_type", F.lit("unknown"))),
            _fact("partitions_moved", "", step, F.col("partitions_moved")),
        ),
        F.when(
            step > 0, F.array(_fact("protocol_switch", "", step, F.array_join("switched", ",")))
        ).otherwise(F.array().cast("array<struct<aspect:string,subject:string,ordinal:int,value:string>>")),
        F.transform("rejoins", lambda r: _fact("rejoins", r["member_key"], step, r["rejoins"])),
    )
    return steps.select(*RUN_KEY, F.explode(facts).alias("f")).select(*RUN_KEY, "f.*")


def facts_hashes(facts: DataFrame) -> DataFrame:
    """Per run, one hash of its migration facts (equal facts, equal hashes)."""
    entry = F.struct("aspect", "subject", "ordinal", "value")
    return facts.groupBy(*RUN_KEY).agg(
        F.xxhash64(F.sort_array(F.collect_list(entry))).alias("migration_hash")
    )


def with_migration_hash(runs: DataFrame, hashes: DataFrame) -> DataFrame:
    """`runs` (transforms.per_run) whose `facts_hash` also covers the run's migration facts; runs
    without any keep theirs, so groups that never saw the consumer protocol compare as before."""
    joined = runs.join(hashes, list(RUN_KEY), "left")
    combined = F.when(F.col("migration_hash").isNull(), F.col("facts_hash")).otherwise(
        F.xxhash64("facts_hash", "migration_hash")
    )
    return joined.select(*[combined.alias(c) if c == "facts_hash" else F.col(c) for c in runs.columns])


def group_protocols(paths: DataFrame, expected: Column) -> DataFrame:
    """Per (session, scenario, group): the protocol path of the expected run (`expected`, a
    column of the scenario), else the first observed run's: the matrix's protocol axis."""
    with_expected = paths.select("*", expected.alias("_expected"))
    return with_expected.groupBy(*GROUP_KEY).agg(
        F.coalesce(
            F.max(F.when(F.col("run") == F.col("_expected"), F.col("protocol"))),
            F.min_by("protocol", "run"),
        ).alias("protocol")
    )
