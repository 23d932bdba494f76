"""The training run of the class-data-sharing archive (:mod:`driftjoin.spark.runtime.class_archive`).

``python -m driftjoin.app.class_training``, started by the archive's builder with the JVM option
that writes the archive at exit, loads what a driftjoin driver loads: a session, a streaming join
(state, Arrow, Python workers) and a batch join; then it lets the JVM exit, which writes the
archive.
"""

from __future__ import annotations

import json
import os
import tempfile

import numpy as np

from driftjoin.spark.runtime.jvm import end_driver_jvm
from driftjoin.spark.runtime.session import local_session
from driftjoin.spark.similarity.api import similarity_join


def main() -> None:
    spark = local_session(2, "driftjoin-class-archive")
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for side in ("L", "R"):
            os.makedirs(f"{tmp}/in/{side}")
            with open(f"{tmp}/in/{side}/part.json", "w") as f:
                for i, v in enumerate(rng.uniform(-1, 1, (500, 2)).tolist()):
                    f.write(json.dumps({"id": i, "vector": v}) + "\n")

        def read(side: str):
            return spark.readStream.schema("id long, vector array<double>").json(f"{tmp}/in/{side}")

        pairs = similarity_join(read("L"), read("R"), threshold=0.05, metric="euclidean", window=None, dim=2)
        (pairs.writeStream.format("noop").option("checkpointLocation", f"{tmp}/ck")
         .trigger(availableNow=True).start().awaitTermination())
        static = spark.read.schema("id long, vector array<double>").json(f"{tmp}/in/L")
        similarity_join(static, static, threshold=0.05, metric="euclidean", dim=2).count()
    end_driver_jvm(spark, timeout=600)  # the JVM writes the archive when it exits


if __name__ == "__main__":
    main()
