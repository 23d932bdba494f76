#!/usr/bin/env bash
# Create .venv in the repository root and install driftjoin with Spark, the command line, the
# tests and the benchmarks at the exact versions of constraints.txt (the lock; pyproject.toml
# declares the ranges a library install accepts).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet -c constraints.txt pip
.venv/bin/python -m pip install --quiet -c constraints.txt -e ".[cli,test,bench]"
# pyspark's .venv/bin/spark-submit finds Spark by running `python3` from PATH, which fails unless
# the venv is activated: replace it with one that uses this venv's Spark and Python, activated or not
SPARK_DIR="$(.venv/bin/python -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
cat > .venv/bin/spark-submit <<EOF
#!/usr/bin/env bash
# pyspark's spark-submit with this venv's Spark and Python (written by driftjoin's scripts/setup.sh)
export SPARK_HOME="\${SPARK_HOME:-$SPARK_DIR}"
export PYSPARK_DRIVER_PYTHON="\${PYSPARK_DRIVER_PYTHON:-$PWD/.venv/bin/python}"
exec "\$SPARK_HOME/bin/spark-submit" "\$@"
EOF
# compile the numba kernels (SWOOP's, S3J's candidate enumeration, link's count bounds) into numba's on-disk cache
# now (about 30 s once), not in the first Spark micro-batch that uses them
.venv/bin/python -c "from driftjoin.swoop import fast; from driftjoin.s3j import kernels; from driftjoin.metric import bounds; fast.warm_up(); kernels.warm_up(); bounds.warm_up()"
# archive the classes a driftjoin driver JVM loads (JDK AppCDS, ~180 MB in ~/.cache/driftjoin,
# about 40 s once): local sessions then start faster (driftjoin/spark/runtime/class_archive.py)
.venv/bin/python -m driftjoin.spark.runtime.class_archive
