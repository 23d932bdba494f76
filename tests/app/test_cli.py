"""The command line without Spark: the demo's output folder, one-line errors with exit codes,
the TOML job file's keys (issue 12: found item 11 and the CLI ergonomics)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from driftjoin.app.cli import app, short_message
from driftjoin.app.demo import MARKER, prepare_out_dir
from driftjoin.app.runner import JobConfig

runner = CliRunner()

JOB = {
    "source": {"kind": "files", "left": "in/L", "schema": "id long, vector array<double>"},
    "join": {"threshold": 0.01, "dim": 2},
    "sink": {"kind": "parquet", "path": "out/pairs", "checkpoint": "out/ck"},
}


def test_demo_refuses_a_folder_it_did_not_create_and_deletes_nothing(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (mine / "pairs").mkdir()
    result = runner.invoke(app, ["demo", "--out", str(mine)])
    assert result.exit_code == 2
    assert "thesis.tex" in result.output and "nothing was deleted" in result.output and "Traceback" not in result.output
    assert (mine / "thesis.tex").read_text() == "years of work" and (mine / "pairs").is_dir()
    with pytest.raises(ValueError, match="is a file"):
        prepare_out_dir(mine / "thesis.tex")


def test_demo_replaces_only_its_own_entries(tmp_path):
    out = tmp_path / "demo"
    prepare_out_dir(out)  # a new folder gets the marker
    assert (out / MARKER).exists()
    for name in ("pairs", "checkpoint", "metrics"):
        (out / name).mkdir()
        (out / name / "part-0").write_text("old")
    (out / "latency.png").write_bytes(b"png")
    (out / "notes.txt").write_text("mine")  # added by the user after a demo run
    prepare_out_dir(out)
    assert sorted(p.name for p in out.iterdir()) == sorted([MARKER, "notes.txt"])
    # a folder of an older demo (only the demo's entries, no marker) is the demo's too
    old = tmp_path / "old"
    (old / "pairs").mkdir(parents=True)
    (old / "latency.png").write_bytes(b"png")
    prepare_out_dir(old)
    assert sorted(p.name for p in old.iterdir()) == [MARKER]


@pytest.mark.parametrize("args, message", [
    (["run", "/no/such/job.toml"], "does not exist"),
    (["threshold", "--selectivity", "2"], "selectivity must be in (0, 1]"),
    (["threshold", "--selectivity", "0.01", "--metric", "sqeuclidean"], "sqeuclidean"),
    (["bench", "batch", "--sizes", "ten"], "comma-separated integers"),
    (["bench", "batch", "--limits", "s3j"], "METHOD=SECONDS"),
    (["bench", "batch", "--limits", "s3j=60,lsh=5"], "unknown methods ['lsh']"),
    (["bench", "batch", "--lsh", "again"], "or 'reuse'"),
])
def test_cli_errors_are_one_line_and_exit_2(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_job_file_errors_name_the_key(tmp_path):
    bad = tmp_path / "job.toml"
    bad.write_text('[source]\nkind = "files"\n[join]\nthreshold = 0.1\nbalance_options = { split = true }\n'
                   '[sink]\nkind = "console"\ntrigger = "-5 seconds"\n')
    result = runner.invoke(app, ["run", str(bad)])
    assert result.exit_code == 2 and "balance_options needs balance" in result.output
    bad.write_text(bad.read_text().replace("balance_options", 'balance = "greedy"\nbalance_options'))
    result = runner.invoke(app, ["run", str(bad)])
    assert result.exit_code == 2 and "trigger must be positive" in result.output


def test_join_section_takes_balance_keys():
    raw = {**JOB, "join": {**JOB["join"], "algorithm": "s3j", "partitions": 1, "output": "grouped", "balance": "s3j",
                           "balance_options": {"monitoring_window": 30, "at": "window", "split": True}}}
    cfg = JobConfig.from_dict(raw)
    assert cfg.join["balance_options"]["at"] == "window"
    with pytest.raises(ValueError, match="unknown key.*balance_options: windows"):
        JobConfig.from_dict({**raw, "join": {**raw["join"], "balance_options": {"windows": 3}}})
    assert JobConfig.from_dict({**JOB, "source": {"kind": "generator", "total": 500}}).expected_records == 1000


def test_short_message_keeps_the_line_that_matters():
    worker = ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker. Please see the stack trace below.\n"
              "Traceback (most recent call last):\n  File \"worker.py\", line 3, in main\n    import driftjoin\n"
              "ModuleNotFoundError: No module named 'driftjoin' SQLSTATE: 38000\n\nJVM stacktrace:\n\tat org.apache.spark.X")
    assert short_message(RuntimeError(worker)) == "ModuleNotFoundError: No module named 'driftjoin'"
    assert short_message(ValueError("first line\n\tat org.apache.Y")) == "first line"
