"""Every user mistake raises ``driftjoin.SettingError`` naming the setting, before any Spark job
runs (issue 33 item 5): on every path of ``similarity_join`` (the metric-space path as the vector
path) and in every other operator and dead-letter function.

Each case runs in a Spark job group; the group must have no job when the error is raised (a
``double`` id on the string path used to be a ``TypeError`` after three jobs drew the sample).
"""

from __future__ import annotations

import re
import uuid

import numpy as np
import pytest
from pyspark.sql import functions as F

from driftjoin import (
    SettingError,
    equi_join,
    invalid_documents,
    invalid_equi_records,
    invalid_records,
    invalid_sets,
    natural_join,
    similarity_join,
    topk_set_join,
    user_metric,
)

pytestmark = pytest.mark.spark


def _names(spark, id_type: str = "long"):
    return spark.createDataFrame([(1, "kitten", ["a"], 3, [1.0, 0.0]), (2, "sitten", ["b"], 4, [0.0, 1.0])],
                                 "id long, name string, toks array<string>, n int, vector array<double>"
                                 ).withColumn("id", F.col("id").cast(id_type))


def _stream(spark, id_type: str = "long"):
    return (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
            .select(F.col("value").cast(id_type).alias("id"), F.col("value").cast("string").alias("name"),
                    F.col("timestamp").alias("ts")))


squared = user_metric(pairwise=lambda A, B: (np.asarray(A, float)[:, None] - np.asarray(B, float)[None, :]) ** 2,
                      name="squared")

CASES = [
    ("a double id on the metric path", lambda s: (_names(s, "double"), {"threshold": 1, "metric": "levenshtein", "value_col": "name"}),
     "id_col", r"id_col='id' has type double; ids must be integers or strings"),
    ("a double id on a stream", lambda s: (_stream(s, "double"), {"threshold": 1, "metric": "levenshtein", "value_col": "name"}),
     "id_col", r"id_col='id' has type double"),
    ("an unknown value_col", lambda s: (_names(s), {"threshold": 1, "metric": "levenshtein", "value_col": "nme"}),
     "value_col", r"value_col='nme' is not a column of the input"),
    ("the wrong column type", lambda s: (_names(s), {"threshold": 1, "metric": "levenshtein", "value_col": "n"}),
     "metric", r"metric='levenshtein' compares string values, but column 'n' holds other values"),
    ("a missing watermark", lambda s: (_stream(s), {"threshold": 1, "metric": "levenshtein", "value_col": "name",
                                                    "time_col": "ts"}),
     "watermark", r"watermark is required for event-time windows on a stream"),
    ("a missing sample", lambda s: (_stream(s), {"threshold": 1, "metric": lambda a, b: 0.0, "value_col": "name"}),
     "sample", r"sample= is required for metric="),
    ("balance on strings", lambda s: (_names(s), {"threshold": 1, "metric": "levenshtein", "value_col": "name",
                                                  "balance": "greedy"}),
     "balance", r"balance='greedy' moves S3J worksets"),
    ("grouped on strings", lambda s: (_names(s), {"threshold": 1, "metric": "levenshtein", "value_col": "name",
                                                  "output": "grouped"}),
     "output", r"output='grouped' is not available for a metric join"),
    ("a non-metric", lambda s: (_stream(s), {"threshold": 1, "metric": squared, "value_col": "id",
                                             "sample": [0.0, 1.0, 2.0]}),
     "metric", r"metric 'squared' violates the triangle inequality"),
    ("a missing dim on a vector stream", lambda s: (s.readStream.format("driftjoin").load(), {"threshold": 0.1}),
     "dim", r"dim is required for streaming inputs"),
    ("a stream beside a static input", lambda s: (_stream(s), {"right": _names(s), "threshold": 1, "metric": "edit",
                                                              "value_col": "name"}),
     "right", r"left and right must both be streaming or both static"),
    ("an input that is not a DataFrame", lambda s: ([("kitten",)], {"threshold": 1, "metric": "edit"}),
     "left", r"left must be a pyspark.sql.DataFrame .*got 'list'"),
    ("balance on a static join", lambda s: (_names(s), {"threshold": 0.1, "balance": "s3j"}),
     "balance", r"balance applies to streaming joins"),
    ("a non-metric shown by the sample of a static join", lambda s: (_names(s), {"threshold": 1, "metric": squared,
                                                                                "value_col": "n", "sample": [0, 1, 2]}),
     "metric", r"metric 'squared' violates the triangle inequality"),
    ("a sample that is no list", lambda s: (_stream(s), {"threshold": 1, "metric": "levenshtein", "value_col": "name",
                                                         "sample": 5}),
     "sample", r"sample= must be a static DataFrame with column 'name' or a list of values"),
    ("a sample without a valid value", lambda s: (_names(s), {"threshold": 1, "metric": "levenshtein",
                                                              "value_col": "name", "sample": [1, 2]}),
     "sample", r"sample= has no value metric='levenshtein' can join \(its 2 values hold none"),
    ("a sample of another column type", lambda s: (_stream(s), {"threshold": 1, "metric": "levenshtein",
                                                                "value_col": "name", "algorithm": "s3j",
                                                                "sample": _names(s).withColumn("name", F.col("n"))}),
     "sample", r"sample= column 'name' holds other values, the input's hold string values"),
    ("a vector sample without the vector column", lambda s: (_names(s), {"threshold": 0.1, "dim": 2,
                                                                         "sample": _names(s).drop("vector")}),
     "sample", r"sample= has no column 'vector'"),
]


