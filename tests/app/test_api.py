"""What a newcomer meets in the Python API: settings refused before anything runs with the valid
choices named, ids that keep their meaning, empty inputs that join to nothing alike, and the
summary's latency split into start-up and steady state."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from driftjoin import SettingError, similarity_join
from driftjoin.app.console import keeping_up
from driftjoin.app.report import STARTUP_BATCHES, summary
from driftjoin.spark.runtime.session import drop_quiet_log
from driftjoin.spark.runtime.stats import LATENCY_BOUNDS, STAMP, latency_histogram
from driftjoin.spark.similarity.control import BalanceController
from driftjoin.spark.similarity.settings import BALANCE_OPTIONS

REPO = Path(__file__).resolve().parents[2]


def test_balance_options_are_checked_before_anything_runs():
    # the settings are checked before the inputs are looked at: no DataFrame needed to see it
    with pytest.raises(SettingError, match=r"balance_options needs balance='s3j' or 'greedy'"):
        similarity_join(None, threshold=0.1, balance_options={"split": True})
    with pytest.raises(SettingError, match=r"balance_options has unknown key\(s\) 'monitoring'; valid keys: at, "
                                           r"di_threshold, latency_spread, load, migration_factor, monitoring_window"):
        similarity_join(None, threshold=0.1, balance="s3j", balance_options={"monitoring": 30})
    with pytest.raises(SettingError, match=r"balance_options\['monitoring_window'\] must be a finite number > 0"):
        similarity_join(None, threshold=0.1, balance="greedy", balance_options={"monitoring_window": 0})


def test_the_checked_balance_options_are_the_controllers_settings():
    from dataclasses import fields

    settings = {f.name for f in fields(BalanceController) if f.init and not f.name.startswith("_")}
    internal = {"metrics_dir", "parallelism", "dim", "policy", "decisions", "bins", "force_next", "last_loads"}
    assert set(BALANCE_OPTIONS) == settings - internal


@pytest.mark.spark
def test_ids_keep_their_type_or_are_refused(spark):
    df = spark.createDataFrame([(0.0, [1.0, 0.0]), (1.0, [1.0, 0.001])], "id double, vector array<double>")
    with pytest.raises(TypeError, match=r"id_col='id' has type double; ids must be integers or strings .*cast\('long'\)"):
        similarity_join(df, threshold=0.1, parallelism=2)
    stamped = spark.sql("select timestamp'2024-01-01' as id, array(1d, 0d) as vector")
    with pytest.raises(TypeError, match="id_col='id' has type timestamp"):
        similarity_join(stamped, threshold=0.1, parallelism=2)
    mixed = spark.createDataFrame([("a", [1.0, 0.0])], "id string, vector array<double>")
    ints = spark.createDataFrame([(7, [1.0, 0.001])], "id int, vector array<double>")
    assert [(r.left_id, r.right_id) for r in similarity_join(mixed, ints, threshold=0.1, parallelism=2).collect()] == [("a", "7")]


@pytest.mark.spark
def test_an_empty_static_input_joins_to_nothing_as_a_self_join_and_two_sided(spark):
    empty = spark.createDataFrame([], "id long, vector array<double>")
    self_join = similarity_join(empty, threshold=0.1, parallelism=2)
    two_sided = similarity_join(empty, empty, threshold=0.1, parallelism=2)
    assert self_join.count() == two_sided.count() == 0 and self_join.columns == two_sided.columns
    blank = spark.createDataFrame([(1, []), (2, None)], "id long, vector array<double>")
    from driftjoin import invalid_records

    assert similarity_join(blank, threshold=0.1, parallelism=2).count() == 0
    assert sorted((r.id, r.reason) for r in invalid_records(blank).collect()) == [(1, "empty vector"), (2, "missing vector")]


def _stats(folder: Path, worker: int, batch: int, first: int, latency: float) -> None:
    record = {"worker": worker, "seq": batch, "time": 1000.0 + batch, "comparisons": 10, "pairs": 5, "memberships": 20,
              "state_bytes": 0, "records": 10, "worksets": {}, "latency_hist": latency_histogram(np.full(5, latency)),
              STAMP: {"query": "q", "run": f"run-{first}", "batch": batch, "first_batch": first, "checkpoint": None,
                      "written": 1000.0 + batch}}
    path = folder / "computation" / str(worker) / "q" / f"{batch:012d}-run-{first}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record))


def test_summary_reports_steady_latency_apart_from_start_up(tmp_path):
    for batch in range(6):  # a first run of 6 batches whose first two are slow
        _stats(tmp_path, 0, batch, 0, 20.0 if batch < STARTUP_BATCHES else 0.5)
    totals, per_worker = summary(str(tmp_path))
    row = per_worker.iloc[0]
    assert row.p99_latency_s < 1.0 < 10.0 < row.startup_p99_latency_s
    assert (totals["batches"], totals["startup_batches"], totals["records_in"]) == (6, 2, 60)
    _stats(tmp_path, 0, 6, 6, 30.0)  # a restart: its first batch is start-up again
    restarted, workers = summary(str(tmp_path), run_id="run-6")
    assert restarted["records_in"] == 10 and np.isnan(workers.iloc[0].p99_latency_s)
    assert workers.iloc[0].startup_p99_latency_s == pytest.approx(LATENCY_BOUNDS[np.searchsorted(LATENCY_BOUNDS, 30.0)])


def test_keeping_up_compares_steady_batches_with_the_trigger():
    def report(batch: int, seconds: float, rows: int = 1000, arriving: float = 1000.0) -> dict:
        return {"batchId": batch, "numInputRows": rows, "durationMs": {"triggerExecution": seconds * 1000},
                "inputRowsPerSecond": arriving}

    slow_start = [report(0, 20.0), report(1, 10.0)]
    assert keeping_up(slow_start + [report(b, 0.8) for b in range(2, 8)], 1.0) == "yes"
    behind = keeping_up(slow_start + [report(b, 3.2) for b in range(2, 8)], 1.0)
    assert behind.startswith("no: the median micro-batch took 3.2 s, longer than the 1 s trigger")
    back_to_back = keeping_up(slow_start + [report(b, 2.0, rows=4000, arriving=4000.0) for b in range(2, 8)], None)
    assert back_to_back.startswith("no: 2,000 records/s processed of 4,000 arriving")
    assert keeping_up(slow_start, 1.0) is None


def test_a_default_spark_log_is_removed_at_exit_unless_it_holds_an_error(tmp_path):
    quiet, failed = tmp_path / "quiet.log", tmp_path / "failed.log"
    quiet.write_text("26/01/01 WARN NativeCodeLoader: no native library\n")
    failed.write_text("26/01/01 ERROR MicroBatchExecution: Query terminated with error\n")
    drop_quiet_log(str(quiet))
    drop_quiet_log(str(failed))
    assert not quiet.exists() and failed.exists()


def test_the_first_readme_example_sets_a_trigger_that_a_laptop_keeps_up_with():
    readme = (REPO / "README.md").read_text()
    first = re.search(r"```python\n(.*?)```", readme, re.DOTALL).group(1)
    assert "similarity_join(" in first and re.search(r"\.trigger\(processingTime=", first)


def test_an_autoscaler_window_reads_as_one_line():
    from driftjoin.control.autoscale.controller import WindowRecord
    from driftjoin.control.autoscale.metrics import WindowMetrics

    metrics = WindowMetrics(time=0.0, duration=30.0, workers=2, input_rate=4000.0, processed_rate=3500.0, lag=12000.0,
                            lag_change_rate=500.0)
    line = str(WindowRecord(metrics, 2, 3))
    assert "2 workers, 4,000 records/s in, 3,500 processed, lag 12,000 records, -> 3 workers" in line
    assert "\n" not in line and "WindowMetrics(" not in line


@pytest.mark.spark
def test_natural_join_gives_window_start_and_end_for_a_duration_window(spark):
    from driftjoin import natural_join

    docs = spark.createDataFrame([(1, '{"a": 1}', 65.0), (2, '{"a": 1}', 70.0)], "id long, doc string, t double")
    row = natural_join(docs, window="1 minute", time_col="t", partitions=2).collect()[0]
    assert (row.window, str(row.window_start), str(row.window_end)) == (1, "1970-01-01 00:01:00", "1970-01-01 00:02:00")
