"""``driftjoin run`` end to end, through the real entry point: the README's string job in a
subprocess (a JVM of its own: it runs and equals a brute force with a quiet console, Spark's
output in the log beside the checkpoint, bad rows dead letters with their reasons), and a
restart with another threshold refused at once with one line that names it (both runs in this
process, the refusal through the CLI's own code). Input with no valid record (exit 1 and the
dead letters' reasons) and a run that fails before its query starts (exit 2, one line, no
checkpoint folder left) run the command's own code (typer's CliRunner on ``driftjoin.app.cli.app``)
in this process, on the shared session. The README's token-set job and the order of a job's
checks run in this process too."""

from __future__ import annotations

import json
import textwrap
from datetime import datetime, timedelta
from fractions import Fraction
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rich.console import Console
from typer.testing import CliRunner, Result

from driftjoin.app.cli import app
from driftjoin.app.console import print_summary, watch
from driftjoin.app.runner import JobConfig, start_job
from driftjoin.spark.runtime import session

from tests.spark.helpers import write_batches

pytestmark = pytest.mark.slow


def _rows(out: str) -> dict[str, str]:
    """The rows of the summary table as printed."""
    return {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3}


def _run_here(spark, monkeypatch, cwd: Path, *args: str) -> Result:
    """``driftjoin run ARGS`` from ``cwd`` through the CLI's own code in this process: the session
    ``_run_job`` makes is the shared test session (whose ``stop()`` at the command's end does
    nothing, for this call only). As the real session starts its JVM, the stand-in first writes
    Spark's log file where the command asks (a checkpoint folder the command made), so the
    command's tidying of a failed run still has that folder to remove."""
    def local_session(parallelism, app_name, *, log_file, **_):
        Path(log_file).parent.mkdir(parents=True, exist_ok=True)
        Path(log_file).touch()
        session.LOG_FILE = log_file
        return spark

    monkeypatch.setattr(session, "local_session", local_session)  # _run_job imports it from there when it runs
    monkeypatch.setattr(session, "LOG_FILE", session.LOG_FILE)  # restored after the test
    monkeypatch.setattr(spark, "stop", lambda: None)
    monkeypatch.chdir(cwd)
    return CliRunner(env={"COLUMNS": "160"}).invoke(app, list(args))


@pytest.mark.spark
def test_a_restart_with_another_threshold_is_refused_in_one_line_without_new_input(spark, tmp_path, monkeypatch):
    """The first run (in this process, on the shared session: the CLI's successful run in a
    process of its own is the README string job's below) writes the checkpoint; ``driftjoin
    run`` with another threshold, through the CLI's code in this process, refuses it."""
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

    cfg = JobConfig.load(tmp_path / job(0.01))
    first = start_job(spark, cfg, scratch=tmp_path / "scratch")
    console = Console(record=True, width=160)
    outcome = watch(first.queries, console, total=cfg.expected_records)
    assert outcome.error is None, outcome.error
    print_summary(console, spark, first, outcome, "driftjoin run summary")
    rows = _rows(console.export_text())
    assert rows["records read (this run)"] == rows["records joined (this run)"] == "600"
    assert rows["pairs out (this run)"] == rows["pairs in the sink (all runs)"]
    assert rows["dead letters (all runs)"] == "not checked (generated input)"
    second = _run_here(spark, monkeypatch, tmp_path, "run", job(0.02))  # nothing new: no batch runs
    assert second.exit_code == 2, second.stdout + second.stderr
    assert second.stderr.strip().splitlines() == [second.stderr.strip()]
    assert second.stderr.startswith("driftjoin run: error: PlanChangedError: similarity_join: this query was restarted")
    assert "threshold: checkpoint has 0.01, this query has 0.02" in second.stderr
    assert "~Project" not in second.stdout + second.stderr and "Traceback" not in second.stdout + second.stderr


@pytest.mark.spark
def test_input_with_nothing_valid_ends_with_exit_1_and_the_dead_letters_reasons(spark, tmp_path, monkeypatch):
    (tmp_path / "in").mkdir()
    lines = [json.dumps({"id": i, "vector": [i / 10, 1.0]}) for i in range(20)]
    lines += ['{"id": 98, "vector": [0.5, 1.0', json.dumps({"id": 99, "vector": ["a", "b"]})]
    # the right dimension, but its label is a number: Spark's reader would make it the text "7" and join the row
    lines += [json.dumps({"id": 97, "vector": [0.1, 0.2, 0.3], "label": 7})]
    (tmp_path / "in" / "part-0.json").write_text("\n".join(lines) + "\n")
    (tmp_path / "job.toml").write_text(textwrap.dedent("""
        [source]
        kind = "files"
        left = "in"
        schema = "id long, vector array<double>, label string"
        [join]
        threshold = 0.01
        dim = 3
        [sink]
        path = "out/pairs"
        checkpoint = "out/ck"
        trigger = "available-now"
    """))
    result = _run_here(spark, monkeypatch, tmp_path, "run", "job.toml")
    assert result.exit_code == 1, result.stdout + result.stderr
    assert "nothing valid was read: 23 records read, none joined" in " ".join(result.stderr.split())
    dead = " ".join(_rows(result.stdout)["dead letters (all runs)"].split())
    assert dead.startswith("23 (wrong dimension (expected 3) 20, ") and "not valid JSON 1" in dead
    assert "label is not a string 1" in dead  # the reasons count together whatever the value was
    rows = pd.concat(pd.read_parquet(p) for p in (tmp_path / "out" / "ck" / "dead-letters").glob("*.parquet"))
    reasons = dict(zip(rows["raw"], rows["reason"]))
    assert reasons['{"id": 98, "vector": [0.5, 1.0'] == "not valid JSON"
    assert reasons['{"id": 99, "vector": ["a", "b"]}'] == "vector is not a list of numbers: got a list of strings"
    assert reasons['{"id": 97, "vector": [0.1, 0.2, 0.3], "label": 7}'] == "label is not a string: got an integer"


