"""The README's zip block (Running on a cluster) run as written against a standalone cluster.
Used by tests/app/test_readme.py; prints 'OK PAIRS 29, driftjoin-<version>.zip built' on success.

    python tests/readme_zip_cluster_job.py spark://127.0.0.1:7077 WORKDIR

WORKDIR is the job's working directory: it holds the job (``my_job.py``) and this checkout's venv
(``.venv``, a link), and the block runs there from a fresh shell (no venv on PATH, no Spark or
Python settings); ``HOST`` and the reader's two placeholders (the executors' Python: this one) are
the only words replaced. A script of its own so that it runs in the background while the local
tests go on, like the other cluster jobs (tests/spark/conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "app"))

from readme_blocks import REPO, fresh_env, readme_blocks  # noqa: E402

from driftjoin import __version__  # noqa: E402

#: The reader's job: a static join (S3J named, so no estimate on a sample adds stages).
ZIP_JOB = '''
from pyspark.sql import SparkSession
from driftjoin import similarity_join

spark = SparkSession.builder.appName("readme-zip").getOrCreate()
df = spark.createDataFrame([(i, [i / 10, 0.0]) for i in range(30)], "id long, vector array<double>")
print("PAIRS", similarity_join(df, threshold=0.15, metric="euclidean", parallelism=2, algorithm="s3j").count())
spark.stop()
'''


def main(master: str, work: Path) -> None:
    (block,) = [b for b in readme_blocks("bash") if "--kind zip" in b]
    block = block.replace("spark://HOST:7077", master).replace("/opt/py/bin/python", sys.executable)
    work.mkdir(parents=True, exist_ok=True)
    (work / ".venv").symlink_to(REPO / ".venv")
    (work / "my_job.py").write_text(ZIP_JOB)
    run = subprocess.run(["bash", "-e", "-c", block], cwd=work, env=fresh_env(SPARK_LOCAL_IP="127.0.0.1"),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "PAIRS 29" in run.stdout.splitlines(), run.stdout[-2000:]
    zipped = work / "dist" / f"driftjoin-{__version__}.zip"
    assert zipped.is_file(), f"{zipped} was not built: {run.stdout[-2000:]}"
    print(f"OK PAIRS 29, {zipped.name} built")


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
