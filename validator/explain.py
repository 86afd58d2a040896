"""Why a difference happened and what to try next, as Spark column expressions (no UDFs).

Each diff row gets a short `cause` and, where one is known, a `next_step`, from the row itself and
from the run summaries of the two runs it compares (`explain_diffs`). The rules follow what
static membership and the leader's skip-assignment change in Kafka's classic group protocol:

- KIP-345 (static membership): a second live member with the same `group.instance.id` fences the
  first (FENCED_INSTANCE_ID, Kafka `ClassicGroup`/`GroupMetadataManager.classicGroupJoinToStaticMember`);
  a dynamic member (no instance id) that leaves makes the group rebalance, a static one does not.
- KIP-814: a static leader rejoining with JoinGroup v9+ is told `skip_assignment` and keeps the
  current assignment; below v9 it assigns again.

Error codes are shown by name from kio's `ErrorCode` (the project's one source for them).
"""

from __future__ import annotations

from kio.schema.errors import ErrorCode
from pyspark.sql import Column
from pyspark.sql import functions as F

SKIP_ASSIGNMENT_API_VERSION = 9
"""JoinGroup v9 carries `SkipAssignment` (KIP-814)."""


def error_names(codes: Column) -> Column:
    """An `array<int>` of error codes -> `name(code),...` (e.g. `fenced_instance_id(82)`)."""
    names = F.create_map(*[x for e in ErrorCode for x in (F.lit(int(e.value)), F.lit(e.name))])
    return F.array_join(
        F.transform(
            codes,
            lambda c: F.concat(
                F.coalesce(names[c], F.lit("unknown")), F.lit("("), c.cast("string"), F.lit(")")
            ),
        ),
        ",",
    )


def _text(*parts: Column | str) -> Column:
    return F.concat(*[F.lit(p) if isinstance(p, str) else p for p in parts])


# One explanation rule: where `condition` holds, the row's cause (text, or a column built from the
# row) and the next step to try (None where none is known). The first rule that holds wins.
Rule = tuple[Column, Column | str, str | None]


# What happened to one member in one run only: (aspect, (cause, next step) where only the observed
# run saw it, (cause, next step) where only the expected run did); `{}` stands for the member.
_MEMBER_FACTS: tuple[tuple[str, tuple[str, str], tuple[str, str]], ...] = (
    (
        "fenced",
        (
            "fenced: two live members share group.instance.id {} (KIP-345)",
            "give every live member its own group.instance.id; stop the old process before its "
            "replacement joins",
        ),
        (
            "not fenced: {} was fenced in the expected run (KIP-345)",
            "check that the observed coordinator rejects a duplicate group.instance.id "
            "(static membership needs JoinGroup v5+, Kafka 2.3+)",
        ),
    ),
    (
        "expired",
        (
            "expired: {} missed its session timeout",
            "compare session.timeout.ms with the broker's group.min/max.session.timeout.ms and the "
            "heartbeat interval",
        ),
        (
            "not expired: {} expired in the expected run",
            "compare the session timeout bounds of the two coordinators",
        ),
    ),
)


def _member_fact_rules(aspect: Column, change: Column, subject: Column) -> list[Rule]:
    """Two rules per member fact (KIP-345's fencing, the session's expiry): seen only in the
    observed run (`unexpected`), then only in the expected one."""
    rules: list[Rule] = []
    for name, (seen, seen_step), (unseen, unseen_step) in _MEMBER_FACTS:
        rules.append(((aspect == name) & (change == "unexpected"), _around(seen, subject), seen_step))
        rules.append((aspect == name, _around(unseen, subject), unseen_step))
    return rules


def _around(template: str, subject: Column) -> Column:
    before, after = template.split("{}")
    return _text(before, subject, after)


