"""The plans kept beside a checkpoint: a restart with other settings is refused when the query
starts, also with no new input, with the changed settings in the user's terms."""

from __future__ import annotations

import json

import pytest

from driftjoin.spark.runtime.errors import explain_error
from driftjoin.spark.runtime.plan_guard import digest, refusal
from driftjoin.spark.runtime.plan_store import PLAN_FILE, Planned, refused
from driftjoin.spark.similarity.api import similarity_join
from driftjoin.windows import windowing

SETTINGS = {"operator": "similarity_join", "threshold": 0.001, "parallelism": 2, "centroids": digest([[0.0, 1.0]]),
            **windowing("1 minute").settings(), "time_basis": "batch", "metrics_dir": "/a"}


def _planned(**changed) -> Planned:
    return Planned("similarity_join", {**SETTINGS, **changed}, frozenset({"metrics_dir"}), {})


def test_refusal_names_settings_in_the_users_terms():
    stored = [_planned().stored()]
    reason, _ = refused(stored, [_planned(threshold=0.002, centroids=digest([[1.0, 0.0]]), time_basis="event",
                                          **windowing("20 seconds", "5 seconds").settings())])
    assert "threshold: checkpoint has 0.001, this query has 0.002" in reason
    assert "centroids: differ (drawn from seed= and bounds=" in reason and SETTINGS["centroids"] not in reason
    assert "window: checkpoint has 60 s, this query has 20 s" in reason
    assert "slide: checkpoint has 60 s, this query has 5 s" in reason
    assert "the kind of window: checkpoint has 'tumbling', this query has 'sliding'" in reason
    assert "checkpoint has the micro-batch time (no time_col= or ingest_col=), this query has event time (time_col=)" in reason
    assert refused(stored, [_planned(metrics_dir="/b")]) == (None, True)  # adopted, and stored again
    assert refused(stored, [_planned()]) == (None, False)
    other, _ = refused(stored, [Planned("natural_join", {}, frozenset(), {})])
    assert "operators (natural_join) are not the ones its checkpoint was written by (similarity_join)" in other
    assert refusal("op", {"stages": (1, 2)}) .startswith("op: this query was restarted from a checkpoint written with "
                                                          "other settings (balance=: the checkpoint was written without "
                                                          "a balancer, this query runs with one)")


@pytest.mark.spark
def test_a_changed_threshold_is_refused_when_the_query_starts_without_new_input(spark, tmp_path):
    def run(threshold):
        stream = (spark.readStream.format("driftjoin").option("total", 300).option("rate", 1000)
                  .option("pace", "false").load())
        pairs = similarity_join(stream, threshold=threshold, dim=2, parallelism=2, ingest_col="ts")
        q = (pairs.select("left_id", "right_id").writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()
        return q

    assert run(0.01).exception() is None
    stored = json.loads((tmp_path / "ck" / PLAN_FILE).read_text())
    assert stored["operators"][0]["settings"]["threshold"] == 0.01
    with pytest.raises(Exception) as failure:
        run(0.02)  # every record was read: no batch would run to check the plan
    line = explain_error(failure.value)
    assert line.startswith("PlanChangedError: similarity_join: this query was restarted from a checkpoint")
    assert "threshold: checkpoint has 0.01, this query has 0.02" in line and "\n" not in line
    assert run(0.01).exception() is None  # the checkpoint's own settings go on
    assert json.loads((tmp_path / "ck" / PLAN_FILE).read_text()) == stored
