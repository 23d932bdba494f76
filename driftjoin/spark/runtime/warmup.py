"""Paying a driver process's one-time start-up before the first real query starts.

The first micro-batch a new driver process runs takes seconds longer than every later first batch
(docs/benchmarks.md, start-up: 8.2 s against 2.4 s for the same query started again in the same
process, idle machine): the JVM loads and compiles Spark's streaming, RocksDB, Arrow and
``transformWithStateInPandas`` code paths once, and the executor's Python daemon starts and
imports pandas, pyarrow and driftjoin's operators once. Whatever a query's first batch spends
there, its records wait for: the records of a stream that starts with the query (a generator, a
Kafka topic read from ``latest``) arrive during that batch and are read by the second one, so
the start-up p99 latency is about the first batch plus the second.

:func:`warm_up` runs a query of the same shape once before the user's query starts: a bounded
generated stream (``availableNow``), one Python stateful stage with driftjoin's state layer on
RocksDB, a Parquet sink, in a temporary folder that it removes. Nothing of it stays but the warm
JVM and Python workers. It costs the time the first batch would have spent (paid before the
stream starts, not by its records); what it cannot pay ahead is per query: each query's own
planning (PySpark runs a Python process on the driver to learn the processor's state variables)
and the driver-side Python runner of each Python data source.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from driftjoin.spark.runtime.state import ChunkedState

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd


class _Count(StatefulProcessor):
    """Counts a key's rows in driftjoin's state layer (a meta value and one chunk per batch)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "warm_up")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802
        n = sum(len(f) for f in rows)
        loaded = self.state.load(key, lambda meta, chunks, stale: 0, lambda: 0)
        loaded.value += n
        loaded.chunks.add(0, n)
        self.state.save(key, loaded, 8)
        yield pd.DataFrame({"key": [int(key[0])], "rows": [loaded.value]})

    def close(self) -> None:
        pass


def warm_up(spark: SparkSession, rows: int = 2000) -> float:
    """Run one small streaming query of the shape of driftjoin's joins on ``spark`` (module
    docstring); returns the seconds it took.

    Parameters
    ----------
    spark:
        The session (classic, local or cluster) whose JVM and Python workers to warm.
    rows:
        Generated records the query reads (in one micro-batch).

    Returns
    -------
    float
        Seconds from the start to the query's end.

    Examples
    --------
    >>> from driftjoin import local_session
    >>> from driftjoin.spark.runtime.warmup import warm_up
    >>> warm_up(local_session(2)) > 0
    True
    """
    from pyspark.sql import functions as F

    started = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="driftjoin-warm-up-")
    try:
        counts = (spark.readStream.format("driftjoin").option("rate", rows).option("total", rows).option("pace", "false")
                  .option("dim", 2).load()
                  .select(F.pmod(F.col("id"), F.lit(2)).alias("key"), "vector")
                  .groupBy("key").transformWithStateInPandas(_Count(), "key long, rows long", "Append", "None"))
        query = (counts.writeStream.format("parquet").option("path", f"{folder}/out")
                 .option("checkpointLocation", f"{folder}/checkpoint").trigger(availableNow=True).start())
        query.awaitTermination()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return time.perf_counter() - started
