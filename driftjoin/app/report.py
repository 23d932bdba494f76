"""The control plane's view of a running or finished join: statistics tables, summary, plot.

Reads the per-batch statistics the operators write (:mod:`driftjoin.spark.runtime.stats`) and
computes the paper's metrics (section 9.1):

- duplication ratio: workset memberships (inner, outlier and outer copies of records in all
  worksets of all workers) divided by the number of input records;
- comparisons ratio: distance computations divided by joined pairs (inner x inner pairs are
  emitted without a comparison);
- processing-time latency per worker: operator emission time minus the later ingestion time of
  the pair, as p50/p99 from per-batch histograms;
- where that latency goes (:func:`latency_split`): waiting for the pair's micro-batch to start,
  the batch's own work up to the emission, and handing the output over until the batch commits
  (the sink, the state commit, Spark's logs), from the driver's batch timings
  (:func:`driftjoin.spark.runtime.stats.read_batches`).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from driftjoin.spark.runtime.stats import LATENCY_BOUNDS, STAMP, histogram_quantile, read_batches, read_stats

#: Micro-batches with data at the start of each run whose latency is start-up, not steady state:
#: the first batches of a run start the Python workers, load the state and compile the kernels.
STARTUP_BATCHES = 2


def _run_of(record: dict) -> tuple[str | None, int | None]:
    """The run that wrote a statistics record and its batch (a static join's records have none)."""
    stamp = record.get(STAMP)
    return (stamp.get("run"), stamp.get("batch")) if stamp else (None, None)


def _records(metrics_dir: str, query_id: str | None, run_id: str | None, operator: str = "computation") -> list[dict]:
    return [s for s in read_stats(metrics_dir, operator, query_id=query_id) if run_id is None or _run_of(s)[0] == run_id]


def _startup(records: list[dict]) -> set[tuple[str | None, int | None]]:
    """The (run, batch) pairs that are one of their run's first :data:`STARTUP_BATCHES` batches
    with data (a batch without data writes no statistics and starts nothing)."""
    batches: dict[str | None, set[int]] = {}
    for r in records:
        run, batch = _run_of(r)
        if run is not None:
            batches.setdefault(run, set()).add(batch)
    return {(run, b) for run, bs in batches.items() for b in sorted(bs)[:STARTUP_BATCHES]}


def metrics_table(metrics_dir: str, query_id: str | None = None, run_id: str | None = None, *,
                  operator: str = "computation") -> pd.DataFrame:
    """One row per worker and micro-batch of a similarity join's statistics.

    Committed micro-batches only, each once (:func:`driftjoin.spark.runtime.stats.read_stats`), so
    the totals agree with an exactly-once sink.

    Parameters
    ----------
    metrics_dir:
        The ``metrics_dir`` the join wrote to (a path or a ``pyarrow.fs`` URI).
    query_id:
        Keep one streaming query's rows when several share ``metrics_dir``.
    run_id:
        Keep one run's rows (a restart from the checkpoint is a new run: ``query.runId``).
    operator:
        Whose statistics: ``"computation"`` (the similarity join's workers) or ``"link"``.

    Returns
    -------
    pandas.DataFrame
        Columns ``worker, seq, time, comparisons, pairs, memberships, state_bytes,
        p50_latency_s, p99_latency_s, latency_hist, run, startup`` (``startup``: the batch is
        one of its run's first :data:`STARTUP_BATCHES` batches with data), sorted by time.

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import local_session, similarity_join
    >>> from driftjoin.app.report import metrics_table
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(i, [float(i), 0.0]) for i in range(20)], "id long, vector array<double>")
    >>> metrics = tempfile.mkdtemp()
    >>> similarity_join(df, threshold=1.0, metric="euclidean", parallelism=2, metrics_dir=metrics).count()
    19
    >>> int(metrics_table(metrics)["pairs"].sum())
    19
    """
    rows = []
    records = _records(metrics_dir, query_id, run_id, operator)
    startup = _startup(records)
    for s in records:
        hist = np.asarray(s["latency_hist"])
        run = _run_of(s)
        rows.append({
            "worker": s["worker"], "seq": s["seq"], "time": s["time"], "comparisons": s["comparisons"],
            "pairs": s["pairs"], "memberships": s["memberships"], "state_bytes": s["state_bytes"],
            "p50_latency_s": histogram_quantile(hist, 0.5), "p99_latency_s": histogram_quantile(hist, 0.99),
            "latency_hist": hist, "run": run[0], "startup": run in startup,
        })
    cols = ["worker", "seq", "time", "comparisons", "pairs", "memberships", "state_bytes", "p50_latency_s", "p99_latency_s",
            "latency_hist", "run", "startup"]
    return pd.DataFrame(rows, columns=cols).sort_values(["time", "worker"]).reset_index(drop=True)


def workset_table(metrics_dir: str, query_id: str | None = None, run_id: str | None = None) -> pd.DataFrame:
    """One row per worker, micro-batch and workset of a similarity join's statistics.

    Parameters
    ----------
    metrics_dir:
        The ``metrics_dir`` the join wrote to.
    query_id, run_id:
        Keep one query's (one run's) rows, as in :func:`metrics_table`.

    Returns
    -------
    pandas.DataFrame
        Columns ``worker, seq, time, workset, inner, outlier, outer, comparisons, pairs``: the
        workset's new inner, outlier and outer members in the batch, its distance computations
        and joined pairs (a grid cell appears as a workset).

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import local_session, similarity_join
    >>> from driftjoin.app.report import workset_table
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(i, [float(i), 0.0]) for i in range(20)], "id long, vector array<double>")
    >>> metrics = tempfile.mkdtemp()
    >>> similarity_join(df, threshold=1.0, metric="euclidean", parallelism=2, metrics_dir=metrics).count()
    19
    >>> int(workset_table(metrics)["pairs"].sum())
    19
    """
    rows = []
    for s in _records(metrics_dir, query_id, run_id):
        for g, (inner, outlier, outer, cmp_, pairs) in s["worksets"].items():
            rows.append({"worker": s["worker"], "seq": s["seq"], "time": s["time"], "workset": int(g),
                         "inner": inner, "outlier": outlier, "outer": outer, "comparisons": cmp_, "pairs": pairs})
    return pd.DataFrame(rows, columns=["worker", "seq", "time", "workset", "inner", "outlier", "outer", "comparisons", "pairs"])


def _quantiles(hists: list[np.ndarray]) -> tuple[float, float]:
    if not hists:
        return math.nan, math.nan
    hist = np.sum(np.stack(hists), axis=0)
    return histogram_quantile(hist, 0.5), histogram_quantile(hist, 0.99)


def summary(metrics_dir: str, query_id: str | None = None, run_id: str | None = None, *,
            operator: str = "computation") -> tuple[dict, pd.DataFrame]:
    """The paper's metrics of a similarity join: totals and one row per worker.

    Counts committed micro-batches only (what an exactly-once sink holds). Latency is split:
    the first :data:`STARTUP_BATCHES` micro-batches of each run pay for starting the Python
    workers, loading state and compiling, so their latency is reported apart from the steady
    state's.

    Parameters
    ----------
    metrics_dir:
        The ``metrics_dir`` the join wrote to (a path or a ``pyarrow.fs`` URI).
    query_id:
        Keep one streaming query's statistics when several share ``metrics_dir``.
    run_id:
        Keep one run's statistics (``query.runId``); default: every run of the checkpoint.
    operator:
        ``"computation"`` (a similarity join) or ``"link"`` (whose totals also have
        ``pairs_per_rule`` and ``nulls_per_rule``: per rule, the pairs it was the first rule of,
        and the records that took no part in it because a field it reads was null).

    Returns
    -------
    tuple[dict, pandas.DataFrame]
        ``totals``: ``records_in`` (valid records the workers received), ``pairs_out``,
        ``duplication_ratio`` (workset memberships per record), ``comparisons_ratio`` (distance
        computations per pair), ``comparisons``, ``distance_calls`` (calls of a user metric, the
        routers' and the workers'; None for a built-in metric), ``late`` (records that arrived after their
        window closed), ``batches`` and ``startup_batches``. ``per_worker``: columns ``worker,
        pairs, comparisons, p50_latency_s, p99_latency_s`` (steady state: nan when every batch
        was a start-up batch) and ``startup_p99_latency_s``; on a stream also where the steady
        latency goes (:func:`latency_split`: ``wait_*``, ``work_*``, ``handover_*`` p50 and p99,
        nan where the batch timings are missing).

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import local_session, similarity_join
    >>> from driftjoin.app.report import summary
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(i, [float(i), 0.0]) for i in range(20)], "id long, vector array<double>")
    >>> metrics = tempfile.mkdtemp()
    >>> similarity_join(df, threshold=1.0, metric="euclidean", parallelism=2, metrics_dir=metrics).count()
    19
    >>> totals, per_worker = summary(metrics)
    >>> totals["pairs_out"], totals["records_in"]
    (19, 20)
    """
    table = metrics_table(metrics_dir, query_id, run_id, operator=operator)
    records = _records(metrics_dir, query_id, run_id, operator)
    inputs = sum(s.get("records", 0) for s in records)
    pairs = int(table["pairs"].sum()) if len(table) else 0
    comparisons = int(table["comparisons"].sum()) if len(table) else 0
    memberships = int(table["memberships"].sum()) if len(table) else 0
    totals = {
        "records_in": inputs,
        "pairs_out": pairs,
        "duplication_ratio": memberships / inputs if inputs else math.nan,
        "comparisons_ratio": comparisons / pairs if pairs else math.nan,
        "comparisons": comparisons,
        "distance_calls": (sum(s["distance_calls"] for s in records if "distance_calls" in s)
                           if any("distance_calls" in s for s in records) else None),
        "late": sum(s.get("late", 0) for s in records + _records(metrics_dir, query_id, run_id, "formulation")),
        "batches": int(table["seq"].nunique()) if len(table) else 0,
        "startup_batches": int(table.loc[table["startup"], "seq"].nunique()) if len(table) else 0,
    }
    if operator == "link":
        for key in ("pairs_per_rule", "nulls_per_rule"):
            lists = [s[key] for s in records if key in s]
            totals[key] = np.sum(lists, axis=0).astype(int).tolist() if lists else []
    per_worker = []
    for w, g in table.groupby("worker"):
        p50, p99 = _quantiles(list(g.loc[~g["startup"], "latency_hist"]))
        per_worker.append({"worker": int(w), "pairs": int(g["pairs"].sum()), "comparisons": int(g["comparisons"].sum()),
                           "p50_latency_s": p50, "p99_latency_s": p99,
                           "startup_p99_latency_s": _quantiles(list(g.loc[g["startup"], "latency_hist"]))[1]})
    columns = ["worker", "pairs", "comparisons", "p50_latency_s", "p99_latency_s", "startup_p99_latency_s"]
    frame = pd.DataFrame(per_worker, columns=columns)
    split = latency_split(metrics_dir, query_id, run_id)
    if len(split):
        frame = frame.merge(split.drop(columns=["pairs"]), on="worker", how="left")
    return totals, frame


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The ``q`` quantile of ``values`` each counted ``weights`` times (nan if no weight)."""
    keep = weights > 0
    values, weights = values[keep], weights[keep]
    if not len(values):
        return math.nan
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][min(int(np.searchsorted(cum, q * cum[-1], side="left")), len(cum) - 1)])


#: The columns of :func:`latency_split`.
SPLIT_COLUMNS = ["worker", "pairs", "wait_p50_s", "wait_p99_s", "work_p50_s", "work_p99_s", "handover_p50_s",
                 "handover_p99_s", "batch_p50_s"]


def latency_split(metrics_dir: str, query_id: str | None = None, run_id: str | None = None,
                  steady: bool = True) -> pd.DataFrame:
    """Where a pair's latency goes, per worker: waiting, the batch's work, handing over the output.

    A pair's latency (its emission minus its later record's ingestion) is split at the start of
    its micro-batch and at the emission: **waiting** (ingestion to the batch's start: the trigger
    interval and the batch before; lower it with a shorter trigger or a cap on records per
    batch), **work** (the batch's start to the emission: reading, routing, state, the join; lower
    it with more workers or fewer pairs per record) and **hand-over** (the emission to the batch's
    commit: the output's way into Spark, the sink, the state commit; lower it with
    ``output="pairs-lean"`` or a cheaper sink). Work and hand-over are one value per worker and
    batch (each of its pairs has it); waiting is each pair's latency minus its batch's work, from
    the latency histograms (each bucket taken at its geometric middle: within 6%). Needs the batch timings the driver
    writes (:func:`driftjoin.spark.runtime.stats.track_batches`); batches without them are left out.

    Parameters
    ----------
    metrics_dir:
        The ``metrics_dir`` the join wrote to.
    query_id, run_id:
        Keep one query's (one run's) batches, as in :func:`metrics_table`.
    steady:
        Leave out each run's first :data:`STARTUP_BATCHES` micro-batches with data (start-up).

    Returns
    -------
    pandas.DataFrame
        Columns :data:`SPLIT_COLUMNS` (seconds; ``batch_p50_s``: the median whole batch, start
        to commit), one row per worker with pairs in batches that have timings.

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import local_session, similarity_join
    >>> from driftjoin.app.report import latency_split
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(i, [float(i), 0.0]) for i in range(20)], "id long, vector array<double>")
    >>> metrics = tempfile.mkdtemp()
    >>> similarity_join(df, threshold=1.0, metric="euclidean", parallelism=2, metrics_dir=metrics).count()
    19
    >>> list(latency_split(metrics).columns)[:4]  # a static join has no micro-batches to time
    ['worker', 'pairs', 'wait_p50_s', 'wait_p99_s']
    """
    records = _records(metrics_dir, query_id, run_id)
    startup = _startup(records) if steady else set()
    timings = read_batches(metrics_dir, query_id)
    # a bucket's latencies lie between its bounds: take their geometric middle (within 6%)
    upper = np.append(LATENCY_BOUNDS, LATENCY_BOUNDS[-1])
    bounds = np.sqrt(upper * np.concatenate([[LATENCY_BOUNDS[0] / LATENCY_BOUNDS[1] * LATENCY_BOUNDS[0]], upper[:-1]]))
    per: dict[int, dict[str, list]] = {}
    for s in records:
        stamp = s.get(STAMP)
        if not stamp or _run_of(s) in startup:
            continue
        batch = timings.get((stamp["query"], stamp["batch"]))
        hist = np.asarray(s["latency_hist"], dtype=np.float64)
        if batch is None or not hist.sum():
            continue
        work, handover = s["time"] - batch["started"], batch["committed"] - s["time"]
        w = per.setdefault(int(s["worker"]), {"wait": [], "wait_n": [], "work": [], "handover": [], "n": [], "batch": []})
        w["wait"].append(np.maximum(bounds - work, 0.0))
        w["wait_n"].append(hist)
        w["work"].append(work)
        w["handover"].append(handover)
        w["n"].append(hist.sum())
        w["batch"].append(batch["committed"] - batch["started"])
    rows = []
    for worker, w in sorted(per.items()):
        wait, wait_n = np.concatenate(w["wait"]), np.concatenate(w["wait_n"])
        n = np.asarray(w["n"])
        work, handover = np.asarray(w["work"]), np.asarray(w["handover"])
        rows.append({"worker": worker, "pairs": int(n.sum()),
                     "wait_p50_s": _weighted_quantile(wait, wait_n, 0.5), "wait_p99_s": _weighted_quantile(wait, wait_n, 0.99),
                     "work_p50_s": _weighted_quantile(work, n, 0.5), "work_p99_s": _weighted_quantile(work, n, 0.99),
                     "handover_p50_s": _weighted_quantile(handover, n, 0.5),
                     "handover_p99_s": _weighted_quantile(handover, n, 0.99),
                     "batch_p50_s": float(np.median(w["batch"]))})
    return pd.DataFrame(rows, columns=SPLIT_COLUMNS)


def entities_summary(metrics_dir: str, query_id: str | None = None, run_id: str | None = None) -> dict | None:
    """What the entity stage of a job did (``[entities]``, :func:`driftjoin.entities`), from its statistics.

    Parameters
    ----------
    metrics_dir:
        The ``metrics_dir`` the entity stage wrote to.
    query_id, run_id:
        Keep one query's or one run's statistics (the counts of this run; the entities and the
        largest one are the state's after the last batch read).

    Returns
    -------
    dict or None
        ``entities`` and ``records`` (linked records) now, ``largest``, ``new_entities``,
        ``merges``, ``records_added``, ``refused`` (links refused by a guard) with ``refused_by``
        (per guard), ``expired_entities``, ``batches``, ``p99_latency_s`` (a link's ingestion to
        its entity update, steady state); None when the stage wrote nothing.

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import entities, local_session
    >>> from driftjoin.app.report import entities_summary
    >>> spark = local_session(2)
    >>> metrics = tempfile.mkdtemp()
    >>> links = spark.createDataFrame([(1, 2), (2, 3), (4, 5)], "left_id long, right_id long")
    >>> _ = entities(links, max_size=2, time_col="left_id", metrics_dir=metrics).collect()
    >>> s = entities_summary(metrics)
    >>> s["entities"], s["largest"], s["refused"]
    (2, 2, 1)
    """
    records = sorted(_records(metrics_dir, query_id, run_id, "entities"), key=lambda r: r["seq"])
    if not records:
        return None
    last = records[-1]
    startup = _startup(records)
    steady = [np.asarray(r["latency_hist"]) for r in records if _run_of(r) not in startup or _run_of(r)[0] is None]
    return {
        "entities": last["entities"], "records": last["records"], "largest": last["largest"],
        "new_entities": sum(r["new_entities"] for r in records), "merges": sum(r["merges"] for r in records),
        "records_added": sum(r["records_added"] for r in records), "refused": sum(r["refused"] for r in records),
        "refused_by": {k: sum(r[k] for r in records) for k in ("max_size", "one_per_source")},
        "expired_entities": sum(r["expired_entities"] for r in records), "batches": len(records),
        "p99_latency_s": _quantiles(steady)[1],
    }


def plot_latency(metrics_dir: str, path: str | Path, title: str = "p99 latency per worker") -> Path:
    """Draw each worker's p99 latency per micro-batch over time as a PNG (the paper's Figures 4 to 6).

    Parameters
    ----------
    metrics_dir:
        The ``metrics_dir`` the join wrote to.
    path:
        The PNG to write (its folder is created).
    title:
        The plot's title.

    Returns
    -------
    pathlib.Path
        ``path``.

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import local_session, similarity_join
    >>> from driftjoin.app.report import plot_latency
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(i, [float(i), 0.0]) for i in range(20)], "id long, vector array<double>")
    >>> metrics = tempfile.mkdtemp()
    >>> similarity_join(df, threshold=1.0, metric="euclidean", parallelism=2, metrics_dir=metrics).count()
    19
    >>> plot_latency(metrics, f"{metrics}/latency.png").stat().st_size > 0
    True
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = metrics_table(metrics_dir)
    fig, ax = plt.subplots(figsize=(8, 4))
    if len(table):
        t0 = table["time"].min()
        for w, g in table[table["pairs"] > 0].groupby("worker"):
            ax.plot(g["time"] - t0, g["p99_latency_s"], marker=".", label=f"worker {w}")
    ax.set_xlabel("time since start (s)")
    ax.set_ylabel("p99 latency per batch (s)")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize="small")
    ax.grid(alpha=0.3)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
