"""``driftjoin run`` end to end, through the real entry point in a subprocess (each starts Spark):
a restart with another threshold is refused at once with one line that names it, input with no
valid record ends with exit 1 and the dead letters' reasons, bad JSON lines keep their text, and a
run that fails before its query starts leaves no checkpoint folder behind."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from rich.console import Console

from driftjoin.app.console import print_summary, watch
from driftjoin.app.runner import JobConfig, start_job

pytestmark = pytest.mark.slow


def _rows(out: str) -> dict[str, str]:
    """The rows of the summary table as printed."""
    return {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3}


def test_a_restart_with_another_threshold_is_refused_in_one_line_without_new_input(tmp_path, cli):
    def job(threshold: float) -> str:
        (tmp_path / "job.toml").write_text(textwrap.dedent(f"""
            [source]
            kind = "generator"
            total = 300
            pace = false
            [join]
            threshold = {threshold}
            parallelism = 2
            [sink]
            path = "out/pairs"
            checkpoint = "out/ck"
            trigger = "available-now"
        """))
        return "job.toml"

    first = cli("run", job(0.01), cwd=tmp_path)
    assert first.returncode == 0, first.stdout + first.stderr
    rows = _rows(first.stdout)
    assert rows["records read (this run)"] == rows["records joined (this run)"] == "600"
    assert rows["pairs out (this run)"] == rows["pairs in the sink (all runs)"]
    assert rows["dead letters (all runs)"] == "not checked (generated input)"
    second = cli("run", job(0.02), cwd=tmp_path)  # the generator has nothing new: no batch runs
    assert second.returncode == 2
    assert second.stderr.strip().splitlines() == [second.stderr.strip()]
    assert second.stderr.startswith("driftjoin run: error: PlanChangedError: similarity_join: this query was restarted")
    assert "threshold: checkpoint has 0.01, this query has 0.02" in second.stderr
    assert "~Project" not in second.stdout + second.stderr and "Traceback" not in second.stdout + second.stderr


def test_input_with_nothing_valid_ends_with_exit_1_and_the_dead_letters_reasons(tmp_path, cli):
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"id": i, "vector": [i / 10, 1.0]}) for i in range(20)]
    lines += ['{"id": 98, "vector": [0.5, 1.0', json.dumps({"id": 99, "vector": ["a", "b"]})]
    (tmp_path / "in" / "part-0.json").write_text("\n".join(lines) + "\n")
    (tmp_path / "job.toml").write_text(textwrap.dedent("""
        [source]
        kind = "files"
        left = "in"
        schema = "id long, vector array<double>"
        [join]
        threshold = 0.01
        dim = 3
        [sink]
        path = "out/pairs"
        checkpoint = "out/ck"
        trigger = "available-now"
    """))
    result = cli("run", "job.toml", cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "nothing valid was read: 22 records read, none joined" in " ".join(result.stderr.split())
    dead = _rows(result.stdout)["dead letters (all runs)"]
    assert dead.startswith("22 (") and "not valid JSON 1" in dead and "vector is not a list of numbers 1" in dead
    assert "wrong dimension" in dead or "20" in dead
    rows = pd.concat(pd.read_parquet(p) for p in (tmp_path / "out" / "ck" / "dead-letters").glob("*.parquet"))
    reasons = dict(zip(rows["raw"], rows["reason"]))
    assert reasons['{"id": 98, "vector": [0.5, 1.0'] == "not valid JSON"
    assert reasons['{"id": 99, "vector": ["a", "b"]}'] == "vector is not a list of numbers"


def test_a_run_that_fails_before_its_query_starts_leaves_no_checkpoint(tmp_path, cli):
    (tmp_path / "in").mkdir()
    (tmp_path / "job.toml").write_text(textwrap.dedent("""
        [source]
        kind = "files"
        left = "in"
        schema = "id long, vector array<double>"
        [join]
        threshold = 0.01
        dim = 2
        vector_col = "vec"
        [sink]
        path = "out/pairs"
        checkpoint = "out/ck"
    """))
    result = cli("run", "job.toml", cwd=tmp_path)
    assert result.returncode == 2
    assert "vector_col='vec' is not a column of the input" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.spark
def test_a_console_sink_summary_has_pairs_and_latency(spark, tmp_path):
    cfg = JobConfig.from_dict({"source": {"kind": "generator", "total": 200, "pace": False},
                               "join": {"threshold": 0.05, "parallelism": 2},
                               "sink": {"kind": "console", "trigger": "available-now"}}, base=tmp_path)
    job = start_job(spark, cfg, scratch=tmp_path)
    console = Console(record=True, width=200)
    outcome = watch(job.queries, console, total=cfg.expected_records)
    result = print_summary(console, spark, job, outcome, "summary")
    text = console.export_text()
    assert result["totals"]["pairs_out"] > 0 and "pairs out (this run)" in text and "p99 latency (s)" in text
    assert Path(job.metrics_dir).parent == tmp_path / "checkpoint"
