"""The autoscaling controller on a real query: metrics gathered, bad settings refused up front.

Local mode has no executors to add, so the controller runs as ``dry_run`` here (decides and
records); tests/spark/runtime/test_autoscale_cluster.py scales real executors on the standalone
cluster when DRIFTJOIN_CLUSTER is set.
"""

from __future__ import annotations

import time

import pytest

from driftjoin.control.autoscale import autoscale
from driftjoin.control.autoscale.collector import offset_records

pytestmark = pytest.mark.spark


def test_offsets_that_count_records():
    assert offset_records('{"index": 1200, "start": 17.5}') == 1200
    assert offset_records('{"topic": {"0": 10, "1": 32}}') == 42
    assert offset_records('{"logOffset": 3}') is None
    assert offset_records(None) is None
    assert offset_records("None") is None and offset_records("null") is None  # PySpark's missing offset (file source)


@pytest.mark.parametrize("kwargs, message", [
    (dict(policy="ds3"), "does not exist"),
    (dict(policy="hpa-cpu", target=1.2), r"\(0, 1\]"),
    (dict(policy="ds2", min_workers=2, max_workers=1), "above max_workers"),
    (dict(policy="ds2", min_workers=3), "above the 2 state partitions"),
    (dict(policy="ds2"), "autoscaling needs a cluster manager"),
    (dict(policy="batch-interval", dry_run=True), "trigger_interval"),
    (dict(policy="spark-dynamic-allocation"), "dynamic_allocation_conf"),
    (dict(policy="ds2", mode="restart"), "needs start="),
])
def test_bad_settings_fail_before_the_query_starts(spark, kwargs, message):
    with pytest.raises(ValueError, match=message):
        autoscale(spark, **kwargs)
    assert not spark.streams.active


def test_dry_run_measures_a_plain_aggregation(spark, tmp_path):
    stream = spark.readStream.format("driftjoin").option("schedule", "increasing:low=500,high=3000,duration=20").load()

    def start():
        return (stream.groupBy((stream.id % 5).alias("k")).count().writeStream.format("noop").outputMode("update")
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())

    ctl = autoscale(spark, "hpa-varga", dry_run=True, monitoring_window=6, cooldown=0, start=start)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and sum(r.metrics.batches for r in ctl.history) < 3:
            time.sleep(1)
    finally:
        ctl.stop()
        ctl.query.stop()
    windows = [r.metrics for r in ctl.history if r.metrics.batches]
    assert windows, "no monitoring window saw a batch"
    m = windows[-1]
    assert m.input_rate > 0 and m.processed_rate > 0 and m.lag >= 0
    assert 0 <= m.idle_per_second <= 1 and 0 <= m.cpu_utilisation <= 1
    assert m.latency_p50 >= 0 and m.latency_p95 >= m.latency_p50
    assert [s.name for s in m.stages][:2] == ["stage0", "stage1"] and m.stages[0].records_in > 0
    assert m.stages[1].upstream == ("stage0",)
    assert "stateStoreSave" in m.operators
    assert all(r.error == "" for r in ctl.history)


def test_dry_run_reads_the_backlog_of_a_file_source(spark, tmp_path):
    data = tmp_path / "in"
    data.mkdir()
    for i in range(12):
        (data / f"f{i:02d}.json").write_text("".join(f'{{"id": {50 * i + j}}}\n' for j in range(50)))
    stream = spark.readStream.schema("id long").option("maxFilesPerTrigger", 1).json(str(data))

    def start():
        return (stream.groupBy((stream.id % 3).alias("k")).count().writeStream.format("noop").outputMode("update")
                .option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())

    ctl = autoscale(spark, "dhalion", dry_run=True, monitoring_window=3, cooldown=0, start=start)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not any(r.metrics.lag > 0 for r in ctl.history):
            time.sleep(1)
    finally:
        ctl.stop()
        ctl.query.stop()
    lags = [r.metrics.lag for r in ctl.history if r.metrics.lag > 0]
    assert lags, "no window saw the files the source had not taken"
    assert all(lag % 50 == 0 and lag <= 11 * 50 for lag in lags), lags    # whole files of 50 records


