"""Every operator as a user's job, submitted with spark-submit to executors that have only
what was shipped to them (tests/spark/runtime/test_deploy_cluster.py runs it).

    spark-submit <the options `driftjoin pack` printed> tests/deploy_job.py [WORKDIR]

WORKDIR (default ``./work``) gets the inputs, outputs and checkpoints. Each operator runs one
generated case of the fuzz harness (tests/fuzz: valid and malformed rows over several
micro-batches, streaming) and is checked against its oracle; then the executors say
where they imported driftjoin from, which must be inside their own working directory (the
shipped archive or zip), never this checkout or the driver's environment. Prints one line
starting with ``OK`` on success.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
# the test helpers (tests.fuzz) come from this checkout, appended so that the driftjoin the
# driver was given (the shipped zip, the unpacked archive or an install) comes first
sys.path.append(str(REPO))

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from pyspark.sql import SparkSession  # noqa: E402

from tests.fuzz.harness import check  # noqa: E402
from tests.fuzz.specs import SPECS  # noqa: E402

#: one derandomised case per operator, not shrunk on failure (each run is minutes on the cluster)
ONE_CASE = settings(max_examples=1, derandomize=True, deadline=None, database=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))


def _where_driftjoin_comes_from(_: object) -> tuple[str, str, str]:
    """On an executor: its working directory, its Python, and the file driftjoin was imported from."""
    import driftjoin

    return os.getcwd(), sys.executable, os.path.abspath(driftjoin.__file__)


def main(work: Path) -> None:
    spark = SparkSession.builder.appName("driftjoin-deploy-test").getOrCreate()
    for name in sorted(SPECS):
        spec = SPECS[name]

        @ONE_CASE
        @given(case=spec.case())
        def run(case):
            check(spark, spec, case, work / name, streaming=True)

        run()
        print(f"{name}: exact", flush=True)
    sc = spark.sparkContext
    seen = set(sc.parallelize(range(8), 4).map(_where_driftjoin_comes_from).collect())
    for cwd, python, module in sorted(seen):
        assert module.startswith(cwd + os.sep), f"an executor imported driftjoin from {module}, outside its work dir {cwd}"
    print(f"OK {len(SPECS)} operators exact; executors imported driftjoin from "
          f"{sorted({m.split(c)[1] for c, _, m in seen})}, python {sorted({p for _, p, _ in seen})}", flush=True)
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "work").resolve())
