"""Every reach into PySpark's and Py4J's private names, in one module.

driftjoin needs a few things PySpark has no public API for: starting the driver JVM with its
stderr in a log file, a streaming query's resolved checkpoint and its session, failing a query
from its start listener, the interpreter the Python workers run, Spark's status store for the
autoscaler, and PySpark's own conversion of Spark types to Arrow. Each is a function here, and
nothing else in driftjoin touches a private name of PySpark (``_jvm``, ``_jsc``, ``_jsq``,
``_gateway``, ...) or of the JVM objects behind them, so a PySpark upgrade is checked in this
file alone: each function names the PySpark versions it was checked on (4.0.2, pyproject's
lower bound and CI's ``scripts/versions.sh lowest``, and 4.3.0, the lock), and a reach that
fails on another version fails here, under its own name.

Functions taking a query want a classic session's ``StreamingQuery``; a Spark Connect session
has no JVM in this process (:mod:`driftjoin.spark.runtime.connect`), except for
:func:`connect_query_plan`, which asks the Connect server.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Mapping
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: the autoscaler's modules import this one without needing Spark's types
    import pyarrow as pa
    from pyspark.sql import types as T

# -- the driver JVM and its Python workers (classic sessions) -----------------------------------


def driver_jvm_running() -> bool:
    """Whether this process has started (or attached to) a driver JVM."""
    from pyspark import SparkContext

    # PySpark 4.0.2, 4.3.0: SparkContext._gateway is the Py4J gateway, None before the first session
    return SparkContext._gateway is not None


def launch_driver_jvm(settings: Mapping[str, str], stderr: IO[bytes]) -> None:
    """Start the driver JVM with ``settings`` and its stderr (log4j, the Python workers' output)
    going to ``stderr``; the next ``SparkSession.builder.getOrCreate()`` uses it."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf(loadDefaults=False)
    for k, v in settings.items():
        conf.set(k, v)
    # PySpark 4.0.2, 4.3.0: launch_gateway(conf, popen_kwargs) passes popen_kwargs to the JVM's Popen,
    # and SparkContext._ensure_initialized(gateway=...) makes later contexts use that gateway
    gateway = launch_gateway(conf, popen_kwargs={"stderr": stderr})
    SparkContext._ensure_initialized(gateway=gateway)


def end_driver_jvm(spark: Any, timeout: float) -> None:
    """Stop ``spark`` and wait until its driver JVM has exited (closing its stdin ends it)."""
    from pyspark import SparkContext

    # PySpark 4.0.2, 4.3.0: SparkContext._gateway.proc is the JVM's Popen; the JVM's gateway server
    # exits when its stdin closes
    gateway = SparkContext._gateway
    spark.stop()
    gateway.proc.stdin.close()
    gateway.proc.wait(timeout=timeout)


def connect_environment() -> bool:
    """Whether this process is set up for Spark Connect (``SPARK_REMOTE``, or a Connect session exists)."""
    # PySpark 4.0.2, 4.3.0: pyspark.sql.utils.is_remote(), which SparkSession.builder itself asks
    from pyspark.sql.utils import is_remote

    return is_remote()


def session_uuid(spark: Any) -> str:
    """The JVM session's id of a classic session (the same for every Python handle on it)."""
    # PySpark 4.0.2, 4.3.0: SparkSession._jsparkSession; Spark 4's SparkSession.sessionUUID()
    jsession = spark._jsparkSession
    try:
        return str(jsession.sessionUUID())
    except Exception:  # py4j: a Spark without the method
        return str(jsession.hashCode())


def workers_python(sc: Any) -> str:
    """The interpreter the session's Python workers (and each new UDF) run."""
    # PySpark 4.0.2, 4.3.0: SparkContext.pythonExec, read when a UDF is created (not documented)
    return sc.pythonExec


def use_workers_python(sc: Any, python: str) -> None:
    """Make the UDFs created from now on run ``python``."""
    # PySpark 4.0.2, 4.3.0: as workers_python
    sc.pythonExec = python


def serve_python_workers() -> None:
    """Run PySpark's Python worker daemon in this process (``spark.python.daemon.module``)."""
    # PySpark 4.0.2, 4.3.0: pyspark.daemon.manager(), what `python -m pyspark.daemon` runs
    from pyspark.daemon import manager

    manager()


def driver_pid(spark: Any) -> int:
    """The process id of the driver JVM."""
    # PySpark 4.0.2, 4.3.0: SparkContext._jvm, the gateway's JVM view
    return int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())


