"""``bench batch``: its MLlib tuning skips dominated settings (the property it relies on, checked on MLlib
itself), and a method that fails is reported in its cell while the run goes on."""

from __future__ import annotations

import numpy as np
import pytest

from driftjoin.app.bench import _attempt, _dominated


def test_dominated_needs_more_tables_and_a_power_of_two_bucket():
    met = [{"tables": 2, "bucket": 1.0}]
    assert _dominated(2, 1.0, met) and _dominated(4, 2.0, met) and _dominated(8, 4.0, met)
    assert not _dominated(1, 4.0, met)  # fewer tables: fewer candidates, may miss the recall
    assert not _dominated(4, 3.0, met)  # not a union of the met setting's buckets
    assert not _dominated(8, 0.5, met)
    assert not _dominated(8, 4.0, [])


@pytest.mark.parametrize("bucket", [1.7])
def test_mllib_hash_tables_are_nested_by_tables_and_bucket_length(spark, bucket):
    """The first k hash tables of a seeded model do not depend on the number of tables; 2b and 4b buckets nest b's."""
    from pyspark.ml.feature import BucketedRandomProjectionLSH
    from pyspark.ml.linalg import Vectors

    rng = np.random.default_rng(5)
    x = rng.normal(size=(300, 7)) * 3
    df = spark.createDataFrame([(i, Vectors.dense(v.tolist())) for i, v in enumerate(x)], ["id", "f"])

    def hashes(tables: int, length: float) -> np.ndarray:
        model = BucketedRandomProjectionLSH(inputCol="f", outputCol="h", bucketLength=length, numHashTables=tables,
                                            seed=1).fit(df)
        rows = model.transform(df).orderBy("id").collect()
        return np.array([[h[0] for h in r["h"]] for r in rows])

    base = hashes(1, bucket)
    assert len(np.unique(base)) > 3  # the check below compares real bucket boundaries
    np.testing.assert_array_equal(hashes(4, bucket)[:, :1], base)
    two = hashes(2, bucket)
    np.testing.assert_array_equal(hashes(8, bucket)[:, :2], two)
    np.testing.assert_array_equal(hashes(2, 2 * bucket), np.floor(two / 2))
    np.testing.assert_array_equal(hashes(2, 4 * bucket), np.floor(two / 4))


def test_a_failing_method_is_reported_not_raised():
    assert _attempt(lambda: (7, 1.5)) == ((7, 1.5), None)
    assert _attempt(lambda: 1 / 0) == ((None, None), "division by zero")
    crash = RuntimeError("An error occurred while calling o1.collectToPython.\n: org.apache.spark.SparkException: "
                         "Job aborted: Python worker exited unexpectedly (crashed)")
    assert "Python worker crashed" in _attempt(lambda: (_ for _ in ()).throw(crash))[1]
    other = RuntimeError("An error occurred while calling o1.collectToPython.\n: java.lang.IllegalStateException: boom")
    assert _attempt(lambda: (_ for _ in ()).throw(other))[1] == ": java.lang.IllegalStateException: boom"
