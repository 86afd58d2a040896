"""The one Spark session factory: UI off, UTC, few shuffle partitions, quiet logs.

`java_problem()` is checked before any Spark import starts a JVM, so a machine without Java gets
one clear sentence (and exit code 2, or a skip reason in the tests) instead of a gateway traceback.
"""

from __future__ import annotations

import os
import shutil
import tempfile
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


def jvm_log_path() -> Path:
    """Where the driver JVM's own stdout/stderr go (Spark's start-up lines, later warnings)."""
    return Path(tempfile.gettempdir()) / f"group-replay-spark-{os.getpid()}.log"


def _launch_quiet_gateway(conf: dict[str, str], master: str | None) -> None:
    """Start the driver JVM with its stdout/stderr in `jvm_log_path()` instead of the terminal.

    Spark prints start-up lines ("Setting default log level", JDK incubator warnings) straight to
    the inherited file descriptors, through any progress display on the terminal. pyspark's
    `launch_gateway` takes Popen arguments; SparkContext then reuses the gateway it finds. Under
    `spark-submit` (a gateway already exists) this does nothing.
    """
    from pyspark import SparkConf
    from pyspark.core.context import SparkContext
    from pyspark.java_gateway import launch_gateway

    if SparkContext._gateway is not None or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return
    spark_conf = SparkConf(loadDefaults=False)
    for key, value in conf.items():
        spark_conf.set(key, value)
    if master is not None:
        spark_conf.setMaster(master)
    log = jvm_log_path()
    with log.open("ab") as sink:
        try:
            gateway = launch_gateway(spark_conf, popen_kwargs={"stdout": sink, "stderr": sink})  # type: ignore[no-untyped-call]
        except Exception as exc:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"Spark did not start ({exc}); {log}: {' | '.join(tail)}") from exc
    SparkContext._gateway = gateway
    SparkContext._jvm = gateway.jvm


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
        # An aggregation over input already sorted by its keys (the per-run stage, jobs.py) runs as
        # one sort-based pass instead of a partial and a final hash aggregation.
        "spark.sql.execution.replaceHashWithSortAgg": "true",
        "spark.driver.memory": driver_memory,
        "spark.driver.extraJavaOptions": quiet,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # Cached rows carry nested arrays (a run's generations and facts): smaller column batches
        # keep the builders' buffers small (default 10,000 rows).
        "spark.sql.inMemoryColumnarStorage.batchSize": "2000",
    }
    for key, value in conf.items():
        builder = builder.config(key, value)
    _launch_quiet_gateway(conf, master)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    # Settable at runtime too, so an existing (spark-submit) session gets them as well.
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.requireAllClusterKeysForCoPartition", "false")
    spark.conf.set("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", str(OBJECT_HASH_AGG_KEYS))
    spark.conf.set("spark.sql.inMemoryColumnarStorage.batchSize", "2000")
    spark.conf.set("spark.sql.execution.replaceHashWithSortAgg", "true")
    return spark