def _status_store(spark: Any) -> Any:
    # PySpark 4.0.2, 4.3.0: SparkContext._jsc (the JavaSparkContext); .sc().statusStore() is Spark's
    # private[spark] AppStatusStore (Spark 4.0.2, 4.3.0)
    return spark.sparkContext._jsc.sc().statusStore()


def executor_count(spark: Any) -> int:
    """Executors registered with the driver (the driver itself not counted)."""
    # PySpark 4.0.2, 4.3.0: SparkContext._jsc; SparkContext.getExecutorMemoryStatus lists the driver too
    return spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1


def executor_summaries(spark: Any) -> Iterator[Any]:
    """The active executors (and the driver) as Spark's REST API reports them
    (``org.apache.spark.status.api.v1.ExecutorSummary``: ``id()``, ``totalCores()``, ...)."""
    it = _status_store(spark).executorList(True).iterator()
    while it.hasNext():
        yield it.next()


def stage_summaries(spark: Any, *, complete_only: bool) -> Iterator[Any]:
    """The stages of the application (``org.apache.spark.status.api.v1.StageData``), all or only
    the completed ones."""
    jvm, gateway = spark.sparkContext._jvm, spark.sparkContext._gateway
    statuses = jvm.java.util.ArrayList()
    if complete_only:
        statuses.add(jvm.org.apache.spark.status.api.v1.StageStatus.COMPLETE)
    # AppStatusStore.stageList(statuses, details, withSummaries, quantiles, taskStatus): Spark 4.0.2, 4.3.0
    it = _status_store(spark).stageList(statuses, False, False, gateway.new_array(jvm.double, 0),
                                        jvm.java.util.ArrayList()).iterator()
    while it.hasNext():
        yield it.next()


def request_total_executors(spark: Any, n: int) -> bool:
    """Ask the cluster manager for ``n`` executors in all (whether it accepted)."""
    # PySpark 4.0.2, 4.3.0: SparkContext._jsc and _jvm; SparkContext.requestTotalExecutors(n, 0, Map())
    sc = spark.sparkContext
    empty = getattr(sc._jvm.scala.collection.immutable, "Map$").__getattr__("MODULE$").empty()
    return bool(sc._jsc.sc().requestTotalExecutors(n, 0, empty))


def kill_executor(spark: Any, executor_id: str) -> None:
    """Ask the cluster manager to remove executor ``executor_id``."""
    # PySpark 4.0.2, 4.3.0: SparkContext._jsc; SparkContext.killExecutor(id)
    spark.sparkContext._jsc.sc().killExecutor(executor_id)


def lsh_hyperplanes(model: Any, tables: int, dim: int) -> list[list[float]]:
    """The random unit vectors of a fitted ``BucketedRandomProjectionLSH`` model, one per hash
    table (bench/batch_recall.py recomputes MLlib's hashes with them)."""
    # PySpark 4.0.2, 4.3.0: JavaModel._java_obj; Spark 4.0.2, 4.3.0: BucketedRandomProjectionLSHModel.randMatrix()
    mat = model._java_obj.randMatrix()
    return [[mat.apply(i, j) for j in range(dim)] for i in range(tables)]


# -- streaming queries of a classic session ----------------------------------------------------


def _execution(query: Any) -> Any:
    # PySpark 4.0.2, 4.3.0: StreamingQuery._jsq is the JVM StreamingQueryWrapper; streamingQuery() its
    # StreamExecution (Spark 4.0.2, 4.3.0)
    return query._jsq.streamingQuery()


