"""Session ergonomics (issue 12): a quiet console, workers that find driftjoin in a user's own
session, choose_threshold on streams, the default metrics directory of balance=, and a
`driftjoin run` job of two file streams with balance= (in this process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from pyspark.sql.streaming.stateful_processor import StatefulProcessor

from driftjoin import choose_threshold, similarity_join
from driftjoin.app.report import summary
from driftjoin.spark.runtime import queries, session
from driftjoin.spark.similarity.control import CONTROLLERS

pytestmark = pytest.mark.spark


def _write(folder: Path, name: str, first_id: int, vecs: np.ndarray, mtime: float | None = None) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text("".join(json.dumps({"id": first_id + i, "vector": v.tolist()}) + "\n" for i, v in enumerate(vecs)))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_console_stays_quiet_and_the_log_file_has_spark_output(spark, tmp_path, capfd):
    """The Python worker's start-up lines and the Java stack of a query stopped during a batch go
    to the session's log file, not to this process's stdout/stderr."""
    assert session.LOG_FILE, "the test session is a quiet local_session"
    before = Path(session.LOG_FILE).stat().st_size

    class Slow(StatefulProcessor):  # defined here so the workers get it by value
        def init(self, handle) -> None:
            pass

        def handleInputRows(self, key, rows, timerValues):
            n = sum(len(r) for r in rows)
            time.sleep(3)
            yield pd.DataFrame({"key": [int(key[0])], "n": [n]})

        def close(self) -> None:
            pass

    rows = spark.readStream.format("rate").option("rowsPerSecond", 20).load().selectExpr("value % 2 as key", "value")
    q = (rows.groupBy("key").transformWithStateInPandas(Slow(), "key long, n long", "Append", "None")
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck")).trigger(processingTime="1 second").start())
    deadline = time.time() + 120
    while time.time() < deadline and q.isActive and not (tmp_path / "ck" / "offsets" / "1").exists():
        time.sleep(0.2)
    time.sleep(1)  # batch 1 is running (its tasks sleep 3 s): stop inside it
    assert q.exception() is None and q.isActive
    q.stop()
    time.sleep(1)
    console = capfd.readouterr()
    assert "TransformWithStateInPandas" not in console.out + console.err
    assert "\tat org.apache" not in console.out + console.err
    logged = Path(session.LOG_FILE).read_text(errors="replace")[before:]
    assert "Streaming TransformWithStateInPandas Python worker" in logged


def test_choose_threshold_samples_a_stream(spark, tmp_path):
    rng = np.random.default_rng(5)
    a, b = rng.uniform(-1, 1, (300, 2)), rng.uniform(-1, 1, (250, 2))
    _write(tmp_path / "L", "a.json", 0, a[:150])
    _write(tmp_path / "L", "b.json", 150, a[150:])

    def read(side: str):
        return spark.readStream.schema("id long, vector array<double>").json(str(tmp_path / side))

    streamed = choose_threshold(read("L"), b, selectivity=0.01, metric="euclidean")
    assert streamed == choose_threshold(a, b, selectivity=0.01, metric="euclidean")
    generated = spark.readStream.format("driftjoin").option("stream", 0).option("rate", 20000).option("dim", 2).load()
    assert 0 < choose_threshold(generated, selectivity=0.01, sample=500) < 0.1


@pytest.mark.slow
def test_balance_without_metrics_dir_uses_the_checkpoint(spark, tmp_path, monkeypatch):
    """balance= alone: statistics and assignments go to <checkpoint>/driftjoin-metrics, the same
    folder after a restart, and the controller finds it; nothing is written under the
    placeholder's name (the algorithm choice is not recorded there before the query runs)."""
    monkeypatch.chdir(tmp_path)
    start = time.time() - 100
    rng = np.random.default_rng(8)
    for f in range(2):
        _write(tmp_path / "L", f"f{f}.json", f * 100, rng.uniform(-1, 1, (100, 2)), start + f)
        _write(tmp_path / "R", f"f{f}.json", 10_000 + f * 100, rng.uniform(-1, 1, (100, 2)), start + f)
    ck, out = tmp_path / "ck", tmp_path / "out"

    def run() -> None:
        def read(side: str):
            return spark.readStream.schema("id long, vector array<double>").option("maxFilesPerTrigger", 1).json(str(tmp_path / side))

        pairs = similarity_join(read("L"), read("R"), threshold=0.05, metric="euclidean", window=None, parallelism=2, dim=2,
                                balance="greedy", balance_options={"monitoring_window": 0.1})
        q = pairs.writeStream.format("parquet").option("path", str(out)).option("checkpointLocation", str(ck)).trigger(availableNow=True).start()
        q.awaitTermination()

    run()
    metrics = ck / queries.METRICS_IN_CHECKPOINT
    assert (metrics / "computation").is_dir()
    first = summary(str(metrics))[0]
    assert first["pairs_out"] == spark.read.parquet(str(out)).count() > 0
    deadline = time.time() + 30  # the controller binds when a progress event reaches the listener
    while str(metrics) not in CONTROLLERS and time.time() < deadline:
        time.sleep(0.2)
    assert str(metrics) in CONTROLLERS
    _write(tmp_path / "L", "f2.json", 200, rng.uniform(-1, 1, (100, 2)), start + 2)
    _write(tmp_path / "R", "f2.json", 10_200, rng.uniform(-1, 1, (100, 2)), start + 2)
    run()  # a restart from the same checkpoint: same folder
    again = summary(str(metrics))[0]
    assert again["records_in"] == 600 and again["pairs_out"] == spark.read.parquet(str(out)).count()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(queries.AUTO)]


