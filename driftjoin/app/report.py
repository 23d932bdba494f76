"""The control plane's view of a running or finished join: statistics tables, summary, plot.

Reads the per-batch statistics the operators write (:mod:`driftjoin.spark.runtime.stats`) and
computes the paper's metrics (section 9.1):

- duplication ratio: workset memberships (inner, outlier and outer copies of records in all
  worksets of all workers) divided by the number of input records;
- comparisons ratio: distance computations divided by joined pairs (inner x inner pairs are
  emitted without a comparison);
- processing-time latency per worker: operator emission time minus the later ingestion time of
  the pair, as p50/p99 from per-batch histograms.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from driftjoin.spark.runtime.stats import LATENCY_BOUNDS, histogram_quantile, read_stats


def metrics_table(metrics_dir: str, query_id: str | None = None) -> pd.DataFrame:
    """One row per (worker, batch): time, comparisons, pairs, memberships, state bytes, p50/p99.

    Committed micro-batches only, each once (:func:`driftjoin.spark.runtime.stats.read_stats`);
    ``query_id`` keeps one query's rows when several share ``metrics_dir``.
    """
    rows = []
    for s in read_stats(metrics_dir, "computation", query_id=query_id):
        hist = np.asarray(s["latency_hist"])
        rows.append({
            "worker": s["worker"], "seq": s["seq"], "time": s["time"], "comparisons": s["comparisons"],
            "pairs": s["pairs"], "memberships": s["memberships"], "state_bytes": s["state_bytes"],
            "p50_latency_s": histogram_quantile(hist, 0.5), "p99_latency_s": histogram_quantile(hist, 0.99),
            "latency_hist": hist,
        })
    cols = ["worker", "seq", "time", "comparisons", "pairs", "memberships", "state_bytes", "p50_latency_s", "p99_latency_s", "latency_hist"]
    return pd.DataFrame(rows, columns=cols).sort_values(["time", "worker"]).reset_index(drop=True)


def workset_table(metrics_dir: str, query_id: str | None = None) -> pd.DataFrame:
    """One row per (worker, batch, workset): new inner/outlier/outer members, comparisons, pairs."""
    rows = []
    for s in read_stats(metrics_dir, "computation", query_id=query_id):
        for g, (inner, outlier, outer, cmp_, pairs) in s["worksets"].items():
            rows.append({"worker": s["worker"], "seq": s["seq"], "time": s["time"], "workset": int(g),
                         "inner": inner, "outlier": outlier, "outer": outer, "comparisons": cmp_, "pairs": pairs})
    return pd.DataFrame(rows, columns=["worker", "seq", "time", "workset", "inner", "outlier", "outer", "comparisons", "pairs"])


def summary(metrics_dir: str, query_id: str | None = None) -> tuple[dict, pd.DataFrame]:
    """Totals (records, pairs, ratios) and a per-worker table (pairs, comparisons, p50/p99), of
    the committed micro-batches (what the sink holds)."""
    table = metrics_table(metrics_dir, query_id)
    records = sum(s.get("records", 0) for s in read_stats(metrics_dir, "computation", query_id=query_id))
    pairs = int(table["pairs"].sum()) if len(table) else 0
    comparisons = int(table["comparisons"].sum()) if len(table) else 0
    memberships = int(table["memberships"].sum()) if len(table) else 0
    totals = {
        "records_in": records,
        "pairs_out": pairs,
        "duplication_ratio": memberships / records if records else math.nan,
        "comparisons_ratio": comparisons / pairs if pairs else math.nan,
        "comparisons": comparisons,
    }
    per_worker = []
    for w, g in table.groupby("worker"):
        hist = np.sum(np.stack(g["latency_hist"].to_numpy()), axis=0) if len(g) else np.zeros(len(LATENCY_BOUNDS) + 1)
        per_worker.append({"worker": int(w), "pairs": int(g["pairs"].sum()), "comparisons": int(g["comparisons"].sum()),
                           "p50_latency_s": histogram_quantile(hist, 0.5), "p99_latency_s": histogram_quantile(hist, 0.99)})
    return totals, pd.DataFrame(per_worker)


def plot_latency(metrics_dir: str, path: str | Path, title: str = "p99 latency per worker") -> Path:
    """PNG of per-worker p99 latency over time (the paper's Figures 4 to 6)."""
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
