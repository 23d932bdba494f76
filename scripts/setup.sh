#!/usr/bin/env bash
# Create .venv in the repository root and install driftjoin with its pinned dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[test,bench]"
# compile the numba kernels (SWOOP's, S3J's candidate enumeration) into numba's on-disk cache
# now (about 30 s once), not in the first Spark micro-batch that uses them
.venv/bin/python -c "from driftjoin.swoop import fast; from driftjoin.s3j import kernels; fast.warm_up(); kernels.warm_up()"
# archive the classes a driftjoin driver JVM loads (JDK AppCDS, ~180 MB in ~/.cache/driftjoin,
# about 40 s once): local sessions then start faster (driftjoin/spark/runtime/class_archive.py)
.venv/bin/python -m driftjoin.spark.runtime.class_archive