def test_balance_without_metrics_dir_on_a_cluster_says_what_to_pass():
    fake = SimpleNamespace(conf=SimpleNamespace(get=lambda key, *default: {"spark.master": "spark://10.0.0.1:7077"}[key]))
    with pytest.raises(ValueError, match="pass metrics_dir="):
        queries.default_metrics_dir(fake)


def test_workers_python_is_set_in_local_mode(monkeypatch):
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.exists() or session._imports_driftjoin(str(base)):
        pytest.skip("needs a Python without driftjoin (the base interpreter of the venv)")
    sc = SimpleNamespace(pythonExec=str(base), master="local[2]", applicationId="app-local")
    monkeypatch.delenv("PYSPARK_PYTHON", raising=False)
    session.ensure_workers_python(SimpleNamespace(sparkContext=sc))
    assert sc.pythonExec == sys.executable
    chosen = SimpleNamespace(pythonExec=str(base), master="local[2]", applicationId="app-chosen")
    monkeypatch.setenv("PYSPARK_PYTHON", str(base))
    with pytest.raises(ValueError, match=f"set PYSPARK_PYTHON={sys.executable}"):
        session.ensure_workers_python(SimpleNamespace(sparkContext=chosen))


def _cluster(app_id: str, collect, python: str = "./environment/bin/python", path: str = "") -> SimpleNamespace:
    """A cluster's SparkContext whose one probe task returns (or raises) what ``collect`` does."""
    sc = SimpleNamespace(pythonExec=python, master="spark://h:7077", applicationId=app_id,
                         environment={"PYTHONPATH": path} if path else {},
                         getConf=lambda: SimpleNamespace(get=lambda key, default=None: default))
    sc.parallelize = lambda *a: SimpleNamespace(map=lambda f: SimpleNamespace(collect=collect))
    return SimpleNamespace(sparkContext=sc)


def test_cluster_check_names_every_missing_module_in_one_line():
    from driftjoin import __version__

    def failing_job(*_):
        raise RuntimeError("An error occurred\njava.io.IOException: Cannot run program \"./environment/bin/python\"")

    with pytest.raises(ValueError, match='did not run a task \\(java.io.IOException: Cannot run program "./environment/bin/python"\\).*driftjoin pack') as e:
        session.ensure_workers_python(_cluster("app-a", failing_job))
    assert "\n" not in str(e.value)
    missing = ["scipy (ModuleNotFoundError)", "numba (ModuleNotFoundError)", "driftjoin (ModuleNotFoundError)"]
    with pytest.raises(ValueError, match=r"/x/python\) cannot import scipy \(ModuleNotFoundError\), numba .*, driftjoin") as e:
        session.ensure_workers_python(_cluster("app-b", lambda: [("/x/python", missing, "")]))
    assert "\n" not in str(e.value) and "driftjoin pack" in str(e.value)
    with pytest.raises(ValueError, match="has driftjoin 0.0.1, the driver"):
        session.ensure_workers_python(_cluster("app-c", lambda: [("/x/python", [], "0.0.1")]))


