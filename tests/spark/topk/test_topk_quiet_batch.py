"""topk_set_join on a micro-batch that changes nothing in the top-k (found by the crash harness).

Such a batch used to yield an empty frame of float columns, which PySpark's Arrow conversion
rejects ("Cannot convert pyarrow.lib.ChunkedArray to pyarrow.lib.Array"): the query failed, and
failed again on every restart, since the restart replays the same batch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from pyspark.sql import types as T
from pyspark.sql.conversion import PandasToArrowConversion

from driftjoin.spark.runtime.static import MemoryHandle
from driftjoin.spark.topk.operators import SwoopProcessor, TopKPlan

OUT = T.StructType([T.StructField("kind", T.StringType()), T.StructField("left_id", T.LongType()),
                    T.StructField("right_id", T.LongType()), T.StructField("similarity", T.DoubleType()),
                    T.StructField("change_time", T.LongType()), T.StructField("seq", T.LongType())])


def _batch(rows: list[tuple[int, list[str], float]]) -> pd.DataFrame:
    return pd.DataFrame({"key": 0, "side": np.int8(0), "id": [r[0] for r in rows],
                         "tokens": [np.array(r[1], dtype=object) for r in rows], "ts": [r[2] for r in rows]})


def test_a_batch_without_top_k_changes_yields_nothing_spark_cannot_take():
    proc = SwoopProcessor(TopKPlan(1, "jaccard", 100.0, False, None))
    proc.init(MemoryHandle())
    first = list(proc.handleInputRows((0,), iter([_batch([(1, ["a", "b"], 1.0), (2, ["a", "b"], 2.0)])]), None))
    assert [f["kind"].tolist() for f in first] == [["enter"]]
    quiet = list(proc.handleInputRows((0,), iter([_batch([(3, ["x"], 3.0), (4, ["y"], 4.0)])]), None))
    for frame in first + quiet:
        PandasToArrowConversion.convert(frame, OUT)  # what the Python worker does with the output
    assert sum(len(f) for f in quiet) == 0
