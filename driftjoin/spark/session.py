"""Spark session settings the stateful operators need, and a fast local session for laptops.

Measured on 2 cores (../shared/notes/spark-facts.md): 200 shuffle partitions make a stateful
micro-batch take 14 s, so the join sets ``spark.sql.shuffle.partitions`` to its parallelism;
``transformWithStateInPandas`` needs the RocksDB state store provider.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from driftjoin.spark import docs_source, source

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: RocksDB changelog checkpointing: measured here it halves the state commit time per batch.
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def _session(builder: SparkSession.Builder, parallelism: int, conf: dict[str, str]) -> SparkSession:
    """The settings every driftjoin session shares, on a builder that has its master."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(parallelism),
        "spark.default.parallelism": str(parallelism),
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        CHANGELOG: "true",
        "spark.pyspark.python": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # a loaded machine can take longer than the default 15 s to start a Python worker
        "spark.python.authenticate.socketTimeout": "120s",
        **conf,
    }
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    source.register(spark)
    docs_source.register(spark)
    return spark


def local_session(parallelism: int = 2, app_name: str = "driftjoin", *, cores: int | None = None,
                  driver_memory: str = "4g") -> SparkSession:
    """An embedded local Spark with settings for small, fast stateful streaming.

    UI off, adaptive execution off (it would coalesce the partitions that pin workers),
    shuffle partitions = ``parallelism``, RocksDB state store, and the Python workers started
    with this interpreter so the venv's packages are found.
    """
    master = f"local[{cores or min(os.cpu_count() or 2, max(2, parallelism))}]"
    jvm_opts = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=error"
    return _session(SparkSession.builder.master(master).appName(app_name), parallelism,
                    {"spark.driver.memory": driver_memory, "spark.driver.extraJavaOptions": jvm_opts})


def cluster_session(master: str, parallelism: int = 2, app_name: str = "driftjoin", *, executor_memory: str = "1g",
                    max_executors: int | None = None, conf: dict[str, str] | None = None) -> SparkSession:
    """The same settings on a cluster (``spark://``, ``yarn``, ``k8s://``): executors of one core
    each (the autoscaler's workers, docs/autoscaling.md), at most ``max_executors`` of them.

    The executors start Python with this interpreter's path, so they must find the same
    environment there (true on one machine; on a real cluster ship it, e.g. with
    ``spark.archives``). ``conf``: further settings (e.g. dynamic allocation's).
    """
    settings = {"spark.executor.cores": "1", "spark.executor.memory": executor_memory,
                "spark.pyspark.driver.python": sys.executable}
    if max_executors is not None:
        settings["spark.cores.max"] = str(max_executors)
    return _session(SparkSession.builder.master(master).appName(app_name), parallelism, {**settings, **(conf or {})})


def prepare_for_stateful(spark: SparkSession, parallelism: int) -> None:
    """Set what a driftjoin stateful query needs on an existing session (before it starts).

    The number of state partitions is fixed by the checkpoint on the first run; a restarted
    query keeps the value it was started with whatever this sets.
    """
    spark.conf.set("spark.sql.shuffle.partitions", str(parallelism))
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    if spark.conf.get("spark.sql.streaming.stateStore.providerClass", "") != ROCKSDB:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        spark.conf.set(CHANGELOG, "true")
