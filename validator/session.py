"""The one Spark session factory: UI off, UTC, few shuffle partitions, quiet logs.

`java_problem()` is checked before any Spark import starts a JVM, so a machine without Java gets
one clear sentence (and exit code 2, or a skip reason in the tests) instead of a gateway traceback.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

LOG4J2_PROPERTIES = Path(__file__).with_name("log4j2.properties")
OBJECT_HASH_AGG_KEYS = 1 << 17
"""Groups per task kept in ObjectHashAggregate's hash map before it falls back to sorting.

Spark's default (128) sorts on every real input; the map lives outside Spark's memory manager, so
the bound matters: 2^20 ran out of a 2 GB heap on 10M event rows (bench/README.md)."""


def java_problem() -> str | None:
    """Why Spark cannot start here, or None when a `java` is available."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        if (Path(java_home) / "bin" / "java").exists():
            return None
        return f"JAVA_HOME={java_home} has no bin/java; Spark needs a Java 17+ runtime"
    if shutil.which("java") is None:
        return (
            "Java not found (no `java` on PATH and JAVA_HOME unset); Spark needs a Java 17+ runtime, "
            "e.g. `apt-get install openjdk-17-jre-headless`"
        )
    return None


def build_session(
    master: str | None = "local[*]",
    *,
    app_name: str = "group-replay-validate",
    shuffle_partitions: int = 4,
    driver_memory: str = "2g",
) -> SparkSession:
    """Create (or reuse) the session. `master=None` leaves the master to `spark-submit`."""
    from pyspark.sql import SparkSession

    quiet = f"-Dlog4j.configurationFile=file:{LOG4J2_PROPERTIES} -Dlog4j2.level=error"
    builder = SparkSession.builder.appName(app_name)
    if master is not None:
        builder = builder.master(master)
    conf = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.shuffle.partitions": str(shuffle_partitions),
        # Small, co-partitioned stages: AQE's re-planning costs more than it saves here.
        "spark.sql.adaptive.enabled": "false",
        # Joins on (session_id, ...) reuse a partitioning on session_id alone (see jobs.py).
        "spark.sql.requireAllClusterKeysForCoPartition": "false",
        # collect_set/collect_list/max_by aggregations (ObjectHashAggregate) otherwise fall back to
        # sort-based aggregation after 128 keys per task, i.e. on every real input.
        "spark.sql.objectHashAggregate.sortBased.fallbackThreshold": str(OBJECT_HASH_AGG_KEYS),
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": quiet,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # Settable at runtime too, so an existing (spark-submit) session gets them as well.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
    spark.conf.set("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", str(OBJECT_HASH_AGG_KEYS))
    return spark


_TEST_SESSION: SparkSession | None = None


def shared_test_session() -> SparkSession:
    """One small local[2] session for a whole pytest run, however many test modules ask."""
    global _TEST_SESSION
    if _TEST_SESSION is None:
        import atexit

        _TEST_SESSION = build_session("local[2]", app_name="group-replay-tests", shuffle_partitions=2)
        atexit.register(_TEST_SESSION.stop)
    return _TEST_SESSION
