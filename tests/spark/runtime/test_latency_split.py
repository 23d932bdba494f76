"""The driver's batch timings and the split of a pair's latency into waiting, work and hand-over."""

from __future__ import annotations

import json
import time

import numpy as np

from driftjoin.app.report import latency_split, summary
from driftjoin.spark.runtime.stats import STAMP, read_batches, read_stats


def _write(folder, name, ids, seed):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps({"id": int(i), "vector": rng.uniform(0, 1, 2).tolist()}) + "\n"
                                       for i in ids))


def test_each_committed_batch_is_timed_and_the_parts_of_the_latency_fit_in_it(spark, tmp_path):
    from driftjoin import similarity_join

    for b in range(3):
        _write(tmp_path / "L", f"{b}.json", range(b * 1000, b * 1000 + 300), b)
        _write(tmp_path / "R", f"{b}.json", range(b * 1000 + 500, b * 1000 + 800), 10 + b)
    metrics = str(tmp_path / "metrics")

    def read(side):
        return spark.readStream.schema("id long, vector array<double>").option("maxFilesPerTrigger", 1).json(str(tmp_path / side))

    pairs = similarity_join(read("L"), read("R"), threshold=0.05, metric="euclidean", window=None, parallelism=2, dim=2,
                            metrics_dir=metrics)
    q = (pairs.writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    records = [s for s in read_stats(metrics, "computation")]
    # each key's state round trips in the batch are counted (at least the meta value's read)
    assert records and all(part["calls"] >= 1 for s in records for part in s["state"].values())
    batches = {s[STAMP]["batch"] for s in records}
    deadline = time.time() + 60  # the listener hears the last batch a moment after the query ends
    while time.time() < deadline and {b for _, b in read_batches(metrics)} < batches:
        time.sleep(0.2)
    timings = read_batches(metrics, str(q.id))
    assert {b for _, b in timings} >= batches == {0, 1, 2}
    for s in records:  # every emission lies inside its batch
        t = timings[(str(q.id), s[STAMP]["batch"])]
        assert t["started"] <= s["time"] <= t["committed"]
        assert t["rows"] == 600
    split = latency_split(metrics, steady=False)
    assert set(split["worker"]) == {s["worker"] for s in records if s["pairs"]}
    assert split["pairs"].sum() == summary(metrics)[0]["pairs_out"] > 0
    assert (split[["wait_p50_s", "work_p50_s", "handover_p50_s", "handover_p99_s"]] >= 0).all().all()
    longest = max(t["committed"] - t["started"] for t in timings.values())
    # each part fits in a batch (their p99s may come from different batches: they need not add up to one)
    assert (split[["work_p99_s", "handover_p99_s", "batch_p50_s"]] <= longest + 1e-6).all().all()
    # without an ingestion column a record's time is its batch's: it waits for nothing, and what
    # the histogram's bucket leaves (half a bucket, 6% of the latency) is all that can show as waiting
    assert (split["wait_p99_s"] <= 0.07 * longest + 0.01).all()
    steady = latency_split(metrics)  # each run's first two batches with data are start-up: batch 2 is left
    assert steady["pairs"].sum() == sum(s["pairs"] for s in records if s[STAMP]["batch"] == 2)
