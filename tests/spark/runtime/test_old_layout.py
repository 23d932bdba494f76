"""A checkpoint written before the operators became packages restarts exactly.

The state of topk_set_join (its joins) and of natural_join's Assigner pickles classes under the
module names of the flat layout (``driftjoin.spark.topk_operators``,
``driftjoin.spark.natural_assigner``); the state layer's unpickler finds them where they live now
(:data:`driftjoin.spark.runtime.state.MOVED_MODULES`). Each query of ``data/`` (see its README)
is restarted from its old checkpoint with more input; the rows of the old run and the restarted
run together must equal one fresh run over all of the input.
"""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from driftjoin.spark.natural.api import natural_join
from driftjoin.spark.runtime.state import MOVED_MODULES
from driftjoin.spark.topk.api import topk_set_join

pytestmark = pytest.mark.spark

DATA = Path(__file__).parent / "data" / "old_layout_checkpoints.tar.gz"


def _sets(spark, total: int):
    v = (spark.readStream.format("driftjoin").option("dim", 6).option("total", total).option("pace", "false")
         .option("rate", 10).option("seed", 7).option("start", 0).option("max_records_per_batch", 50).load())
    return v.select("id", "ts", F.transform("vector", lambda x, i: F.concat(i.cast("string"), F.lit(":"),
                                                                              F.floor(x * 2).cast("string"))).alias("tokens"))


def _docs(spark, total: int):
    return (spark.readStream.format("driftjoin-docs").option("kind", "serverlog").option("total", total)
            .option("pace", "false").option("rate", 20).option("seed", 5).option("start", 0)
            .option("max_docs_per_batch", 60).load())


QUERIES = {
    "topk_single": (lambda spark, n: topk_set_join(_sets(spark, n), k=5, window="30 seconds", parallelism=1), 150, 300),
    "topk_owner": (lambda spark, n: topk_set_join(_sets(spark, n), k=5, window="30 seconds", parallelism=2), 150, 300),
    "natural_assigner": (lambda spark, n: natural_join(_docs(spark, n), window="5 seconds", time_col="ts", watermark="1 second",
                                                       partitions=2, routing="assigner", theta=0.0), 180, 360),
}


def _run(df, checkpoint: Path) -> list[dict]:
    rows: list[dict] = []
    q = (df.writeStream.foreachBatch(lambda b, _: rows.extend(r.asDict() for r in b.collect()))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    return rows


def _canonical(rows: list[dict], keys: set[str]) -> list[tuple]:
    return sorted(tuple(str(row[k]) for k in sorted(keys)) for row in rows)


@pytest.fixture(scope="module")
def old_checkpoints(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("old_layout")
    with tarfile.open(DATA) as tar:
        tar.extractall(folder, filter="data")
    return folder


def test_the_old_module_names_are_mapped_to_existing_modules():
    import importlib

    for old, new in MOVED_MODULES.items():
        spec = importlib.util.find_spec(old)
        assert spec is None or spec.submodule_search_locations is not None, f"{old} is a module again"
        importlib.import_module(new)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(QUERIES))
# the old checkpoints were written with topk_set_join(window=...): the restart keeps that spelling
@pytest.mark.filterwarnings("ignore:topk_set_join\\(window=:DeprecationWarning")
def test_a_checkpoint_of_the_flat_layout_restarts_exactly(docs_spark, old_checkpoints, tmp_path, name):
    build, before, after = QUERIES[name]
    old_rows = json.loads((old_checkpoints / f"{name}.rows.json").read_text())
    assert old_rows, "the fixture's first run produced rows"
    restarted = _run(build(docs_spark, after), old_checkpoints / name)
    fresh = _run(build(docs_spark, after), tmp_path / "fresh")
    assert restarted, "the restarted query processed the new input"
    keys = set(old_rows[0])  # the fixture's columns (natural_join's duration windows gained window_start/_end)
    assert _canonical(old_rows + restarted, keys) == _canonical(fresh, keys)


@pytest.fixture
def docs_spark(spark):
    from driftjoin.spark.sources.documents import register

    register(spark)
    return spark
