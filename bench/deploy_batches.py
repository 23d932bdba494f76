"""First and steady micro-batch times on the standalone cluster: driftjoin shipped with
``driftjoin pack`` against driftjoin preinstalled in the executors' Python.

    scripts/cluster.sh start        # 2 workers of one core
    nice -n 10 .venv/bin/python bench/deploy_batches.py --master spark://127.0.0.1:7077 [--runs 2]

Set-ups, each a spark-submit of the same job from a fresh working directory (a new application,
so new executors and Python workers):

- ``installed``: executors run this checkout's ``.venv`` (driftjoin installed, kernels in numba's
  cache since scripts/setup.sh);
- ``archive``: the packed environment (``driftjoin pack``), kernels compiled into it;
- ``archive-uncompiled``: the same without the compiled kernels (``--no-compile-kernels``): each
  executor compiles them in its first micro-batch;
- ``zip``: ``--py-files`` with driftjoin's zip, executors running a venv of the runtime
  dependencies only (numba compiles on each executor: its cache of a zip is keyed by the zip's
  path, new in every application).

The job: an S3J similarity join (2-D, 1,600 records in 8 files per stream, one file per
micro-batch) with a noop sink; the times are Spark's ``triggerExecution`` per batch. Set-ups
alternate, ``--runs`` rounds. Prints a table (first batch, median of batches 2.., ratio to
``installed``) and writes bench/results/deploy_batches.json. Also prints the artifacts' sizes
and the installed size of the runtime dependencies.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SETUPS = ("installed", "archive", "archive-uncompiled", "zip")

JOB = '''
import json, os, sys
import numpy as np
from pyspark.sql import SparkSession
from driftjoin import similarity_join

work, n, files = sys.argv[1], 1600, 8
rng = np.random.default_rng(7)
for side in ("L", "R"):
    os.makedirs(f"{work}/{side}", exist_ok=True)
    X = rng.uniform(-1, 1, (n, 2))
    for f in range(files):
        path = f"{work}/{side}/b{f:03d}.json"
        with open(path, "w") as out:
            for i in range(f * n // files, (f + 1) * n // files):
                out.write(json.dumps({"id": i, "vector": X[i].tolist()}) + "\\n")
        os.utime(path, (1_700_000_000 + f, 1_700_000_000 + f))
spark = SparkSession.builder.appName("driftjoin-deploy-bench").getOrCreate()
read = lambda side: spark.readStream.schema("id long, vector array<double>").option("maxFilesPerTrigger", 1).json(f"{work}/{side}")
pairs = similarity_join(read("L"), read("R"), threshold=0.02, metric="euclidean", dim=2, parallelism=2, algorithm="s3j",
                        window=None)
q = pairs.writeStream.format("noop").option("checkpointLocation", f"{work}/ck").trigger(availableNow=True).start()
q.awaitTermination()
times = [p["durationMs"]["triggerExecution"] / 1000 for p in q.recentProgress if p["numInputRows"]]
print("BATCHES " + json.dumps(times), flush=True)
spark.stop()
'''


def sh(cmd: list[str] | str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, shell=isinstance(cmd, str), **kw)


def du(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*"))


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", Requirement(requirement).name).lower()


def install_size(extras: tuple[str, ...]) -> tuple[int, list[str]]:
    """Bytes installed (the distributions' RECORD sizes in this environment) by driftjoin's
    runtime requirements plus ``extras``, with everything they require in turn; and their names."""
    dists = {re.sub(r"[-_.]+", "-", d.metadata["Name"]).lower(): d for d in metadata.distributions()}
    todo = [_name(r) for r in metadata.requires("driftjoin") or []
            if "extra ==" not in r or any(f'extra == "{e}"' in r for e in extras)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen or name == "driftjoin" or name not in dists:
            continue
        seen.add(name)
        todo += [_name(r) for r in dists[name].requires or [] if not Requirement(r).marker
                 or Requirement(r).marker.evaluate({"extra": ""})]
    return sum(f.size or 0 for n in seen for f in dists[n].files or []), sorted(seen)


def build(work: Path, master: str, job: Path) -> dict[str, list[str]]:
    """Artifacts and the commands of each set-up (the zip's executors get a venv of the runtime pins)."""
    from driftjoin.app.pack import pack, runtime_pins

    python = sys.executable
    spark_submit = str(Path(python).parent / "spark-submit")
    commands = {"installed": [f"spark-submit --master {master} --conf spark.pyspark.python={python} {shlex.quote(str(job))}"]}
    for name, compiled in (("archive", True), ("archive-uncompiled", False)):
        packed = pack("archive", work / name, master=master, job=str(job), driver_python=python,
                      compile_kernels=compiled, log=lambda line: print(f"  {name}: {line}", file=sys.stderr))
        commands[name] = packed.commands
        print(f"{name}: {packed.path.stat().st_size / 1e6:.0f} MB", flush=True)
    deps = work / "deps"
    sh([python, "-m", "venv", str(deps)])
    sh([str(deps / "bin" / "python"), "-m", "pip", "install", "--quiet", *runtime_pins()])
    print(f"runtime dependencies installed: {du(deps) / 1e6:.0f} MB (venv {deps})", flush=True)
    packed = pack("zip", work / "zip", master=master, job=str(job), python=str(deps / "bin" / "python"),
                  driver_python=python)
    commands["zip"] = packed.commands
    print(f"zip: {packed.path.stat().st_size / 1e6:.2f} MB", flush=True)
    return {k: [c.replace("spark-submit ", f"{shlex.quote(spark_submit)} ", 1) for c in v] for k, v in commands.items()}


def run(commands: list[str], folder: Path) -> list[float]:
    folder.mkdir(parents=True)
    script = " && ".join(commands) + f" {shlex.quote(str(folder / 'data'))}"
    done = subprocess.run(script, shell=True, cwd=folder, text=True, capture_output=True, timeout=1800)
    line = [x for x in done.stdout.splitlines() if x.startswith("BATCHES ")]
    if done.returncode or not line:
        raise RuntimeError(f"{commands[-1]} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    return json.loads(line[0].split(" ", 1)[1])


def print_install_sizes() -> dict[str, float]:
    """The executors' install before the extras split (runtime, spark and cli were one list) and after."""
    sizes = {}
    for label, extras in (("runtime + spark + cli (before the split)", ("spark", "cli")), ("runtime (after)", ())):
        size, names = install_size(extras)
        sizes[label] = size / 1e6
        print(f"install size, {label}: {size / 1e6:.0f} MB in {len(names)} distributions", flush=True)
    return sizes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--master", default=os.environ.get("DRIFTJOIN_CLUSTER", "spark://127.0.0.1:7077"))
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--setups", default=",".join(SETUPS))
    args = ap.parse_args()
    setups = args.setups.split(",")
    work = Path(tempfile.mkdtemp(prefix="driftjoin-deploy-bench-"))
    job = work / "job.py"
    job.write_text(JOB)
    sizes = print_install_sizes()
    commands = build(work, args.master, job)
    results: dict[str, list[list[float]]] = {s: [] for s in setups}
    for r in range(args.runs):
        for s in setups:
            times = run(commands[s], work / f"run-{s}-{r}")
            results[s].append(times)
            print(f"run {r} {s}: " + " ".join(f"{t:.1f}" for t in times), flush=True)
    base_first = statistics.median(t[0] for t in results["installed"]) if "installed" in results else None
    print(f"\n{'set-up':20} {'first batch s':>14} {'steady s':>9} {'first / installed':>18}")
    table = {}
    for s in setups:
        first = statistics.median(t[0] for t in results[s])
        steady = statistics.median(x for t in results[s] for x in t[1:])
        table[s] = {"first": first, "steady": steady, "runs": results[s]}
        ratio = f"{first / base_first:.2f}" if base_first else "-"
        print(f"{s:20} {first:14.1f} {steady:9.2f} {ratio:>18}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "deploy_batches.json").write_text(json.dumps({"batches": table, "install_mb": sizes}, indent=1))


if __name__ == "__main__":
    main()
