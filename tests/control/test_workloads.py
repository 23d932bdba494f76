"""The thesis's five workload shapes as rate schedules, and the generator sources driven by them."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.generators.rates import SHAPES, RateSchedule


def test_shapes_follow_their_definition():
    inc = RateSchedule.parse("increasing:low=0,high=1000,duration=100")
    assert inc.rate(0) == 0 and inc.rate(50) == 500 and inc.rate(100) == 1000 and inc.rate(500) == 1000
    dec = RateSchedule.parse("decreasing:low=0,high=1000,duration=100")
    assert dec.rate(0) == 1000 and dec.rate(100) == 0
    cos = RateSchedule.parse("cosine:low=100,high=300,duration=60")
    assert cos.rate(0) == pytest.approx(100) and cos.rate(30) == pytest.approx(300) and cos.rate(60) == pytest.approx(100)
    steps = RateSchedule.parse("steps:low=200,high=2000,duration=90")
    assert [float(steps.rate(t)) for t in (10, 40, 70)] == [200, 2000, 1100]
    rnd = RateSchedule.parse("random:low=100,high=900,duration=300,step=10,seed=3")
    rates = rnd.rate(np.arange(0, 300, 10) + 5)
    assert rates[0] == 500 and np.all((rates >= 100) & (rates <= 900)) and len(set(rates.tolist())) > 5
    assert np.array_equal(rates, RateSchedule.parse(rnd.spec()).rate(np.arange(0, 300, 10) + 5))
    # records offered = the integral of the rate
    assert inc.count(100) == pytest.approx(50_000) and steps.count(90) == pytest.approx(30 * (200 + 2000 + 1100))


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from(SHAPES), low=st.floats(0, 500), extra=st.floats(1, 3000), duration=st.floats(5, 3000),
       seed=st.integers(0, 99))
def test_time_of_inverts_count(shape, low, extra, duration, seed):
    r = RateSchedule(shape, low=low, high=low + extra, duration=duration, seed=seed)
    n = int(r.count(duration * 1.5))
    k = np.unique(np.linspace(0, n, 200).astype(np.int64))
    t = r.time_of(k)
    assert np.all(np.diff(t) >= 0)
    np.testing.assert_allclose(r.count(t), k, atol=1e-6 * max(1, n))
    probe = np.linspace(0, duration * 1.2, 97)
    np.testing.assert_allclose(RateSchedule.parse(r.spec()).rate(probe), r.rate(probe), rtol=1e-5)


def test_whole_number_settings_count_like_their_floats():
    """A step or duration given as an int (``step=60``) gives the same schedule as the float."""
    for shape in SHAPES:
        whole = RateSchedule(shape, low=100, high=2000, duration=600, step=60, seed=7)
        real = RateSchedule(shape, low=100.0, high=2000.0, duration=600.0, step=60.0, seed=7)
        t = np.array([0.0, 30.5, 61.0, 599.0])
        np.testing.assert_allclose(whole.count(t), real.count(t))
        np.testing.assert_allclose(whole.time_of(np.array([10, 5000])), real.time_of(np.array([10.0, 5000.0])))


@pytest.mark.parametrize("spec, message", [
    ("sine:low=1,high=2", "choose one of"),
    ("cosine:low=5,high=2", "low <= high"),
    ("steps:high=10,levels=0/2", "fractions"),
    ("cosine:high=10,peak=3", "unknown setting"),
    ("cosine:high=ten", "not a number"),
])
def test_bad_schedules_fail_with_advice(spec, message):
    with pytest.raises(ValueError, match=message):
        RateSchedule.parse(spec)


@pytest.mark.spark
def test_generator_follows_the_schedule_and_replays_identically(spark):
    spec = "steps:low=100,high=1000,duration=6"
    static = lambda: (spark.read.format("driftjoin").option("total", 2600).option("schedule", spec)
                      .option("start", 0).option("partitions", 3).load())
    rows = sorted(static().collect())
    assert rows == sorted(static().collect())
    ts = np.array([r.ts.timestamp() for r in rows])
    np.testing.assert_allclose(ts, RateSchedule.parse(spec).time_of(np.arange(2600)), atol=2e-6)
    docs = spark.read.format("driftjoin-docs").option("total", 50).option("schedule", spec).option("start", 0).load()
    assert sorted(r.ts.timestamp() for r in docs.collect())[-1] == pytest.approx(0.5 - 0.01)
    with pytest.raises(Exception, match="schedule"):
        spark.read.format("driftjoin").option("total", 10).option("schedule", "ramp").load().count()


@pytest.mark.spark
def test_paced_stream_reports_its_offered_offset(spark, tmp_path):
    spec = "increasing:low=200,high=2000,duration=30"
    stream = spark.readStream.format("driftjoin").option("schedule", spec).load()
    q = (stream.groupBy((stream.id % 3).alias("k")).count().writeStream.format("noop").outputMode("update")
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())
    try:
        deadline = time.time() + 90
        while time.time() < deadline and sum(1 for p in q.recentProgress if p.numInputRows) < 3:
            time.sleep(0.5)
        progress = [p for p in q.recentProgress if p.numInputRows]
    finally:
        q.stop()
    assert len(progress) >= 3
    latest = json.loads(progress[-1].sources[0].latestOffset)
    end = json.loads(progress[-1].sources[0].endOffset)
    assert latest["schedule"] == RateSchedule.parse(spec).spec()
    assert latest["index"] >= end["index"] > 0 and latest["start"] == end["start"]
