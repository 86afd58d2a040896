"""The validate job's Parquet outputs equal the golden tables (issue 16: a restructured job must
give the same results).

`fixtures/events/golden/<case>/<table>.jsonl` holds every output table's rows, sorted, as written by
the job before it was restructured into one aggregation pass per run and one for the diff. Two
cases: the `fixtures/events/synthetic` files, and 40 synthetic sessions (`tests.support.synth_events`, seed 7,
half with injected differences, half noisy). Regenerate (only when a change of results is meant):

    .venv/bin/python tests/test_validator_golden.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from validator.session import java_problem

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(java_problem() is not None, reason=f"Spark needs Java: {java_problem()}"),
]

pytest.importorskip("pyspark")

from pyspark.sql import SparkSession  # noqa: E402

from tests.support.spark import shared_test_session  # noqa: E402
from tests.support.synth_events import synth_events  # noqa: E402
from validator.jobs import ValidateOptions, run_validate  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "fixtures" / "events" / "golden"
TABLES = ("observed_rebalances", "run_summary", "rebalance_diff", "session_verdicts", "compatibility_matrix")
SYNTH_SESSIONS = 40


EXTRA_COLUMNS = {"protocol": "classic", "group_type": "classic", "member_epoch": 3}
"""Optional columns a newer replay may write (replay.events.EVENT_TABLE grows): ignored, never an error."""


def with_extra_columns(source: Path, out: Path) -> Path:
    """The fixture events with EXTRA_COLUMNS added: `broker-*` runs as Parquet (pyarrow, as replay
    writes it), the other runs as JSON Lines."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob("*.jsonl")):
        rows = [{**json.loads(line), **EXTRA_COLUMNS} for line in path.read_text().splitlines() if line]
        if path.name.startswith("broker-"):
            pq.write_table(pa.Table.from_pylist(rows), out / f"{path.stem}.parquet")
        else:
            (out / path.name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


def _inputs(spark: SparkSession, case: str, tmp: Path) -> Path:
    if case == "fixtures":
        return ROOT / "fixtures" / "events" / "synthetic"
    if case == "fixtures-extra-columns":
        return with_extra_columns(ROOT / "fixtures" / "events" / "synthetic", tmp / "extra-columns")
    events = tmp / "synth-events"
    if not events.exists():
        synth_events(spark, SYNTH_SESSIONS, diff_rate=0.5, noise_rate=0.5).write.parquet(str(events))
    return events


def output_rows(spark: SparkSession, events: Path, out: Path) -> dict[str, list[str]]:
    """Run the job; each table's rows as sorted JSON lines (columns in the table's order)."""
    run_validate(spark, ValidateOptions(inputs=(events,), out_dir=out))
    return {table: sorted(spark.read.parquet(str(out / table)).toJSON().collect()) for table in TABLES}


def assert_golden(case: str, got: dict[str, list[str]]) -> None:
    """Each table equals its golden rows on the golden columns (columns added since are not
    compared; JSON rows leave out null fields on both sides alike)."""
    for table in TABLES:
        golden = [json.loads(r) for r in (GOLDEN / case / f"{table}.jsonl").read_text().splitlines()]
        columns = {c for row in golden for c in row}
        rows = [{k: v for k, v in json.loads(r).items() if k in columns} for r in got[table]]
        key = lambda row: json.dumps(row, sort_keys=True)  # noqa: E731
        assert sorted(rows, key=key) == sorted(golden, key=key), table


@pytest.mark.parametrize("case", ["fixtures", "synthetic-40", "fixtures-extra-columns"])
def test_outputs_equal_the_golden_tables(case: str, tmp_path: Path) -> None:
    """`fixtures-extra-columns`: the same events with optional columns the job does not know
    (JSON Lines and Parquet) give the same tables as without them."""
    spark = shared_test_session()
    golden = "fixtures" if case == "fixtures-extra-columns" else case
    assert_golden(golden, output_rows(spark, _inputs(spark, case, tmp_path), tmp_path / "out"))


def _golden_lines(case: str) -> dict[str, list[str]]:
    return {t: (GOLDEN / case / f"{t}.jsonl").read_text().splitlines() for t in TABLES}


@pytest.mark.parametrize("case", ["fixtures", "synthetic-40"])
def test_the_golden_check_catches_a_changed_missing_or_extra_row(case: str) -> None:
    """The comparison is not vacuous: every table has rows, the diff has real and noise rows, and
    one changed value, one missing row or one extra row in any table fails it."""
    golden = _golden_lines(case)
    assert all(golden[t] for t in TABLES), {t: len(r) for t, r in golden.items()}
    noise = {json.loads(r)["is_noise"] for r in golden["rebalance_diff"]}
    assert noise == {True, False}
    assert_golden(case, golden)  # equal to itself
    for table in TABLES:
        rows = golden[table]
        first = json.loads(rows[0])
        column = next(c for c in first if isinstance(first[c], str | int) and not isinstance(first[c], bool))
        changed = {**first, column: f"{first[column]}-changed"}
        for broken in (
            [json.dumps(changed), *rows[1:]],  # a changed value
            rows[1:],  # a missing row
            [*rows, rows[0]],  # an extra row
        ):
            with pytest.raises(AssertionError):
                assert_golden(case, {**golden, table: broken})


def regenerate() -> None:
    import tempfile

    spark = shared_test_session()
    for case in ("fixtures", "synthetic-40"):
        with tempfile.TemporaryDirectory() as tmp:
            rows = output_rows(spark, _inputs(spark, case, Path(tmp)), Path(tmp) / "out")
        (GOLDEN / case).mkdir(parents=True, exist_ok=True)
        for table, lines in rows.items():
            (GOLDEN / case / f"{table}.jsonl").write_text("".join(line + "\n" for line in lines))
        print(f"{case}: " + ", ".join(f"{t} {len(r)}" for t, r in rows.items()))


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    regenerate()