def _sets(spark, tokens: str = "array('a', 'b')"):
    return spark.range(3).selectExpr("id", f"{tokens} as tokens", "cast(id as double) as ts")


def _docs(spark, doc: str = "'{\"a\": 1}'"):
    return spark.range(3).selectExpr("id", f"{doc} as doc")


def _rows(spark, key: str = "id % 2"):
    return spark.range(3).selectExpr(f"{key} as k", "id", "cast(id as double) as t")


OTHERS = [
    ("topk: tokens of the wrong type", lambda s: topk_set_join(_sets(s, "'a b'"), k=2), "tokens_col",
     r"tokens_col='tokens' has type string; use array<string> or array<int/long>"),
    ("topk: no time column", lambda s: topk_set_join(_sets(s), k=2, time_col="when"), "time_col",
     r"time_col='when' is not a column of the input"),
    ("topk: a shared bound on static sets", lambda s: topk_set_join(_sets(s), k=2, parallelism=2, share_bound=True,
                                                                    metrics_dir="/tmp/m"),
     "share_bound", r"share_bound=True applies to streams"),
    ("natural: no document column", lambda s: natural_join(_docs(s), window=10, doc_col="body"), "doc_col",
     r"doc_col='body' is not a column of the input"),
    ("natural: documents of the wrong type", lambda s: natural_join(_docs(s, "id"), window=10), "doc_col",
     r"doc_col='doc' has type bigint"),
    ("natural: a sliding window", lambda s: natural_join(_docs(s), window="1 minute", slide="20 seconds"), "slide",
     r"per tumbling window"),
    ("natural: no valid sample", lambda s: natural_join(_docs(s), window=10, sample=["[1]"]), "sample",
     r"sample= holds no valid JSON object"),
    ("equi: no key column", lambda s: equi_join(_rows(s), _rows(s), on="key"), "on",
     r"on='key' is not a column of the left input"),
    ("equi: keys of two types", lambda s: equi_join(_rows(s), _rows(s, "cast(id as string)"), on="k"), "on",
     r"join key 'k' is bigint on the left and string on the right"),
    ("equi: Join-Biclique on one worker", lambda s: equi_join(_rows(s), _rows(s), on="k", algorithm="biclique",
                                                              parallelism=1), "parallelism",
     r"Join-Biclique needs parallelism >= 2"),
    ("equi: SHC settings it does not take", lambda s: equi_join(_rows(s), _rows(s), on="k", options={"epsilon": 2.0}),
     "options", r"invalid settings for algorithm='shc'"),
    ("equi: a time column of the wrong type", lambda s: equi_join(_rows(s, "cast(id as string)"),
                                                                  _rows(s, "cast(id as string)").withColumn("t", F.lit("x")),
                                                                  on="k", within=5, time_col="t"), "time_col",
     r"time_col='t' of the right input is string"),
    ("topk: an input that is not a DataFrame", lambda s: topk_set_join(None, k=2), "left", r"left is required"),
    ("natural: an input that is not a DataFrame", lambda s: natural_join({"a": 1}, window=10), "docs",
     r"docs must be a pyspark.sql.DataFrame .*got 'dict'"),
    ("natural: a sample without the document column", lambda s: natural_join(_docs(s), window=10,
                                                                             sample=_docs(s).drop("doc")),
     "sample", r"sample= has no column 'doc' \(doc_col\)"),
    ("equi: no right input", lambda s: equi_join(_rows(s), None, on="k"), "right", r"right is required"),
]

