"""driftjoin shipped to a standalone cluster whose executors never had it, the ways `driftjoin
pack` offers (tests/spark/runtime/test_deploy_cluster.py runs this; README, Running on a cluster).

    python tests/deploy_cluster_job.py spark://127.0.0.1:7077 WORKDIR [zip|archive|archive,zip]

- ``zip`` (the default, what CI runs: the cheaper of the two to build and ship): a venv of the
  runtime dependencies alone (no driftjoin), ``driftjoin pack --kind zip --python <that venv>``,
  and the command it printed, verbatim, in an empty directory.
- ``archive``: ``driftjoin pack --kind archive``, then the commands it printed, verbatim, in
  another empty directory: the executors run the packed environment (a venv of the base Python
  with only driftjoin's runtime dependencies and driftjoin).

The job of each is tests/deploy_job.py (the four operators against their oracles); its driver
runs this Python (``--driver-python``: it draws the cases with hypothesis). Prints ``OK`` and
each job's line with its build and run times.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def sh(cmd: list[str] | str, *, cwd: Path | None = None, env: dict | None = None, timeout: float = 900) -> str:
    run = subprocess.run(cmd, shell=isinstance(cmd, str), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, f"{cmd} failed ({run.returncode}):\n{run.stdout[-4000:]}\n{run.stderr[-6000:]}"
    return run.stdout


def clean_env() -> dict[str, str]:
    """This environment without what would hand driftjoin to a process another way."""
    import pyspark

    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV", "NUMBA_CACHE_DIR")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # spark-submit
    env["SPARK_HOME"] = os.path.dirname(pyspark.__file__)
    return env


def submit(packed_stdout: str, folder: Path, env: dict) -> str:
    """Run the commands `driftjoin pack` printed in the empty ``folder``; the job's OK line."""
    folder.mkdir(parents=True)
    commands = [line for line in packed_stdout.splitlines() if line and not line.startswith("#")]
    t0 = time.time()
    out = sh(" && ".join(commands), cwd=folder, env=env, timeout=1200)
    ok = [line for line in out.splitlines() if line.startswith("OK")]
    assert ok, out[-4000:]
    return f"{ok[0]} ({time.time() - t0:.0f} s)"


def main(master: str, work: Path, kinds: list[str]) -> None:
    env = clean_env()
    cli = [sys.executable, "-m", "driftjoin.app.cli", "pack", "--master", master, "--job", str(HERE / "deploy_job.py"),
           "--driver-python", sys.executable]
    done = []
    if "archive" in kinds:
        t0 = time.time()
        archive = sh([*cli, "--kind", "archive", "--out", str(work / "dist")], env=env)
        built = time.time() - t0
        done.append(f"archive: {submit(archive, work / 'run-archive', env)}, built in {built:.0f} s")
        print(done[-1], flush=True)
    if "zip" in kinds:
        from driftjoin.app.pack import base_python, runtime_pins

        t0 = time.time()
        deps = work / "deps"
        sh([base_python(), "-m", "venv", str(deps)], env=env)
        sh([str(deps / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-input", *runtime_pins()], env=env)
        probe = subprocess.run([str(deps / "bin" / "python"), "-c", "import driftjoin"], env=env, cwd=work, capture_output=True)
        assert probe.returncode != 0, "the dependencies' venv must not have driftjoin"
        zipped = sh([*cli, "--kind", "zip", "--out", str(work / "dist"), "--python", str(deps / "bin" / "python")], env=env)
        built = time.time() - t0
        done.append(f"zip: {submit(zipped, work / 'run-zip', env)}, dependencies' venv and zip in {built:.0f} s")
        print(done[-1], flush=True)
    print(f"OK {'; '.join(done)}; {shlex.quote(master)}")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]), (sys.argv[3] if len(sys.argv) > 3 else "zip").split(","))