def cause_and_next_step(
    *,
    noise: Column,
    aspect: Column,
    change: Column,
    subject: Column,
    ordinal: Column,
    expected_value: Column,
    observed_value: Column,
    observed_left_dynamic: Column,
    observed_join_versions: Column,
    expected_skip: Column,
    observed_skip: Column,
) -> tuple[Column, Column]:
    """(cause, next_step) for one difference; `next_step` is null where none is known."""
    extra = observed_value.cast("int") - expected_value.cast("int")
    no_skip = F.coalesce(expected_skip, F.lit(False)) & ~F.coalesce(observed_skip, F.lit(False))
    below_v9 = F.coalesce(F.array_max(observed_join_versions), F.lit(0)) < SKIP_ASSIGNMENT_API_VERSION
    left_dynamic = F.coalesce(observed_left_dynamic, F.array().cast("array<string>"))
    generation = _text("generation #", ordinal.cast("string"))
    rules: list[Rule] = [
        (
            noise,
            "unstable: a run disagrees with its own repeat on this fact (noise, ignored)",
            None,
        ),
        *_member_fact_rules(aspect, change, subject),
        (
            (aspect == "rebalance_count") & (extra > 0) & (F.size(left_dynamic) > 0),
            _text(
                "extra rebalance: member left without group.instance.id (",
                F.array_join(left_dynamic, ", "),
                ")",
            ),
            "set group.instance.id (static membership, KIP-345) so a restart does not rebalance",
        ),
        (
            (aspect == "rebalance_count") & (extra > 0),
            _text(extra.cast("string"), " extra rebalance(s)"),
            (
                "compare group.initial.rebalance.delay.ms and the session timeouts with the recorded "
                "broker's; the timeline shows the first divergent generation"
            ),
        ),
        (
            aspect == "rebalance_count",
            _text((-extra).cast("string"), " fewer rebalance(s)"),
            (
                "compare group.initial.rebalance.delay.ms with the recorded broker's (joins that "
                "arrive within the delay share one rebalance)"
            ),
        ),
        (
            aspect.isin("leader", "assignment") & no_skip & below_v9,
            "leader did not skip assignment: JoinGroup below v9 (KIP-814)",
            (
                "use a client and broker with JoinGroup v9+ (KIP-814), or expect a reassignment when "
                "the static leader rejoins"
            ),
        ),
        (
            aspect.isin("leader", "assignment") & no_skip,
            "leader did not skip assignment (KIP-814)",
            "check that the observed coordinator sends SkipAssignment to a rejoining static leader",
        ),
        (
            aspect == "leader",
            _text("another member led ", generation),
            "leadership follows join order: see the timeline",
        ),
        (
            (aspect == "assignment") & (change == "missing"),
            _text(subject, " has no assignment after ", generation),
            "check whether the member was still in the group at that generation",
        ),
        (
            (aspect == "assignment") & (change == "unexpected"),
            _text(subject, " is assigned after ", generation, " but not in the expected run"),
            "check which members joined that generation",
        ),
        (
            aspect == "assignment",
            _text(subject, " got other partitions after ", generation),
            "check the assignor (protocol) and the members of that generation",
        ),
        (
            aspect == "error",
            _text(
                subject,
                " saw other errors: ",
                F.coalesce(expected_value, F.lit("none")),
                " -> ",
                F.coalesce(observed_value, F.lit("none")),
            ),
            "the coordinators answered differently; the error names say why",
        ),
        *_migration_rules(aspect, subject, ordinal, expected_value, observed_value),
    ]
    cause: Column = F.lit(None).cast("string")
    next_step: Column = F.lit(None).cast("string")
    for condition, text, step in reversed(rules):
        cause = F.when(condition, _text(text)).otherwise(cause)
        next_step = F.when(condition, F.lit(step).cast("string")).otherwise(next_step)
    return cause, next_step


def _migration_rules(
    aspect: Column, subject: Column, ordinal: Column, expected: Column, observed: Column
) -> list[Rule]:
    """The protocol migration's facts per step (validator.migration): the group's type, who
    switched protocol, classic rejoins per member (the rebalance storm of eager assignors) and
    partitions moved. Kafka's consumer_protocol_migration_test.py rolls members the same way."""
    step = _text("step ", ordinal.cast("string"))
    more = F.coalesce(observed.cast("int"), F.lit(0)) - F.coalesce(expected.cast("int"), F.lit(0))
    shown = _text(F.coalesce(expected, F.lit("none")), " -> ", F.coalesce(observed, F.lit("none")))
    return [
        (
            aspect == "group_type",
            _text("the group's type after ", step, ": ", shown),
            (
                "compare group.consumer.migration.policy and the broker build with the scenario's "
                "(an online conversion needs bidirectional, or upgrade / downgrade for that direction; "
                "a custom assignor's userData refuses it)"
            ),
        ),
        (
            aspect == "protocol_switch",
            _text("other members switched protocol at ", step, ": ", shown),
            (
                "a member refused on its new protocol does not switch: see the errors and the "
                "migration timeline"
            ),
        ),
        (
            (aspect == "rejoins") & (more > 0),
            _text(
                subject, " rejoined ", more.cast("string"), " more time(s) in ", step, " (classic JoinGroup)"
            ),
            (
                "eager assignors make every classic member rejoin at each step: cooperative-sticky or "
                "static members (group.instance.id) rejoin less"
            ),
        ),
        (
            aspect == "rejoins",
            _text(subject, " rejoined ", (-more).cast("string"), " fewer time(s) in ", step, ": ", shown),
            "compare the members' session timeouts and the broker's rebalance delay",
        ),
        (
            aspect == "partitions_moved",
            _text("partitions moved in ", step, ": ", shown),
            "compare the assignors (server_assignor, classic assignors) and who was in the group then",
        ),
    ]