#: The dead-letter functions take the join's column settings and refuse what the join refuses.
DEAD_LETTERS = [
    ("invalid_records: a double id", lambda s: invalid_records(_names(s, "double"), metric="levenshtein",
                                                               value_col="name"),
     "id_col", r"id_col='id' has type double"),
    ("invalid_records: an unknown value_col", lambda s: invalid_records(_names(s), metric="levenshtein", value_col="nme"),
     "value_col", r"value_col='nme' is not a column of the input"),
    ("invalid_records: the wrong column type", lambda s: invalid_records(_names(s), metric="levenshtein", value_col="n"),
     "metric", r"metric='levenshtein' compares string values, but column 'n' holds other values"),
    ("invalid_records: a misspelled metric", lambda s: invalid_records(_names(s), metric="levenstein", value_col="name"),
     "metric", r"did you mean 'levenshtein'"),
    ("invalid_records: a stream beside a static input", lambda s: invalid_records(_stream(s), _names(s),
                                                                                  metric="levenshtein",
                                                                                  value_col="name"),
     "right", r"left and right must both be streaming or both static"),
    ("invalid_sets: tokens of the wrong type", lambda s: invalid_sets(_sets(s, "'a b'")), "tokens_col",
     r"tokens_col='tokens' has type string"),
    ("invalid_sets: a double id", lambda s: invalid_sets(_sets(s).withColumn("id", F.col("id").cast("double"))),
     "id_col", r"id_col='id' has type double"),
    ("invalid_sets: a stream beside a static input", lambda s: invalid_sets(
        _stream(s).selectExpr("id", "array(name) as tokens", "ts"), _sets(s)), "right",
     r"left and right must both be streaming or both static"),
    ("invalid_documents: documents of the wrong type", lambda s: invalid_documents(_docs(s, "id")), "doc_col",
     r"doc_col='doc' has type bigint"),
    ("invalid_documents: a double id", lambda s: invalid_documents(_docs(s).withColumn("id", F.col("id").cast("double"))),
     "id_col", r"id_col='id' has type double"),
    ("invalid_documents: a stream beside a static input", lambda s: invalid_documents(
        _stream(s).selectExpr("id", "name as doc"), _docs(s)), "other",
     r"docs and other must both be streaming or both static"),
    ("invalid_equi_records: no key column", lambda s: invalid_equi_records(_rows(s), _rows(s), on="key"), "on",
     r"on='key' is not a column of the left input"),
    ("invalid_equi_records: keys of two types", lambda s: invalid_equi_records(_rows(s), _rows(s, "cast(id as string)"),
                                                                              on="k"),
     "on", r"join key 'k' is bigint on the left and string on the right"),
    ("invalid_equi_records: a stream beside a static input", lambda s: invalid_equi_records(
        _stream(s).selectExpr("id % 2 as k", "id"), _rows(s), on="k"), "right",
     r"left and right must both be streaming or both static"),
    ("invalid_equi_records: an input that is not a DataFrame", lambda s: invalid_equi_records(_rows(s), [], on="k"),
     "right", r"right must be a pyspark.sql.DataFrame .*got 'list'"),
]