@pytest.mark.spark
def test_a_run_that_fails_before_its_query_starts_leaves_no_checkpoint(spark, tmp_path, monkeypatch):
    """A mistake only Spark finds (a type name it does not know; the job file's own check reads
    the names of columns, not every type Spark has): the session starts, no query starts, and
    the error names the key."""
    (tmp_path / "in").mkdir()
    (tmp_path / "job.toml").write_text(textwrap.dedent("""
        [source]
        kind = "files"
        left = "in"
        schema = "id long, vector arrray<double>"
        [join]
        threshold = 0.01
        dim = 2
        [sink]
        path = "out/pairs"
        checkpoint = "out/ck"
        trigger = "available-now"
    """))  # available-now: no warm-up query before the session is handed to the job
    result = _run_here(spark, monkeypatch, tmp_path, "run", "job.toml")
    assert result.exit_code == 2, result.stdout + result.stderr
    assert result.stderr.startswith("driftjoin run: error: [source] schema is not a schema Spark reads: "
                                    "[PARSE_SYNTAX_ERROR] Syntax error at or near '<'"), result.stderr
    assert not (tmp_path / "out").exists()


def _toml(readme, metric: str) -> str:
    """The README's job file whose ``[join]`` has ``metric = "<metric>"``."""
    (block,) = [b for b in readme("toml") if "[join]" in b and f'metric = "{metric}"' in b]
    return block


def _levenshtein(a: str, b: str) -> int:
    """Edit distance by the textbook dynamic programme (the oracle; the job uses rapidfuzz)."""
    row = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        prev, row[0] = row[0], i
        for j, cb in enumerate(b, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (ca != cb))
    return row[-1]


def _names(seed: int = 7) -> list[dict]:
    """Names with typos at times over about 4 minutes (sorted by time), so within="30 seconds" matters."""
    rng = np.random.default_rng(seed)
    base = ["Jonathan Smith", "Maria Garcia", "Wei Zhang", "Olga Petrova", "Ahmed Hassan", "Lucy Brown",
            "Pierre Dubois", "Anna Kowalska"]
    letters = "abcdefghijklmnopqrstuvwxyz"
    rows = []
    for i in range(48):
        name = list(base[i % len(base)])
        for _ in range(int(rng.integers(0, 3))):
            k = int(rng.integers(0, len(name)))
            op = int(rng.integers(0, 3))
            if op == 0:
                name[k] = letters[int(rng.integers(0, 26))]
            elif op == 1:
                del name[k]
            else:
                name.insert(k, letters[int(rng.integers(0, 26))])
        rows.append({"id": i, "name": "".join(name), "t": float(rng.uniform(0, 240))})
    rows += [{"id": 100, "name": "12346", "t": 120.0}]  # one edit from 12345 below, were it read as text
    return sorted(rows, key=lambda r: r["t"])


