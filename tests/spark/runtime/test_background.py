"""A Spark job started in the background belongs to the caller's job group, and its result or
error reaches the caller."""

from __future__ import annotations

import pytest

from driftjoin.spark.runtime.background import in_background


def test_the_result_and_the_error_reach_the_caller():
    assert in_background(lambda: 6 * 7)() == 42

    def fail() -> int:
        raise ValueError("counted wrong")

    waiting = in_background(fail)
    with pytest.raises(ValueError, match="counted wrong"):
        waiting()


@pytest.mark.spark
def test_a_background_job_keeps_the_callers_job_group(spark):
    sc = spark.sparkContext
    sc.setJobGroup("driftjoin-background-test", "counted in the background")
    try:
        n = in_background(lambda: spark.range(1000).count())()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
    assert n == 1000
    assert sc.statusTracker().getJobIdsForGroup("driftjoin-background-test")