def test_cluster_check_runs_the_executors_python_on_the_driver_too(tmp_path, monkeypatch):
    """transformWithStateInPandas' driver-side runner: the interpreter must exist from the
    driver's working directory and import driftjoin with spark.executorEnv.PYTHONPATH."""
    from driftjoin import __version__
    from driftjoin.app.pack import build_zip

    monkeypatch.chdir(tmp_path)
    ok = lambda: [("/x/python", [], __version__)]  # noqa: E731 - the executors are fine
    with pytest.raises(ValueError, match="unpack the archive there too"):
        session.ensure_workers_python(_cluster("app-d", ok))
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))  # a Python without driftjoin's packages
    monkeypatch.delenv("PYTHONPATH", raising=False)
    with pytest.raises(ValueError, match=r"cannot import .*driftjoin \(ModuleNotFoundError\).*spark.executorEnv.PYTHONPATH"):
        session.ensure_workers_python(_cluster("app-e", ok, python=base))
    zipped = build_zip(tmp_path / "dist")
    session.ensure_workers_python(_cluster("app-f", ok, python=sys.executable, path=str(zipped)))


def test_executor_probe_runs_where_driftjoin_cannot_be_imported(tmp_path):
    """The probe reaches the executors by value: unpickled and run in a Python without driftjoin,
    it names what that Python lacks."""
    from pyspark import cloudpickle

    blob = tmp_path / "probe.pkl"
    blob.write_bytes(cloudpickle.dumps(session._executor_probe()))
    code = ("import pickle, sys; sys.modules['driftjoin'] = None; "
            f"print(pickle.loads(open({str(blob)!r}, 'rb').read())(0))")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    python, missing, version = eval(run.stdout)  # noqa: S307 - a tuple printed by the child
    assert python == sys.executable and missing == ["driftjoin (ModuleNotFoundError)"] and version == ""