def test_a_stopped_querys_late_progress_adds_no_lag(spark, tmp_path):
    """Spark's listener bus may deliver a query's last progress after the query stopped, even to
    a collector attached since; a generator's schedule goes on "offering" records, so that lag
    grew without end (CI: 10,838 records in the first window of the next test's query). Only the
    sources of active queries count; while the query runs its backlog does."""
    from driftjoin.control.autoscale.collector import QueryMetricsCollector

    stream = spark.readStream.format("driftjoin").option("schedule", "constant:high=2000,duration=600").load()
    q = (stream.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(processingTime="1 second").start())
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (q.lastProgress and q.lastProgress.numInputRows):
            time.sleep(0.2)
        last = q.lastProgress
        assert last is not None and last.numInputRows, "the query read nothing"
        running = QueryMetricsCollector(spark)
        running.add_progress(last)
        time.sleep(0.5)                         # the schedule offers about 1,000 records more
        assert running.window().lag > 0
    finally:
        q.stop()
    stopped = QueryMetricsCollector(spark)      # attached after the stop, then the late event
    stopped.add_progress(last)
    time.sleep(0.5)
    assert stopped.window().lag == 0


def test_a_new_collector_counts_no_stage_of_earlier_queries(spark, tmp_path):
    """The status store keeps the stages of every earlier query of the session (a warm-up, the
    previous run of a benchmark): a controller attached now must not read them as its first
    window's work (DS2 once scaled up on a warm-up's slow first batches)."""
    from driftjoin.control.autoscale.collector import QueryMetricsCollector

    data = tmp_path / "in"
    data.mkdir()
    (data / "a.json").write_text("".join(f'{{"id": {i}}}\n' for i in range(100)))
    stream = spark.readStream.schema("id long").json(str(data))
    earlier = (stream.groupBy((stream.id % 3).alias("k")).count().writeStream.format("noop").outputMode("update")
               .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    earlier.awaitTermination(120)
    fresh = QueryMetricsCollector(spark)
    assert fresh.window().stages == ()
    fresh._last_stage = -1                      # read from the store's beginning: the earlier query is there
    assert fresh._stages(), "the earlier query left no stage to ignore"


def test_no_decision_before_the_query_has_read_records(spark):
    """Live, Dhalion and HPA-Varga scaled up in the first window of every run: the source's lag
    grew while the query had not read anything yet. No decision until it has; a window with
    nothing read after that (a long batch) still counts."""
    from driftjoin.control.autoscale.controller import AutoscaleController
    from driftjoin.control.autoscale.metrics import WindowMetrics
    from driftjoin.control.autoscale.policies import Dhalion, Scaler

    def window(t: float, processed: float, lag: float, growth: float) -> WindowMetrics:
        return WindowMetrics(time=t, duration=10.0, workers=1, input_rate=1000.0, processed_rate=processed, lag=lag,
                             lag_change_rate=growth, batches=1, batch_duration=1.0, trigger_interval=2.0)

    class Collector:
        def __init__(self, windows: list[WindowMetrics]) -> None:
            self.windows = windows

        def window(self) -> WindowMetrics:
            return self.windows.pop(0)

        def workers(self) -> int:
            return 1

    ctl = AutoscaleController(spark, Scaler(Dhalion(), 1, 4, cooldown=0.0), monitoring_window=10.0, mode="live",
                              start=None, trigger_interval=2.0, dry_run=True, executor_timeout=1.0)
    ctl.collector = Collector([window(0.0, 0.0, 3000.0, 300.0),       # started, nothing read: lag grows
                               window(10.0, 1000.0, 3000.0, 0.0),     # keeps up
                               window(20.0, 0.0, 13000.0, 1000.0)])   # a batch longer than the window
    assert [ctl.step().target for _ in range(3)] == [None, None, 4]


def test_a_vetoed_scale_up_is_in_the_history(spark):
    """The joint plane's rule 1 (balance before scaling up) vetoes a policy's scale-up: the
    window's record keeps the target it vetoed, so a run's decision log shows the rule firing."""
    from driftjoin.control.autoscale.controller import AutoscaleController
    from driftjoin.control.autoscale.metrics import WindowMetrics
    from driftjoin.control.autoscale.policies import Dhalion, Scaler

    class Collector:
        def window(self) -> WindowMetrics:
            return WindowMetrics(time=10.0, duration=10.0, workers=1, input_rate=1000.0, processed_rate=500.0,
                                 lag=13000.0, lag_change_rate=1000.0, batches=1, batch_duration=12.0, trigger_interval=2.0)

        def workers(self) -> int:
            return 1

    ctl = AutoscaleController(spark, Scaler(Dhalion(), 1, 4, cooldown=0.0), monitoring_window=10.0, mode="live",
                              start=None, trigger_interval=2.0, dry_run=True, executor_timeout=1.0)
    ctl.collector = Collector()
    ctl.before_scale = lambda m, current, target: False
    record = ctl.step()
    wanted = record.vetoed
    assert record.target is None and wanted is not None and wanted > 1 and record.row()["vetoed"] == wanted
    ctl.before_scale = None
    record = ctl.step()
    assert (record.target, record.vetoed) == (wanted, None)
