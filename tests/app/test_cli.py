"""The command line as a user meets it, through the real ``driftjoin`` entry point in a subprocess:
what the console shows and the exit code. These fail before Spark starts (about half a second
each): every flag and key is checked first, and errors are one line naming the setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from driftjoin.app.demo import MARKER, prepare_out_dir
from driftjoin.app.runner import JobConfig
from driftjoin.spark.runtime.settings import SettingError


def job(tmp_path: Path, join: str, source: str = 'kind = "generator"\ntotal = 100',
        sink: str = 'path = "out/pairs"\ncheckpoint = "out/ck"') -> Path:
    path = tmp_path / "job.toml"
    path.write_text(f"[source]\n{source}\n[join]\n{join}\n[sink]\n{sink}\n")
    return path


@pytest.mark.parametrize("args, toml, message", [
    (["demo", "--parallelism", "0"], None, "--parallelism must be an integer >= 1 (the number of workers), got 0"),
    (["demo", "--seconds", "-5"], None, "--seconds must be a finite number > 0"),
    (["demo", "--rate", "0"], None, "--rate must be an integer >= 1"),
    (["demo", "--window", "soon"], None, "--window 'soon' is not a duration"),
    (["run"], "threshold = 0.01\nparallelism = 0", "[join] parallelism must be an integer >= 1 (the number of workers), got 0"),
    (["run"], 'threshold = 0.01\nparallelism = "two"', "[join] parallelism must be an integer >= 1 (the number of workers), got 'two'"),
    (["run"], "threshold = -1", "[join] threshold must be a finite distance > 0"),
    (["run"], "threshold = 0.01\ndim = 3", "[join] dim does not match the generator's vectors ([source] dim = 2)"),
    (["run"], 'threshold = 0.01\nbalance_options = { split = true }', "[join] balance_options needs balance="),
    (["run"], 'threshold = 0.01\nbalance = "s3j"\nbalance_options = { windows = 3 }',
     "[join] balance_options has unknown key(s) 'windows'; valid keys: at, di_threshold"),
    (["run"], "threshold = 0.01\ntreshold = 0.02", "[join] treshold is not a setting of similarity_join"),
    (["run"], 'threshold = 1\nmetric = "levenstein"', "[join] metric='levenstein' is an unknown metric (did you mean "
     "'levenshtein'?): write one of angular, chebyshev, cosine, euclidean, manhattan (vectors), levenshtein, also "
     "written edit or edit_distance (strings), jaccard (token sets)"),
    (["threshold", "--selectivity", "0.01", "--dist", "normal"], None, "--dist must be one of 'uniform', 'gaussian'"),
    (["threshold", "--selectivity", "2"], None, "selectivity must be in (0, 1]"),
    (["bench", "batch", "--limits", "s3j"], None, "--limits must be METHOD=SECONDS"),
])
def test_bad_settings_fail_before_spark_with_one_line_naming_the_setting(tmp_path, args, toml, message, cli):
    if toml is not None:
        args = [*args, str(job(tmp_path, toml))]
    if args[0] == "demo":
        args = [*args, "--out", str(tmp_path / "demo")]
    result = cli(*args, cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith(f"driftjoin {args[0]}")
    # nothing was started: no demo folder, no checkpoint, no Spark log
    assert not (tmp_path / "demo").exists() and not (tmp_path / "out").exists()


FILES = 'kind = "files"\nleft = "in"\nschema = "{schema}"'


@pytest.mark.parametrize("join, schema, message", [
    # the case: the job file's own key, before any session start
    ('threshold = 2\nmetric = "levenshtein"\nvector_col = "nme"', "id long, name string, ts timestamp",
     "[join] vector_col 'nme' is not a column of the input; [source] schema: id, name, ts"),
    ('threshold = 2\nmetric = "levenshtein"\nvalue_col = "Name"', "id long, name string",
     "[join] value_col 'Name' is not a column of the input; [source] schema: id, name (names are case-sensitive: 'name')"),
    ("threshold = 0.1\ndim = 2", "key long, vector array<double>",
     "[join] id_col is not set, and its default 'id' is not a column of the input; [source] schema: key, vector: "
     "set [join] id_col to one of them"),
    ("threshold = 0.1\ndim = 2", "id double, vector array<double>",
     "[join] id_col 'id' is declared double in [source] schema; ids must be integers or strings"),
    ('threshold = 2\nmetric = "levenshtein"\nvalue_col = "tags"', "id long, tags array<string>",
     "[join] value_col 'tags' is declared array<string> in [source] schema, which metric 'levenshtein' cannot "
     "compare: it compares strings"),
    ('threshold = 0.1\ndim = 2\nvalue_col = "name"', "id long, name string",
     "[join] value_col 'name' is declared string in [source] schema, which metric 'angular' cannot compare: it "
     "compares vectors"),
    ('threshold = 0.5\nmetric = "jaccard"\nvalue_col = "v"', "id long, v array<double>",
     "which metric 'jaccard' cannot compare: it compares token sets"),
    ('threshold = 0.1\ndim = 2\ntime_col = "ok"\nwatermark = "1 minute"', "id long, vector array<double>, ok boolean",
     "[join] time_col 'ok' is declared boolean in [source] schema, which holds no time"),
    ('threshold = 2\nmetric = "levenshtein"\nvalue_col = "name"', None,
     "[join] value_col 'name' is not a column of the input; a generator source's columns: id, vector, ts, stream"),
    ("threshold = 0.1\ndim = 2", "id long,, vector array<double>", "[source] schema has an empty entry"),
])
def test_join_columns_are_checked_against_the_declared_schema_before_spark(tmp_path, join, schema, message, cli):
    (tmp_path / "in").mkdir()
    source = FILES.format(schema=schema) if schema else 'kind = "generator"\ntotal = 100'
    result = cli("run", str(job(tmp_path, join, source)), cwd=tmp_path)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = (result.stdout + result.stderr).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("driftjoin run: error: ") and message in lines[0], lines
    assert not (tmp_path / "out").exists()  # no session started, no checkpoint, no Spark log


def test_a_files_job_without_event_time_is_one_window_unless_processing_time_is_asked(tmp_path, cli):
    (tmp_path / "in").mkdir()
    files = 'kind = "files"\nleft = "in"\nschema = "id long, vector array<double>"'
    result = cli("run", str(job(tmp_path, 'threshold = 0.01\ndim = 2\nwindow = "1 minute"', files)), "--available-now")
    assert result.returncode == 2
    assert "[join] window without time_col would window a files source by the wall clock" in result.stderr
    assert "processing_time = true" in result.stderr
    assert JobConfig.load(job(tmp_path, "threshold = 0.01\ndim = 2", files)).join["window"] is None
    kept = JobConfig.load(job(tmp_path, 'threshold = 0.01\ndim = 2\nwindow = "1 minute"\nprocessing_time = true', files))
    assert kept.join["window"] == "1 minute" and kept.processing_time
    timed = JobConfig.load(job(tmp_path, 'threshold = 0.01\ndim = 2\ntime_col = "ts"\nwatermark = "5 s"',
                               files.replace('array<double>"', 'array<double>, ts timestamp"')))
    assert "window" not in timed.join  # event time: the join's default window (1 minute)


def test_job_file_paths_are_relative_to_the_file_not_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "jobs" / "in").mkdir(parents=True)
    path = tmp_path / "jobs" / "job.toml"
    path.write_text('[source]\nkind = "files"\nleft = "in"\nschema = "id long, vector array<double>"\n'
                    '[join]\nthreshold = 0.01\ndim = 2\nmetrics_dir = "m"\n[sink]\npath = "out/p"\ncheckpoint = "out/ck"\n')
    monkeypatch.chdir(tmp_path)
    cfg = JobConfig.load("jobs/job.toml")
    base = tmp_path / "jobs"
    assert (cfg.source["left"], cfg.sink["path"], cfg.sink["checkpoint"], cfg.join["metrics_dir"]) == (
        str(base / "in"), str(base / "out/p"), str(base / "out/ck"), str(base / "m"))
    path.write_text(path.read_text().replace('left = "in"', 'left = "missing"'))
    with pytest.raises(SettingError, match=r"\[source\] left .*missing is not a directory \(relative paths start at"):
        JobConfig.load(path)


def test_help_shows_plain_flags_the_job_argument_choices_and_a_version(cli):
    run_help = cli("run", "--help").stdout
    assert "run [OPTIONS] JOB.toml" in run_help and "{" not in run_help and "<bool>" not in run_help
    assert "--available-now  " in run_help and "--verbose" in run_help
    threshold_help = " ".join(cli("threshold", "--help").stdout.split())
    assert "uniform, gaussian, skewed, pareto, drift" in threshold_help and "--verbose" in threshold_help
    assert "Vectors per side" in threshold_help and "angular" in threshold_help
    for command in (["bench", "selectivity"], ["bench", "parallelism"], ["bench", "batch"]):
        assert "--verbose" in cli(*command, "--help").stdout
    assert "modelled" in " ".join(cli("bench", "selectivity", "--help").stdout.split())
    version = cli("--version")
    assert version.returncode == 0 and version.stdout.strip().startswith("driftjoin 0.")


def test_demo_refuses_a_folder_it_did_not_create_and_deletes_nothing(tmp_path, cli):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    (mine / "pairs").mkdir()
    result = cli("demo", "--out", str(mine))
    assert result.returncode == 2
    assert "thesis.tex" in result.stderr and "nothing was deleted" in result.stderr and "Traceback" not in result.stderr
    assert (mine / "thesis.tex").read_text() == "years of work" and (mine / "pairs").is_dir()
    result = cli("demo", "--out", str(mine / "thesis.tex"))
    assert result.returncode == 2 and "--out is a file" in result.stderr


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
