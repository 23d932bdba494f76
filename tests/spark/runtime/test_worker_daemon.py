"""The session's Python workers are forked from driftjoin's preloading daemon."""

from __future__ import annotations

import pandas as pd

from driftjoin.spark.runtime import worker_daemon


def test_workers_start_with_the_operators_imported(spark) -> None:
    def loaded(batches):
        import sys

        for _ in batches:
            yield pd.DataFrame({"name": [n for n in worker_daemon.PRELOAD if n in sys.modules]})

    names = {r.name for r in spark.range(1).mapInPandas(loaded, "name string").collect()}
    assert names == set(worker_daemon.PRELOAD)


def test_a_failing_preload_is_skipped(monkeypatch) -> None:
    monkeypatch.setattr(worker_daemon, "PRELOAD", ("driftjoin_no_such_module",))
    worker_daemon.preload()
