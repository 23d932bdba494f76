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
# compile SWOOP's numba kernels into numba's on-disk cache now (about 20 s once), not in the
# first Spark micro-batch that runs topk_set_join
.venv/bin/python -c "from driftjoin.swoop import fast; fast.warm_up()"