def query_checkpoint(query: Any) -> str:
    """The resolved checkpoint location of a started query (a URI such as ``file:/tmp/ck``)."""
    return str(_execution(query).resolvedCheckpointRoot())


def query_plan(query: Any) -> str:
    """The analysed logical plan of a started query, as text."""
    return _execution(query).analyzedPlan().toString()


def set_query_conf(query: Any, settings: Mapping[str, str]) -> None:
    """Set ``settings`` on the session the query runs its batches in: the query's tasks see them
    as local properties (set before its first batch: in the listener's start callback)."""
    conf = _execution(query).sparkSessionForStream().conf()
    for k, v in settings.items():
        conf.set(k, v)


def fail_query(spark: Any, query: Any, headline: str, message: str) -> None:
    """Make ``query`` end with ``StreamingQueryException(STREAM_FAILED)`` caused by ``message``
    (``awaitTermination()`` and ``exception()`` then report it) once it is stopped; raises if
    this Spark has no such path."""
    jvm, execution = spark._jvm, _execution(query)
    params = jvm.java.util.HashMap()
    for k, v in (("id", str(execution.id())), ("runId", str(execution.runId())), ("message", message)):
        params.put(k, v)
    # Spark 4.0.2, 4.3.0: StreamingQueryException(message, cause, startOffset, endOffset, errorClass,
    # messageParameters) and the StreamExecution's streamDeathCause setter (Scala `streamDeathCause_=`)
    error = jvm.org.apache.spark.sql.streaming.StreamingQueryException(
        headline, jvm.java.lang.IllegalStateException(message), "", "", "STREAM_FAILED",
        jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(params))
    getattr(execution, "streamDeathCause_$eq")(error)


# -- Spark Connect --------------------------------------------------------------------------------


def connect_query_plan(spark: Any, query_id: str, run_id: str) -> str:
    """The physical plan of a query run of a Spark Connect session, as its server explains it
    (``StreamingQuery.explain()`` only prints it)."""
    from pyspark.sql.connect import proto
    from pyspark.sql.connect.streaming.query import StreamingQuery

    cmd = proto.StreamingQueryCommand()
    cmd.explain.extended = False
    # PySpark 4.0.2, 4.3.0: StreamingQuery(session, query_id, run_id) and its _execute_streaming_query_cmd
    return StreamingQuery(spark, query_id, run_id)._execute_streaming_query_cmd(cmd).explain.result


# -- Spark types as Arrow -------------------------------------------------------------------------


def _utc() -> dict[str, Any]:
    from pyspark.sql.pandas.types import to_arrow_type

    # timestamps in UTC: PySpark 4.0.2 says so with timestamp_utc=True (its default), 4.3.0 with timezone=
    return {"timezone": "UTC"} if "timezone" in inspect.signature(to_arrow_type).parameters else {"timestamp_utc": True}


def arrow_type(dtype: T.DataType) -> pa.DataType:
    """The Arrow type PySpark exchanges a Spark type as (timestamps in UTC)."""
    # PySpark 4.0.2, 4.3.0: pyspark.sql.pandas.types.to_arrow_type (not in the API reference)
    from pyspark.sql.pandas.types import to_arrow_type

    return to_arrow_type(dtype, **_utc())


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The Arrow schema PySpark exchanges rows of ``schema`` in (``mapInArrow``, ``applyInArrow``)."""
    # PySpark 4.0.2, 4.3.0: pyspark.sql.pandas.types.to_arrow_schema (not in the API reference)
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, **_utc())


def datatype_from_json(text: str) -> T.DataType:
    """A Spark type from its JSON form (``DataType.json()``)."""
    # PySpark 4.0.2, 4.3.0: pyspark.sql.types._parse_datatype_json_string, the inverse of DataType.json()
    from pyspark.sql.types import _parse_datatype_json_string

    return _parse_datatype_json_string(text)
