"""Rebalance events: the table replay writes and the validator reads (design section 4).

One row per event. The column names, order and types here are the contract; the validator's
`validator/schemas.py` holds the matching Spark StructType and a test keeps the two in step.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import IO, Any

EVENTS_FORMAT_VERSION = 1


class EventName(StrEnum):
    MEMBER_JOINED = "member_joined"
    REBALANCE_STARTED = "rebalance_started"
    GENERATION_COMPLETED = "generation_completed"
    MEMBER_LEFT = "member_left"
    MEMBER_EXPIRED = "member_expired"
    MEMBER_FENCED = "member_fenced"
    REQUEST_FAILED = "request_failed"
    NOT_RUN = "not_run"  # a run that could not be carried out: one row, the reason in `detail` (AGREED #1)


@dataclass(frozen=True, slots=True)
class RebalanceEvent:
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
    # Optional extension (not in design section 4's contract; absent from older files): the
    # member's client as it named itself in ApiVersions v3+, `name/version` (e.g.
    # "apache-kafka-java/3.9.2"). The validator's compatibility matrix uses it as the client axis.
    client_software: str | None = None
    # AGREED #1: free text, e.g. why a run was not carried out (always set for `not_run`).
    detail: str | None = None

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
        known = {f.name for f in fields(cls)}
        unknown = set(row) - known
        missing = known - set(row) - set(OPTIONAL_EVENT_COLUMNS)
        if unknown or missing:
            raise ValueError(
                f"event row: unknown columns {sorted(unknown)}, missing columns {sorted(missing)}"
            )
        values = dict(row)
        if values["assignment"] is not None:
            values["assignment"] = tuple(values["assignment"])
        return cls(**values)


OPTIONAL_EVENT_COLUMNS: tuple[str, ...] = ("client_software", "detail")
"""Extension columns: nullable, may be absent from a file."""

EVENT_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in fields(RebalanceEvent) if f.name not in OPTIONAL_EVENT_COLUMNS
)
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
