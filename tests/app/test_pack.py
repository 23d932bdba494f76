"""`driftjoin pack`: the zip Python imports, the pins it writes, the spark-submit lines it prints.

The packed environment itself is built and run on executors by the cluster test
(tests/spark/runtime/test_deploy_cluster.py: a minute of pip and numba). The venv's spark-submit
run without activating the venv is checked with a user's job in
tests/spark/runtime/test_session_ergonomics.py (one Spark start for both).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import zipfile
from importlib import metadata
from pathlib import Path

from typer.testing import CliRunner

import driftjoin
from driftjoin.app import pack
from driftjoin.app.cli import app


def test_the_zip_holds_the_package_source_and_imports_from_anywhere(tmp_path):
    path = pack.build_zip(tmp_path / "dist")
    names = zipfile.ZipFile(path).namelist()
    assert path.name == f"driftjoin-{driftjoin.__version__}.zip"
    assert "driftjoin/__init__.py" in names and "driftjoin/spark/runtime/session.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    code = "import driftjoin.spark.similarity.api, driftjoin; print(driftjoin.__file__)"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", code], env={**env, "PYTHONPATH": str(path)}, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == str(path / "driftjoin" / "__init__.py")


def test_runtime_pins_are_the_installed_versions_of_the_runtime_dependencies():
    pins = dict(p.split("==") for p in pack.runtime_pins())
    assert {"numpy", "pandas", "pyarrow", "protobuf", "scipy", "numba", "llvmlite", "sortedcontainers"} <= set(pins)
    assert not set(pins) & {"pyspark", "matplotlib", "rich", "typer", "simpy", "pytest", "hypothesis"}
    assert all(metadata.version(name) == version for name, version in pins.items())


def test_the_archive_line_unpacks_beside_the_job_and_runs_the_environment(tmp_path):
    artifact = tmp_path / "driftjoin-0.1.0-env.tar.gz"
    unpack, submit = pack.submit_commands("archive", artifact, master="spark://h:7077", job="my job.py")
    assert shlex.split(unpack) == ["mkdir", "-p", "environment", "&&", "tar", "-xzf", str(artifact), "-C", "environment"]
    words = shlex.split(submit)
    assert words[:3] == ["spark-submit", "--master", "spark://h:7077"]
    assert words[words.index("--archives") + 1] == f"{artifact}#environment"
    assert "spark.pyspark.python=./environment/bin/python" in words and words[-1] == "my job.py"
    assert not [w for w in words if "driver.python" in w]


def test_the_zip_line_gives_the_driver_workers_the_zip_too(tmp_path):
    artifact = tmp_path / "driftjoin-0.1.0.zip"
    (submit,) = pack.submit_commands("zip", artifact, master="yarn", job="j.py", python="/opt/py/bin/python",
                                     driver_python="/usr/bin/python3")
    words = shlex.split(submit)
    assert words[words.index("--py-files") + 1] == str(artifact)
    assert f"spark.executorEnv.PYTHONPATH={artifact}" in words
    assert "spark.pyspark.python=/opt/py/bin/python" in words and "spark.pyspark.driver.python=/usr/bin/python3" in words


def test_pack_command_prints_a_runnable_script(tmp_path):
    result = CliRunner().invoke(app, ["pack", "--kind", "zip", "--out", str(tmp_path), "--master", "local[1]", "--job", "j.py"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# ") and str(tmp_path / "driftjoin-0.1.0.zip") in lines[0]
    assert lines[1].startswith("spark-submit --master 'local[1]' --py-files ")


def test_pack_refuses_an_unknown_kind(tmp_path):
    result = CliRunner().invoke(app, ["pack", "--kind", "wheel", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--kind must be 'archive' or 'zip'" in result.output


def test_the_archive_unpacks_into_an_environment_whose_python_imports_the_shipped_driftjoin(tmp_path, monkeypatch):
    """The packed venv's layout, without its dependencies (pip and numba: the cluster test and
    bench/deploy_batches.py build the whole one): unpacked where a job runs, as the printed line
    does, its python imports driftjoin from inside it, compiled, and it carries no pip."""
    monkeypatch.setattr(pack, "runtime_pins", lambda: [])
    lines = []
    path = pack.build_archive(tmp_path / "dist", compile_kernels=False, log=lines.append)
    assert path.name == f"driftjoin-{driftjoin.__version__}-env.tar.gz" and lines
    job = tmp_path / "job"
    job.mkdir()
    unpack = pack.submit_commands("archive", path, master="local[1]", job="j.py")[0]
    subprocess.run(unpack, shell=True, cwd=job, check=True, timeout=120)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    code = ("import importlib.util, driftjoin as m; "
            "print(m.__file__, importlib.util.find_spec('pip') is None, importlib.util.cache_from_source(m.__file__))")
    run = subprocess.run(["./environment/bin/python", "-c", code], env=env, cwd=job, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    module, no_pip, compiled = run.stdout.split()
    assert Path(module).is_relative_to(job / "environment") and no_pip == "True" and Path(compiled).exists()