def _jobs_during(spark, what: str, call) -> tuple[list[int], BaseException | None]:
    """The Spark jobs ``call()`` ran (it runs in a job group of its own) and what it raised."""
    group = f"settings-{uuid.uuid4().hex}"
    sc = spark.sparkContext
    sc.setJobGroup(group, what)
    raised = None
    try:
        call()
    except Exception as e:  # noqa: BLE001 - the caller checks what it is
        raised = e
    finally:
        sc.setJobGroup(None, None)
    return list(sc.statusTracker().getJobIdsForGroup(group)), raised


def _refused_before_any_job(spark, what: str, call) -> SettingError:
    """The SettingError ``call()`` raises, asserting no Spark job ran before it."""
    jobs, raised = _jobs_during(spark, what, call)
    assert isinstance(raised, SettingError), f"{what}: {raised!r}"
    assert jobs == [], f"{what}: {len(jobs)} Spark job(s) ran before the refusal"
    return raised


def test_the_job_check_sees_the_jobs_of_a_call(spark):
    """The check above would see a job that ran before a refusal (it cannot pass by accident)."""
    def count_then_refuse():
        spark.range(3).count()
        raise SettingError("x", "is refused after a job", show_value=False)

    jobs, raised = _jobs_during(spark, "a job, then a refusal", count_then_refuse)
    assert isinstance(raised, SettingError) and len(jobs) == 1
    with pytest.raises(AssertionError, match="1 Spark job"):
        _refused_before_any_job(spark, "a job, then a refusal", count_then_refuse)


@pytest.mark.parametrize("what, make, setting, message", CASES, ids=[c[0] for c in CASES])
def test_a_mistake_is_a_setting_error_before_any_job(spark, what, make, setting, message):
    left, kwargs = make(spark)
    right = kwargs.pop("right", None)
    error = _refused_before_any_job(spark, what, lambda: similarity_join(left, right, **kwargs))
    assert error.name == setting and re.search(message, str(error)), str(error)


@pytest.mark.parametrize("what, call, setting, message", OTHERS, ids=[c[0] for c in OTHERS])
def test_every_operator_refuses_a_mistake_before_any_job(spark, what, call, setting, message):
    error = _refused_before_any_job(spark, what, lambda: call(spark))
    assert error.name == setting and re.search(message, str(error)), str(error)


@pytest.mark.parametrize("what, call, setting, message", DEAD_LETTERS, ids=[c[0] for c in DEAD_LETTERS])
def test_every_dead_letter_function_refuses_a_mistake_before_any_job(spark, what, call, setting, message):
    error = _refused_before_any_job(spark, what, lambda: call(spark))
    assert error.name == setting and re.search(message, str(error)), str(error)


def test_a_column_of_the_wrong_type_is_still_a_type_error(spark):
    with pytest.raises(TypeError, match="id_col='id' has type double"):
        similarity_join(_names(spark, "double"), threshold=1, metric="levenshtein", value_col="name")


def test_edit_is_levenshtein(spark):
    """``metric="edit"`` was accepted by the core and refused by the settings check."""
    pairs = similarity_join(_names(spark), threshold=1, metric="edit", value_col="name").collect()
    assert [(r.left_id, r.right_id, r.distance) for r in pairs] == [(1, 2, 1.0)]


def test_an_input_that_is_not_a_dataframe_is_still_a_type_error(spark):
    with pytest.raises(TypeError, match="right is required"):
        equi_join(_rows(spark), None, on="k")
