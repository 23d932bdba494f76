"""The plans the operators store with a checkpoint are those earlier driftjoin versions stored.

A restarted query is refused when its plan differs from the one stored with its checkpoint
(:mod:`driftjoin.spark.runtime.plan_guard`, :mod:`driftjoin.spark.runtime.plan_store`), so a
change of the code that builds plans (settings objects, the paths' shared plan) must leave every
stored value as it was, or every checkpoint written before it would be refused.
``data/plans_before_i34.json`` holds the stored plans of the joins below as the code before that
change built them (:func:`stored_plans`, run on driftjoin at commit 4064185, main before this change: ``python
tests/spark/runtime/test_plan_fingerprints.py <file>`` with that checkout first on
``PYTHONPATH``); the current code must build the same ones. No query runs: a streaming join
records its plan when it is built.
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

DATA = Path(__file__).parent / "data" / "plans_before_i34.json"
METRICS = "/fixed/metrics"


def _vectors(spark, dim: int = 2):
    return spark.readStream.format("driftjoin").option("dim", dim).option("total", 10).load()


def _names(spark):
    return (spark.readStream.format("rate").option("rowsPerSecond", 1).load()
            .selectExpr("value as id", "cast(value as string) as name", "array(cast(value % 7 as string)) as toks",
                        "timestamp as ts"))


def _docs(spark):
    return spark.readStream.format("driftjoin-docs").option("total", 10).load()


def _joins(spark) -> dict[str, Any]:
    """Streaming joins of every operator and path, with settings that every stored value depends on."""
    from driftjoin import equi_join, natural_join, similarity_join, topk_set_join

    v, v8, names, docs = _vectors(spark), _vectors(spark, 8), _names(spark), _docs(spark)
    words = ["kitten", "sitten", "mitten", "dog", "fog", "bog", "cat", "hat"]
    tokens = [["a", "b"], ["b", "c"], ["a"], ["c", "d", "e"], ["1", "2"]]
    sets = names.selectExpr("id", "toks as tokens", "cast(timestamp_seconds(id) as timestamp) as ts")
    keyed = names.selectExpr("id % 5 as k", "id", "ts")
    return {
        "s3j": lambda: similarity_join(v, threshold=0.1, metric="euclidean", parallelism=2, window="30 seconds",
                                       seed=3, metrics_dir=METRICS, dim=2),
        "s3j_two_stage": lambda: similarity_join(v, _vectors(spark), threshold=0.05, metric="angular", parallelism=3,
                                                 partitions=2, within="10 seconds", balance="s3j", dim=2,
                                                 metrics_dir=METRICS, output="pairs-grouped"),
        "s3j_clusterjoin": lambda: similarity_join(v, threshold=0.1, metric="manhattan", algorithm="clusterjoin",
                                                   virtual_partitions=4, dim=2, window="1 minute", slide="20 seconds"),
        "grid": lambda: similarity_join(v8, threshold=0.5, metric="cosine", algorithm="grid", parallelism=3, dim=8,
                                        window=None, output="pairs-lean"),
        "passjoin": lambda: similarity_join(names, threshold=1, metric="levenshtein", value_col="name",
                                            algorithm="passjoin", parallelism=2, within="1 minute", time_col="ts",
                                            watermark="5 seconds"),
        "prefix": lambda: similarity_join(names, threshold=0.4, metric="jaccard", value_col="toks", sample=tokens,
                                          parallelism=2),
        "metric_s3j": lambda: similarity_join(names, threshold=2, metric="levenshtein", value_col="name", sample=words,
                                              algorithm="s3j", parallelism=2, seed=1, metrics_dir=METRICS),
        "topk": lambda: topk_set_join(sets, k=3, within="30 seconds"),
        "topk_window": lambda: topk_set_join(sets, k=3, window="30 seconds"),
        "topk_probe": lambda: topk_set_join(sets, k=2, parallelism=2, design="probe", share_bound=True,
                                            metrics_dir=METRICS, similarity="cosine"),
        "natural": lambda: natural_join(docs, window=50, partitions=2, theta=0.1, metrics_dir=METRICS),
        "natural_assigner": lambda: natural_join(docs, window="5 seconds", time_col="ts", watermark="1 second",
                                                 partitions=2, routing="assigner", merged=True),
        "equi_shc": lambda: equi_join(keyed, names.selectExpr("id % 5 as k", "name"), on="k", parallelism=2,
                                      metrics_dir=METRICS, options={"epsilon": 0.2}),
        "equi_interval": lambda: equi_join(keyed, names.selectExpr("id % 5 as k", "ts"), on="k", algorithm="phj",
                                           within="10 seconds", time_col="ts", lateness="2 seconds", parallelism=2),
        "equi_biclique": lambda: equi_join(keyed, names.selectExpr("id % 5 as k", "name"), on=["k"],
                                           algorithm="biclique", groups=2, parallelism=4, partitions=2,
                                           routing="dispatcher", output="count"),
    }


def stored_plans(spark) -> dict[str, dict[str, Any]]:
    """The plan each join of :func:`_joins` stores with its checkpoint, and the settings a restart
    may change and what a setting missing from an older checkpoint meant (what the start check keeps)."""
    from driftjoin.spark.runtime import plan_store

    out = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name, build in _joins(spark).items():
            before = set(plan_store._PLANS)
            build()
            new = [p for token, p in plan_store._PLANS.items() if token not in before]
            assert len(new) == 1, name
            stored = {**new[0].stored(), "adoptable": sorted(new[0].adoptable), "defaults": new[0].defaults}
            out[name] = json.loads(json.dumps(stored, sort_keys=True, default=str))
    return out


@pytest.mark.spark
def test_the_operators_store_the_plans_earlier_versions_stored(spark):
    from driftjoin.spark.sources.documents import register

    register(spark)
    before = json.loads(DATA.read_text())
    now = stored_plans(spark)
    assert sorted(now) == sorted(before)
    for name in before:
        assert now[name] == before[name], name


if __name__ == "__main__":  # write the fixture with the driftjoin on PYTHONPATH
    from driftjoin.spark.runtime.session import local_session
    from driftjoin.spark.sources.documents import register

    session = local_session(parallelism=2, app_name="plans", cores=2)
    register(session)
    Path(sys.argv[1]).write_text(json.dumps(stored_plans(session), indent=1, sort_keys=True) + "\n")
    session.stop()
