"""explain_error: the one line of a failed query is its innermost driftjoin or Python error, not
Spark's error class, the Python frames, the Java stack or the query plan Spark appends. The texts
are Spark's own (PySpark 4.3), shortened in their middle."""

from __future__ import annotations

import pytest

from driftjoin import explain_error
from driftjoin.spark.runtime.errors import root_cause
from driftjoin.spark.runtime.settings import SettingError

FRAMES = "".join(f'  File "/venv/pyspark/worker.py", line {n}, in process\n    serializer.dump_stream(out_iter, outfile)\n'
                 for n in range(3))
PLAN = ("\n=== Streaming Query ===\nIdentifier: [id = 3e49, runId = bc84]\nCurrent State: ACTIVE\n\nLogical Plan:\n"
        "~WriteToMicroBatchDataSourceV1 FileSink[file:/out]\n+- ~Project [left_id#37L, right_id#38L, distance#39]\n"
        "   +- ~TransformWithStateInPySpark transformWithStateUDF(key#29)#36, 1, [left_id#37L], Append, NoTime\n")
BATCH_FAILED = ("[STREAM_FAILED] Query [id = 3e49, runId = bc84] terminated with exception: [PYTHON_EXCEPTION] An "
                "exception was thrown from the Python worker: Traceback (most recent call last):\n" + FRAMES
                + '  File "/driftjoin/spark/runtime/plan_guard.py", line 98, in check\n'
                "    raise PlanChangedError(refusal(self.operator, refused))\n"
                "driftjoin.spark.runtime.plan_guard.PlanChangedError: similarity_join: this query was restarted from a "
                "checkpoint written with other settings (threshold: checkpoint has 0.01, this query has 0.02). Restart it.\n"
                " SQLSTATE: 38000 SQLSTATE: XXKST" + PLAN)
REFUSED_AT_START = ("[STREAM_FAILED] Query [id = 0735, runId = 51c4] terminated with exception: PlanChangedError: "
                    "similarity_join: threshold: checkpoint has 0.01, this query has 0.02 SQLSTATE: XXKST\n"
                    "driftjoin compared the query's settings with the plans stored in driftjoin-plans.json")
UDF_IN_STREAM = ("[STREAM_FAILED] Query [id = 584d, runId = bc41] terminated with exception: [PYTHON_EXCEPTION] An "
                 "exception was thrown from the Python worker: Traceback (most recent call last):\n"
                 '  File "/job.py", line 28, in bad\n    raise KeyError("no such thing")\n'
                 "KeyError: 'no such thing'\n SQLSTATE: 38000 SQLSTATE: XXKST" + PLAN)
STATIC_UDF = ("An exception was thrown from the Python worker:\nTraceback (most recent call last):\n"
              '  File "/job.py", line 20, in boom\n    raise ValueError(f"vector is not numeric: {x}")\n'
              "ValueError: vector is not numeric: 0\n")
PY4J = ("An error occurred while calling o812.collectToPython.\n: org.apache.spark.SparkException: Job aborted due to "
        "stage failure: Task 0 in stage 3.0 failed 1 times\n\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages"
        "(DAGScheduler.scala:2935)\n\tat scala.Option.foreach(Option.scala:437)\n"
        "Caused by: java.io.FileNotFoundException: File file:/data/left/part-0.json does not exist\n"
        "\tat org.apache.spark.sql.errors.QueryExecutionErrors$.readCurrentFileNotFoundError(QueryExecutionErrors.scala:781)\n")


@pytest.mark.parametrize("text, line", [
    (BATCH_FAILED, "PlanChangedError: similarity_join: this query was restarted from a checkpoint written with other "
                   "settings (threshold: checkpoint has 0.01, this query has 0.02). Restart it."),
    (REFUSED_AT_START, "PlanChangedError: similarity_join: threshold: checkpoint has 0.01, this query has 0.02"),
    (UDF_IN_STREAM, "KeyError: 'no such thing'"),
    (STATIC_UDF, "ValueError: vector is not numeric: 0"),
    (PY4J, "FileNotFoundException: File file:/data/left/part-0.json does not exist"),
])
def test_the_innermost_error_of_spark_texts(text, line):
    assert explain_error(RuntimeError(text)) == line


def test_own_errors_and_their_causes():
    setting = SettingError("parallelism", "must be an integer >= 1 (the number of workers)", 0)
    assert explain_error(setting) == "SettingError: parallelism must be an integer >= 1 (the number of workers), got 0"
    assert root_cause(setting).is_setting
    try:
        try:
            raise KeyError("id")
        except KeyError as e:
            raise RuntimeError("while routing") from e
    except RuntimeError as wrapped:
        assert explain_error(wrapped) == "KeyError: 'id'"
    assert not root_cause(RuntimeError(UDF_IN_STREAM)).is_setting and root_cause(RuntimeError(BATCH_FAILED)).is_setting
