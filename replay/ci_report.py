"""CI-native outputs for `replay` and `validate` (issue 15): JUnit XML and a JSON summary.

One test case per session x scenario x run (replay: each run carried out or not; validate: each
comparison of an observed run with its expected run). A case fails with the differences as its
text; a run that could not be carried out is an error (it was not a pass, and not a difference
either). CI systems (GitLab, Jenkins, GitHub's test reporters) show these files natively.

The JUnit layout follows the schema CI tools read (Jenkins' junit plugin, `testsuites` >
`testsuite` > `testcase` with `failure` / `error` / `skipped`); the summary JSON is this project's,
versioned by `SUMMARY_FORMAT_VERSION`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape, quoteattr

SUMMARY_FORMAT_VERSION = 1

# XML 1.0 cannot carry most control characters, even escaped: they are replaced.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class CaseStatus(StrEnum):
    PASSED = "passed"
    FAILED = "failed"  # differences, or an expectation not met
    ERROR = "error"  # could not be carried out (not_run)


@dataclass(frozen=True, slots=True)
class TestCase:
    """One session x scenario x run."""

    __test__ = False  # not a pytest class

    classname: str  # "<session>.<scenario>" (dots are how CI tools group cases)
    name: str  # the run, or "observed vs expected"
    status: CaseStatus
    message: str = ""  # one line: why it failed or errored
    details: str = ""  # the differences, one per line
    time_s: float = 0.0


def _text(value: str) -> str:
    return escape(_NOT_XML.sub("\ufffd", value))


def _attr(value: str) -> str:
    return quoteattr(_NOT_XML.sub("\ufffd", value))


def junit_xml(suite: str, cases: Iterable[TestCase]) -> str:
    """The JUnit XML document for `cases` (one `testsuite` named `suite`)."""
    cases = list(cases)
    failures = sum(1 for c in cases if c.status == CaseStatus.FAILED)
    errors = sum(1 for c in cases if c.status == CaseStatus.ERROR)
    total_s = sum(c.time_s for c in cases)
    lines = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuites name={_attr(suite)} tests="{len(cases)}" failures="{failures}" '
        f'errors="{errors}" time="{total_s:.3f}">',
        f'  <testsuite name={_attr(suite)} tests="{len(cases)}" failures="{failures}" '
        f'errors="{errors}" skipped="0" time="{total_s:.3f}">',
    ]
    for case in cases:
        head = (
            f"    <testcase classname={_attr(case.classname)} name={_attr(case.name)} "
            f'time="{case.time_s:.3f}"'
        )
        if case.status == CaseStatus.PASSED:
            lines.append(head + "/>")
            continue
        tag = "failure" if case.status == CaseStatus.FAILED else "error"
        lines.append(head + ">")
        lines.append(
            f"      <{tag} message={_attr(case.message)} type={_attr(case.status.value)}>"
            f"{_text(case.details or case.message)}</{tag}>"
        )
        lines.append("    </testcase>")
    lines += ["  </testsuite>", "</testsuites>", ""]
    return "\n".join(lines)


def write_junit(path: Path, suite: str, cases: Iterable[TestCase]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(suite, cases), encoding="utf-8")


def summary_document(command: str, exit_code: int, cases: Iterable[TestCase], **extra: Any) -> dict[str, Any]:
    """The JSON summary: counts, exit code, each case, and the command's own `extra` fields."""
    cases = list(cases)
    counts = {status.value: sum(1 for c in cases if c.status == status) for status in CaseStatus}
    return {
        "format_version": SUMMARY_FORMAT_VERSION,
        "command": command,
        "exit_code": exit_code,
        "counts": counts,
        **extra,
        "cases": [
            {
                "classname": c.classname,
                "name": c.name,
                "status": c.status.value,
                "message": c.message or None,
                "details": c.details.splitlines() if c.details else [],
            }
            for c in cases
        ],
    }


def write_summary(path: Path, document: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n", encoding="utf-8")


def replay_cases(results: Iterable[tuple[str, Any]], scenario: str) -> list[TestCase]:
    """`replay`'s cases: each (session, RunResult) under `scenario`; failures are the
    expectations the run did not meet, an error is a run the target could not carry out."""
    cases = []
    for session, result in results:
        classname, name = f"{session}.{scenario}", result.run
        if result.not_run is not None:
            cases.append(TestCase(classname, name, CaseStatus.ERROR, f"not run: {result.not_run}"))
        elif result.failures:
            message = f"{len(result.failures)} expectation(s) not met"
            cases.append(TestCase(classname, name, CaseStatus.FAILED, message, "\n".join(result.failures)))
        else:
            cases.append(TestCase(classname, name, CaseStatus.PASSED))
    return cases


def write_replay_outputs(
    junit: Path | None,
    summary: Path | None,
    results: list[tuple[str, Any]],
    scenario: str,
    exit_code: int,
    **extra: Any,
) -> None:
    """`replay --junit-xml FILE --summary-json FILE`."""
    cases = replay_cases(results, scenario)
    if junit is not None:
        write_junit(junit, f"group-replay replay {scenario}", cases)
    if summary is not None:
        write_summary(summary, summary_document("replay", exit_code, cases, scenario=scenario, **extra))


__all__ = [
    "SUMMARY_FORMAT_VERSION",
    "CaseStatus",
    "TestCase",
    "junit_xml",
    "replay_cases",
    "summary_document",
    "write_junit",
    "write_replay_outputs",
    "write_summary",
]
