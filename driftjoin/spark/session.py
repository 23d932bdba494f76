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
#: Python worker daemon that imports driftjoin's modules before forking workers.
DAEMON = "driftjoin.spark.worker_daemon"


def local_session(parallelism: int = 2, app_name: str = "driftjoin", *, cores: int | None = None,
                  driver_memory: str = "4g", preload_workers: bool = True) -> SparkSession:
    """An embedded local Spark with settings for small, fast stateful streaming.

    UI off, adaptive execution off (it would coalesce the partitions that pin workers),
    shuffle partitions = ``parallelism``, RocksDB state store, and the Python workers started
    with this interpreter so the venv's packages are found. ``preload_workers`` starts them from
    :mod:`driftjoin.spark.worker_daemon`, which imports pandas, pyarrow and the operators once per
    executor instead of once per Python worker (a first micro-batch or a restart pays it per task).
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    master = f"local[{cores or min(os.cpu_count() or 2, max(2, parallelism))}]"
    jvm_opts = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Dlog4j2.level=error"
    spark = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.memory", driver_memory)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(parallelism))
        .config("spark.default.parallelism", str(parallelism))
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        .config(CHANGELOG, "true")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.driver.extraJavaOptions", jvm_opts)
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.sql.session.timeZone", "UTC")
        # a loaded machine can take longer than the default 15 s to start a Python worker
        .config("spark.python.authenticate.socketTimeout", "120s")
        .config("spark.python.daemon.module", DAEMON if preload_workers else "pyspark.daemon")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    source.register(spark)
    docs_source.register(spark)
    return spark


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
