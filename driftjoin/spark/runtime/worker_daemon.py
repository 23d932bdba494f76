"""PySpark's Python worker daemon with driftjoin's imports done once, before the workers fork.

Spark starts one Python daemon per executor and forks a worker from it for every Python task
that finds no idle worker to reuse (about half of them: docs/architecture.md, "Measured costs"). A fresh
worker then imports pandas, pyarrow, numba and driftjoin's operators and loads the compiled
kernels from numba's cache: 2 to 3 s of CPU each on the 2-core machine, paid by every task of a
query's first micro-batch and again after every restart, which is where most of a first batch's
time went. Run as the daemon module (``spark.python.daemon.module``, set by
:func:`driftjoin.spark.runtime.session.local_session`), this module pays those imports once per
executor; forked workers inherit the loaded modules copy-on-write.

A preload that fails is skipped (the workers import what they need themselves, as without this
module), so the daemon always starts.
"""

from __future__ import annotations

import importlib

#: Modules every driftjoin Python task imports, heaviest first.
PRELOAD = (
    "pandas",
    "pyarrow",
    "pyspark.worker",
    "pyspark.sql.pandas.serializers",
    "driftjoin.spark.similarity.s3j",
    "driftjoin.spark.link.processor",
    "driftjoin.spark.runtime.state",
)


def preload() -> None:
    """Import :data:`PRELOAD` and load the S3J and count-bound kernels from numba's on-disk cache."""
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a worker imports what it needs itself
            pass
    for name in ("driftjoin.s3j.kernels", "driftjoin.metric.bounds"):
        try:
            importlib.import_module(name).warm_up()
        except Exception:  # noqa: BLE001 - compiled on first use instead
            pass


if __name__ == "__main__":
    preload()
    from driftjoin.spark.runtime.jvm import serve_python_workers

    serve_python_workers()
