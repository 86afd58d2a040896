"""The tests' one Spark session: small (local[2], 2 shuffle partitions), shared by every test
module of a pytest run and stopped at exit. Built by the product's factory (validator.session),
so the tests run Spark exactly as `group-replay validate` configures it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from validator.session import build_session

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

_TEST_SESSION: SparkSession | None = None


def shared_test_session() -> SparkSession:
    """One small local[2] session for a whole pytest run, however many test modules ask."""
    global _TEST_SESSION
    if _TEST_SESSION is None:
        import atexit

        _TEST_SESSION = build_session("local[2]", app_name="group-replay-tests", shuffle_partitions=2)
        atexit.register(_TEST_SESSION.stop)
    return _TEST_SESSION