def test_the_readme_string_job_runs_and_equals_a_brute_force(tmp_path, cli, readme):
    """The README's edit-distance dedup job through ``driftjoin run``: exact pairs under
    ``within=``, and the rows it cannot join (a null name, a name that is a JSON number, a line
    that is not JSON) are dead letters with their reasons. The issue's defect: the dead-letter
    query was built without ``value_col`` and failed after the join had started."""
    rows = _names()
    start = datetime(2024, 5, 1, 10, 0, 0)
    stamp = lambda t: (start + timedelta(seconds=t)).strftime("%Y-%m-%d %H:%M:%S.%f")  # noqa: E731
    records = [{"id": r["id"], "name": r["name"], "ts": stamp(r["t"])} for r in rows]
    bad = [json.dumps({"id": 101, "name": 12345, "ts": stamp(120.0)}), json.dumps({"id": 102, "name": None,
                                                                                 "ts": stamp(121.0)}),
           '{"id": 103, "name": "Wei Zhang"']
    half = len(records) // 2
    write_batches(tmp_path / "names", [records[:half], records[half:] + bad])
    (tmp_path / "names.toml").write_text(_toml(readme, "levenshtein"))
    result = cli("run", "names.toml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    # a quiet console: Spark's output (the Python workers' start-up lines) is in the log beside the checkpoint
    out = result.stdout + result.stderr
    assert "drained" in out and "pairs in the sink" in out and "per worker" in out
    assert "TransformWithStateInPandas" not in out and "\tat " not in out and "Traceback" not in out
    assert "TransformWithStateInPandas" in (tmp_path / "out" / "name-checkpoint" / "spark.log").read_text(errors="replace")
    expected = {(a["id"], b["id"]): _levenshtein(a["name"], b["name"]) for a in rows for b in rows
                if a["id"] < b["id"] and abs(a["t"] - b["t"]) <= 30 and _levenshtein(a["name"], b["name"]) <= 2}
    pairs = pd.read_parquet(tmp_path / "out" / "name-pairs")
    got = {(int(r.left_id), int(r.right_id)): r.distance for r in pairs.itertuples()}
    assert len(got) == len(pairs) and got == expected and len(expected) > 10
    assert _rows(result.stdout)["records joined (this run)"] == str(len(rows))
    dead = pd.concat(pd.read_parquet(p) for p in (tmp_path / "out" / "name-checkpoint" / "dead-letters").glob("*.parquet"))
    reasons = dict(zip(dead["raw"], dead["reason"]))
    assert reasons[bad[0]] == "name is not a string: got an integer"
    assert reasons[bad[2]] == "not valid JSON"
    by_id = dict(zip(dead["id"], dead["reason"]))  # a row the reader could read: its id, and the row as JSON
    assert len(dead) == 3 and by_id[102] == "null string"


@pytest.mark.spark
def test_the_readme_token_set_job_equals_a_brute_force_in_exact_arithmetic(spark, tmp_path, readme):
    rng = np.random.default_rng(3)
    vocab = ["red", "apple", "pie", "tart", "blue", "car", "recipe", "sweet"]
    docs = [{"id": i, "tags": sorted(set(rng.choice(vocab, int(rng.integers(1, 5))).tolist()))} for i in range(40)]
    bad = [json.dumps({"id": 50, "tags": []}), json.dumps({"id": 51, "tags": "red"}),
           json.dumps({"id": 52, "tags": [1, 2]})]
    write_batches(tmp_path / "docs", [docs[:20], docs[20:] + bad])
    (tmp_path / "tags.toml").write_text(_toml(readme, "jaccard"))
    cfg = JobConfig.load(tmp_path / "tags.toml")
    job = start_job(spark, cfg, scratch=tmp_path)
    outcome = watch(job.queries, Console(record=True, width=200))
    assert outcome.error is None and outcome.reason == "drained"

    def distance(a: list[str], b: list[str]) -> Fraction:
        return 1 - Fraction(len(set(a) & set(b)), len(set(a) | set(b)))

    expected = {(a["id"], b["id"]): distance(a["tags"], b["tags"]) for a in docs for b in docs
                if a["id"] < b["id"] and distance(a["tags"], b["tags"]) <= Fraction(1, 2)}
    got = {(r.left_id, r.right_id): r.distance for r in spark.read.parquet(job.pairs_path).collect()}
    assert got.keys() == expected.keys() and len(expected) > 10
    assert got == pytest.approx({k: float(v) for k, v in expected.items()}, rel=1e-12)
    reasons = {json.loads(r.raw)["id"]: r.reason for r in spark.read.parquet(job.dead_letters_path).collect()}
    assert set(reasons) == {50, 51, 52}
    assert reasons[51] == "tags is not a list of strings: got a string"
    assert reasons[52] == "tags is not a list of strings: got a list of integers"


@pytest.mark.spark
def test_a_job_starts_no_query_until_the_join_and_its_dead_letters_are_both_built(spark, tmp_path, monkeypatch):
    """Every setting the input can refute is refuted before any query starts: here the dead-letter
    reader refuses (as it did for a string job without value_col), and neither query has started
    nor written its checkpoint."""
    from driftjoin.app import runner

    (tmp_path / "in").mkdir()
    cfg = JobConfig.from_dict({"source": {"kind": "files", "left": "in", "schema": "id long, name string"},
                               "join": {"threshold": 1, "metric": "levenshtein", "value_col": "name"},
                               "sink": {"path": "out/pairs", "checkpoint": "out/ck"}}, base=tmp_path)

    def refuse(inputs, join, operator="similarity_join"):
        raise ValueError("the dead-letter reader refuses")

    monkeypatch.setattr(runner, "dead_letters", refuse)
    before = {q.id for q in spark.streams.active}
    with pytest.raises(ValueError, match="refuses"):
        start_job(spark, cfg)
    assert {q.id for q in spark.streams.active} == before
    assert not (tmp_path / "out" / "ck" / "pairs").exists()  # the join query's checkpoint (the CLI then tidies up)


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
