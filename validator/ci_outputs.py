"""`validate --junit-xml FILE --summary-json FILE` (issue 15): every comparison as a CI test case.

One case per session x scenario x observed run (compared with its expected run, per group): a
pass passes, `differs` and `failed` fail with the explanation and the differences (the most
severe first, at most MAX_DIFFS_PER_CASE), `not run` is an error. The writers are replay's
(`replay.ci_report`), so both commands' files look alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from replay.ci_report import CaseStatus, TestCase, summary_document, write_junit, write_summary
from validator.schemas import COMPARISON_KEY, DIFF_COLUMNS
from validator.transforms import NOT_RUN

MAX_DIFFS_PER_CASE = 50


def collect_comparisons(verdicts: DataFrame, diffs: DataFrame) -> list[dict[str, Any]]:
    """Every verdict row with its differences (not noise; the most severe first), as plain dicts.
    One action; sized by the number of comparisons, which is what a CI file lists anyway."""
    key = list(COMPARISON_KEY)
    order = Window.partitionBy(*key).orderBy(F.desc("severity"), "aspect", "ordinal", "subject")
    worst = (
        diffs.where(~F.col("is_noise"))
        .withColumn("n", F.row_number().over(order))
        .where(F.col("n") <= MAX_DIFFS_PER_CASE)
        .groupBy(*key)
        .agg(F.array_sort(F.collect_list(F.struct("n", *DIFF_COLUMNS, "cause"))).alias("differences"))
    )
    rows = (
        verdicts.join(worst, key, "left")
        .select(*key, "status", "diffs", "explanation", "not_run_detail", "differences")
        .orderBy(*key)
        .collect()
    )
    return [row.asDict(recursive=True) for row in rows]


def _difference(d: dict[str, Any]) -> str:
    where = f"{d['aspect']} {d['subject'] or ''}".rstrip()
    if d["ordinal"]:
        where += f" (generation #{d['ordinal']})"
    line = (
        f"{where}: expected {d['expected_value']!s}, observed {d['observed_value']!s} "
        f"[{d['change']}, severity {d['severity']}]"
    )
    return f"{line} - {d['cause']}" if d.get("cause") else line


def comparison_cases(comparisons: list[dict[str, Any]]) -> list[TestCase]:
    cases = []
    for c in comparisons:
        classname = f"{c['session_id']}.{c['scenario']}"
        name = f"{c['observed_run']} vs {c['expected_run']} (group {c['group_id']})"
        match c["status"]:
            case "pass":
                cases.append(TestCase(classname, name, CaseStatus.PASSED))
            case status if status == NOT_RUN:
                cases.append(TestCase(classname, name, CaseStatus.ERROR, c["not_run_detail"] or "not run"))
            case status:
                lines = [_difference(d) for d in c["differences"] or []]
                if (c["diffs"] or 0) > len(lines):
                    lines.append(f"... {c['diffs'] - len(lines)} more (see the rebalance_diff table)")
                message = c["explanation"] or f"{status}: {c['diffs']} difference(s)"
                cases.append(
                    TestCase(classname, name, CaseStatus.FAILED, f"{status}: {message}", "\n".join(lines))
                )
    return cases


def write_validate_outputs(
    junit: Path | None, summary: Path | None, comparisons: list[dict[str, Any]], exit_code: int, **extra: Any
) -> None:
    cases = comparison_cases(comparisons)
    if junit is not None:
        write_junit(junit, "group-replay validate", cases)
    if summary is not None:
        write_summary(summary, summary_document("validate", exit_code, cases, **extra))


__all__ = ["MAX_DIFFS_PER_CASE", "collect_comparisons", "comparison_cases", "write_validate_outputs"]