@pytest.mark.slow
def test_users_own_session_without_pyspark_python_through_the_venvs_spark_submit(tmp_path):
    """A user's job of a plain SparkSession.builder session, whose `python3` lacks driftjoin,
    submitted with the venv's spark-submit without activating the venv (PATH without it; pyspark's
    own script finds Spark with `python3` from PATH: scripts/setup.sh wraps it): the join works
    (the workers run this interpreter) and the driver imports this driftjoin. One Spark start for
    both (tests/app/test_pack.py's other checks of the artifacts need none)."""
    spark_submit = Path(__file__).resolve().parents[3] / ".venv" / "bin" / "spark-submit"
    if not spark_submit.exists():
        pytest.skip("no .venv in this checkout (scripts/setup.sh makes it)")
    base = Path(sys.base_prefix) / "bin" / "python3"
    if not base.exists() or session._imports_driftjoin(str(base)):
        pytest.skip("needs a Python without driftjoin (the base interpreter of the venv)")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(base)
    (tmp_path / "job.py").write_text(textwrap.dedent("""
        import driftjoin
        from pyspark.sql import SparkSession
        from driftjoin import similarity_join
        spark = SparkSession.builder.config("spark.ui.enabled", "false").getOrCreate()
        assert spark.sparkContext.pythonExec == "python3"
        df = spark.createDataFrame([(i, [float(i % 7), 0.5]) for i in range(40)], "id long, vector array<double>")
        print("PAIRS", similarity_join(df, threshold=0.5, metric="euclidean", parallelism=2).count(),
              driftjoin.__version__)
        spark.stop()
    """))
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_HOME", "VIRTUAL_ENV", "PYSPARK_PYTHON",
                                                            "PYSPARK_DRIVER_PYTHON")}
    env["PATH"] = f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin"
    run = subprocess.run([str(spark_submit), "--master", "local[2]", "job.py"], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    # 40 points on 7 spots 1 apart: 5 spots of 6 and 2 of 5, 5 * 15 + 2 * 10 pairs
    from driftjoin import __version__

    assert f"PAIRS 95 {__version__}" in run.stdout.splitlines(), run.stdout[-2000:]


@pytest.mark.slow
def test_a_run_job_ends_when_drained_with_a_summary(spark, tmp_path, capfd):
    """A ``driftjoin run`` job file of two file streams with balance=, run as the command runs it
    (JobConfig, start_job, watch, print_summary) on the shared session: drained, every record
    joined, the per-worker table, nothing of Spark on the console. The command itself (a new
    process, its exit codes, Spark's log beside the checkpoint) is tests/app/test_run.py's."""
    from rich.console import Console

    from driftjoin.app.console import print_summary, watch
    from driftjoin.app.runner import JobConfig, start_job

    rng = np.random.default_rng(2)
    for f in range(2):
        _write(tmp_path / "in" / "L", f"f{f}.json", f * 200, rng.uniform(-1, 1, (200, 2)))
        _write(tmp_path / "in" / "R", f"f{f}.json", 5000 + f * 200, rng.uniform(-1, 1, (200, 2)))
    (tmp_path / "job.toml").write_text(textwrap.dedent("""
        [source]
        kind = "files"
        left = "in/L"
        right = "in/R"
        schema = "id long, vector array<double>"
        [join]
        threshold = 0.02
        dim = 2
        parallelism = 2
        balance = "greedy"
        balance_options = { monitoring_window = 1 }
        [sink]
        path = "out/pairs"
        checkpoint = "out/ck"
        dead_letters = "out/dead"
    """))
    cfg = JobConfig.load(tmp_path / "job.toml")
    job = start_job(spark, cfg, available_now=True, scratch=tmp_path / "scratch")
    console = Console(record=True, width=120)
    outcome = watch(job.queries, console, total=cfg.expected_records)
    assert outcome.error is None and outcome.reason == "drained"
    print_summary(console, spark, job, outcome, "driftjoin run summary")
    out = console.export_text()
    assert "drained" in out and "pairs in the sink" in out and "per worker" in out
    row = {line.split("│")[1].strip(): line.split("│")[2].strip() for line in out.splitlines() if line.count("│") == 3}
    assert row["pairs out (this run)"] == row["pairs in the sink (all runs)"] and row["records joined (this run)"] == "800"
    assert row["dead letters (all runs)"] == "0"
    console_out = capfd.readouterr()
    assert "TransformWithStateInPandas" not in console_out.out + console_out.err and "\tat " not in console_out.out + console_out.err


@pytest.mark.parametrize("master, slots", [("local[3]", 3), ("local[5,2]", 5), ("local", 1),
                                           ("local[*]", os.cpu_count() or 1)])
def test_task_slots_are_the_local_masters_cores_not_the_workers(master, slots) -> None:
    """local_session sets spark.default.parallelism to the number of workers; the default
    ``partitions`` of the similarity join must follow the cores the tasks share instead."""
    from types import SimpleNamespace

    from driftjoin.spark.runtime.session import task_slots

    def session(url: str, parallelism: int) -> SimpleNamespace:
        return SimpleNamespace(conf=SimpleNamespace(get=lambda key, *default: {"spark.master": url}[key]),
                               sparkContext=SimpleNamespace(defaultParallelism=parallelism))

    assert task_slots(session(master, 99)) == slots
    assert task_slots(session("spark://host:7077", 6)) == 6


def test_the_default_partitions_follow_the_cores(spark, monkeypatch) -> None:
    """local_session(5) on 2 cores: 5 workers share 2 state partitions by default (measured: p50
    batch 0.8 s against 2.5 s with 5; docs/benchmarks.md)."""
    from driftjoin.spark.similarity.inputs import JoinInputs
    from driftjoin.spark.similarity.s3j import s3j_plan
    from driftjoin.spark.similarity.settings import SimilaritySettings

    df = spark.range(0).selectExpr("id", "array(cast(id as double), 0d) as vector")
    # what local_session(5) sets; the slots must come from the master, local[2]
    monkeypatch.setattr(type(spark.sparkContext), "defaultParallelism", property(lambda self: 5))
    settings = SimilaritySettings.check({"threshold": 0.1, "metric": "euclidean", "dim": 2, "window": None,
                                         "parallelism": 5})
    plan = s3j_plan(JoinInputs.of(df, df, settings), "s3j")
    assert spark.sparkContext.master == "local[2]"
    assert plan.parallelism == 5 and plan.partitions == 2


@pytest.mark.parametrize("version, refused", [("4.0.0", True), ("4.0.1", True), ("3.5.7", True), ("4.0.2", False),
                                              ("4.1.0-SNAPSHOT", False), ("4.3.0", False), ("custom", False)])
def test_an_older_spark_than_the_state_server_needs_is_refused(version, refused) -> None:
    if refused:
        with pytest.raises(ValueError, match=rf"Spark {version} can lose part of a large state write.*4\.0\.2 or later"):
            session.require_spark(version)
    else:
        session.require_spark(version)


def test_a_stateful_operator_on_an_old_spark_fails_before_it_starts(spark, tmp_path, monkeypatch) -> None:
    """The JVM's version decides (a cluster's Spark may be older than the driver's pyspark): the
    join is refused when it is built, before anything runs or is written."""
    (tmp_path / "L").mkdir()
    left = spark.readStream.schema("id long, vector array<double>").json(str(tmp_path / "L"))
    monkeypatch.setattr(type(spark), "version", property(lambda self: "4.0.1"))
    with pytest.raises(ValueError, match="Spark 4.0.1 can lose part of a large state write"):
        similarity_join(left, left, threshold=0.1, metric="euclidean", window=None, parallelism=2, dim=2)
    assert [p.name for p in tmp_path.iterdir()] == ["L"] and not list((tmp_path / "L").iterdir())
