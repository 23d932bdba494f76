"""``driftjoin run`` job files that ask for entities (``[entities]``): the keys checked before Spark
starts, the sink holding entity changes, and the summary reporting entities, merges, the largest
entity and the links a guard refused."""

from __future__ import annotations

import pytest
from rich.console import Console

from driftjoin import SettingError, current_entities
from driftjoin.app.console import print_summary, watch
from driftjoin.app.runner import JobConfig, start_job

JOB = {"source": {"kind": "generator", "total": 150, "pace": False, "dim": 2},
       "join": {"threshold": 0.08, "metric": "euclidean", "parallelism": 2},
       "sink": {"path": "out/entities", "checkpoint": "out/ck", "trigger": "available-now"}}


def test_entities_table_is_checked_before_the_start(tmp_path):
    cfg = JobConfig.from_dict({**JOB, "entities": {"max_size": 3, "expire_after": "1 minute"}}, base=tmp_path)
    assert cfg.entities == {"max_size": 3, "expire_after": "1 minute", "time_col": "ingest_time"}
    with pytest.raises(SettingError, match=r"\[entities\] max_size must be an integer >= 2"):
        JobConfig.from_dict({**JOB, "entities": {"max_size": 1}}, base=tmp_path)
    with pytest.raises(SettingError, match=r"\[entities\] left_col is not a key of \[entities\]"):
        JobConfig.from_dict({**JOB, "entities": {"left_col": "a"}}, base=tmp_path)
    self_join = {**JOB, "source": {**JOB["source"], "two_streams": False}, "entities": {"one_per_source": True}}
    with pytest.raises(SettingError, match=r"\[entities\] one_per_source needs a job of two inputs"):
        JobConfig.from_dict(self_join, base=tmp_path)


@pytest.mark.spark
def test_an_entities_job_writes_entity_changes_and_its_summary_counts_them(spark, tmp_path):
    cfg = JobConfig.from_dict({**JOB, "entities": {"max_size": 2, "one_per_source": True}}, base=tmp_path)
    job = start_job(spark, cfg)
    console = Console(record=True, width=200)
    outcome = watch(job.queries, console, total=cfg.expected_records)
    rows = print_summary(console, spark, job, outcome, "summary")["rows"]
    changes = spark.read.parquet(str(tmp_path / "out/entities"))
    now = current_entities(changes).collect()
    sizes = {}
    for r in now:
        sizes[r.entity_id] = sizes.get(r.entity_id, 0) + 1
    assert now and max(sizes.values()) == 2  # max_size = 2: left-right pairs only
    assert rows["entities now (records in them)"] == f"{len(sizes):,} ({len(now):,})"
    assert rows["largest entity (records)"] == 2
    refused = changes.where("kind = 'refused'").count()
    assert refused and rows["links refused by a guard (this run)"].split()[0] == f"{refused:,}"
    assert rows["entity rows in the sink (all runs)"] == changes.count()
    assert "merges (this run)" in console.export_text()
