"""Recall of ``bench batch``'s methods on one Gaussian data set, recomputed without running the joins.

For rows a benchmark run lost (a method that crashed aborted ``bench batch`` before it wrote the
row): the same data and threshold as ``bench batch`` (``embeddings("gaussian", rows, dim)``,
``choose_threshold`` at 5 partners per row); the exact pairs as float64 Euclidean distances of
the float32 vectors ``<= t`` (a matrix-product screen, then the difference norm of every pair it
keeps); FAISS and numpy through the bench's own ``faiss_join`` and ``numpy_join``; MLlib's
``approxSimilarityJoin`` result as the exact pairs that share a bucket in some table of the tuned
model (``--tables``, ``--bucket`` in thresholds, seed 1 as the bench fits it), hashed with the
fitted model's own hash vectors (its ``randMatrix``), checked equal to MLlib's ``transform`` on
200 rows. One process, a one-core Spark session for fitting only.

    .venv/bin/python bench/batch_recall.py --dims 384,768 --tables 1 --bucket 1
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from driftjoin.app.bench import faiss_join, numpy_join
from driftjoin.generators.embeddings import embeddings
from driftjoin.spark.runtime.jvm import lsh_hyperplanes
from driftjoin.spark.similarity.threshold import choose_threshold


def exact_pairs(x: np.ndarray, t: float) -> set[tuple[int, int]]:
    xd = x.astype(np.float64)
    sq = (xd * xd).sum(1)
    out: set[tuple[int, int]] = set()
    for i0 in range(0, len(x), 1000):
        d2 = sq[i0:i0 + 1000, None] + sq[None, :] - 2 * xd[i0:i0 + 1000] @ xd.T
        ii, jj = np.nonzero(d2 <= t * t * 1.001 + 1e-9)
        keep = jj > ii + i0
        ii, jj = ii[keep] + i0, jj[keep]
        near = np.sqrt(((xd[ii] - xd[jj]) ** 2).sum(1)) <= t
        out.update(zip(ii[near].tolist(), jj[near].tolist()))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="384,768")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--tables", type=int, default=1)
    ap.add_argument("--bucket", type=float, default=1.0, help="bucket length in thresholds")
    args = ap.parse_args()

    from pyspark.ml.feature import BucketedRandomProjectionLSH
    from pyspark.ml.linalg import Vectors

    from driftjoin.spark.runtime.session import local_session

    spark = local_session(1, "batch-recall")
    for dim in (int(d) for d in args.dims.split(",")):
        x = embeddings("gaussian", args.rows, dim)
        t = choose_threshold(x, selectivity=min(0.5, 5 / args.rows), metric="euclidean")
        exact = exact_pairs(x, t)
        xd = x.astype(np.float64)
        one = spark.createDataFrame([(0, Vectors.dense(xd[0].tolist()))], ["id", "f"])
        model = BucketedRandomProjectionLSH(inputCol="f", outputCol="h", bucketLength=args.bucket * t,
                                            numHashTables=args.tables, seed=1).fit(one)
        v = np.array(lsh_hyperplanes(model, args.tables, dim))
        h = np.floor((xd @ v.T) / (args.bucket * t))
        sample = spark.createDataFrame([(i, Vectors.dense(xd[i].tolist())) for i in range(200)], ["id", "f"])
        mh = np.array([[hv[0] for hv in r["h"]] for r in model.transform(sample).orderBy("id").collect()])
        if not np.array_equal(mh, h[:200]):
            raise SystemExit("the hashes computed here differ from MLlib's transform")
        found = {(a, b) for a, b in exact if bool((h[a] == h[b]).any())}
        f, n = faiss_join(x, t), numpy_join(x, t)
        print(json.dumps({"dim": dim, "rows": args.rows, "threshold": t, "pairs": len(exact),
                          "mllib_recall": len(found) / len(exact),
                          "mllib_bucket_sizes": np.unique(h[:, 0], return_counts=True)[1].tolist(),
                          "faiss_recall": len(f & exact) / len(exact), "faiss_extra": len(f - exact),
                          "numpy_recall": len(n & exact) / len(exact), "numpy_extra": len(n - exact)}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main()
