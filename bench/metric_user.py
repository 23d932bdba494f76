"""A user metric given as a plain Python function (issue 39, item 3): similarity_join against a
one-process Python double loop over all pairs, side by side in one run, with the distance calls.

Data: the words of the ``english-words`` package (web2, lower case, 234,450 words), shuffled with
``random.Random(0)``, the first n (``--sizes``, default 1,500 and 20,000). Metric: edit distance
written in Python (dynamic programming over two rows, one call per pair), threshold 1
(``--threshold``); the same function for every method.

Methods (static self-join on local[2], timed from a cached DataFrame to the collected pairs; the
join's planning and the user metric's triangle check are inside the time; each Spark method runs
once on 300 other words first, so imports and numba's compiling in the Python workers are not timed):

* ``double loop``: the function over all n(n-1)/2 pairs in this process. Above ``--loop-max``
  words it runs on ``--loop-pairs`` random pairs and its time is extrapolated (marked).
* ``driftjoin auto``: ``similarity_join(df, metric=fn, threshold=t)``, which runs pivot filtering.
* ``driftjoin s3j``: the paper's S3J by name (``algorithm="s3j"``), up to ``--s3j-max`` words.
* ``built-in``: ``metric="levenshtein"`` (rapidfuzz in C, ``auto``), for scale.

Distance calls: what the join reports (``driftjoin.app.report.summary(metrics_dir)["distance_calls"]``:
every router's and worker's calls of the function) and the calls on the driver before the start
(the triangle check on 200 sample values, and the plan's measurements), counted by the function
itself; both against n(n-1)/2. Every method's pairs are checked identical to rapidfuzz's exact
edit distance (``process.cdist``).

Run: ``flock /tmp/bench.lock .venv/bin/python bench/metric_user.py`` (writes
``bench/results/metric_user.json`` and ``.png``; the load average before and after is recorded).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"

#: calls of the metric in this process (the driver): the double loop's and the join's planning
CALLS = [0]


def edits(a: str, b: str) -> int:
    """Edit distance in plain Python, counting its calls in this process (defined in ``__main__``,
    so Spark pickles it by value)."""
    CALLS[0] += 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def shuffled_words() -> list[str]:
    from english_words import get_english_words_set

    words = sorted(get_english_words_set(["web2"], lower=True))
    random.Random(0).shuffle(words)
    return words


def exact_pairs(words: list[str], t: int) -> set:
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    out = set()
    for lo in range(0, len(words), 2000):
        d = process.cdist(words[lo : lo + 2000], words, scorer=Levenshtein.distance, score_cutoff=t, dtype=np.int32, workers=1)
        i, j = np.nonzero(d <= t)
        out |= {(a + lo, b) for a, b in zip(i.tolist(), j.tolist()) if a + lo < b}
    return out


def double_loop(words: list[str], t: int, limit: int, pairs: int, rng: np.random.Generator) -> dict[str, Any]:
    n = len(words)
    total = n * (n - 1) // 2
    if n <= limit:
        start = time.perf_counter()
        found = {(i, j) for i in range(n) for j in range(i + 1, n) if edits(words[i], words[j]) <= t}
        return {"seconds": time.perf_counter() - start, "extrapolated": False, "calls": total, "pairs": found}
    i = rng.integers(0, n, pairs)
    j = rng.integers(0, n, pairs)
    start = time.perf_counter()
    for a, b in zip(i.tolist(), j.tolist()):
        edits(words[a], words[b])
    per = (time.perf_counter() - start) / pairs
    return {"seconds": per * total, "extrapolated": True, "calls": total, "pairs": None, "timed_pairs": pairs}


def spark_join(spark, df, t: int, **kw) -> dict[str, Any]:
    from driftjoin import similarity_join
    from driftjoin.app.report import summary
    from driftjoin.spark.similarity.choice import read_choice

    metrics = tempfile.mkdtemp(prefix="metric_user_")
    before = CALLS[0]
    start = time.perf_counter()
    joined = similarity_join(df, threshold=t, value_col="name", parallelism=2, metrics_dir=metrics, **kw)
    driver = CALLS[0] - before  # the triangle check and the plan, before any Spark job
    pairs = {(r[0], r[1]) for r in joined.select("left_id", "right_id").collect()}
    seconds = time.perf_counter() - start
    totals, _ = summary(metrics)
    choice = read_choice(metrics)
    return {"seconds": seconds, "pairs": pairs, "join_calls": totals["distance_calls"], "driver_calls": driver,
            "algorithm": choice["algorithm"], "reason": choice["reason"]}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="1500,20000")
    ap.add_argument("--threshold", type=int, default=1)
    ap.add_argument("--loop-max", type=int, default=1500, help="largest n the double loop runs in full")
    ap.add_argument("--loop-pairs", type=int, default=300_000, help="random pairs timed above --loop-max")
    ap.add_argument("--s3j-max", type=int, default=1500, help="largest n the paper's S3J runs on")
    args = ap.parse_args(argv)
    from driftjoin import local_session

    RESULTS.mkdir(parents=True, exist_ok=True)
    spark = local_session(2, "driftjoin-metric-user-bench")
    words = shuffled_words()
    t = args.threshold
    rng = np.random.default_rng(0)
    record: dict[str, Any] = {"load_before": load(), "threshold": t, "rows": [],
                              "data": "english-words web2 lower case, random.Random(0).shuffle, first n"}
    print(f"load average before: {record['load_before']}", flush=True)
    warm = spark.createDataFrame(list(enumerate(words[-300:])), "id long, name string").cache()
    for kw in ({"metric": edits}, {"metric": edits, "algorithm": "s3j"}, {"metric": "levenshtein"}):
        spark_join(spark, warm, t, **kw)
    for n in [int(s) for s in args.sizes.split(",")]:
        strings = words[:n]
        total = n * (n - 1) // 2
        df = spark.createDataFrame(list(enumerate(strings)), "id long, name string").cache()
        df.count()
        truth = exact_pairs(strings, t)
        loop = double_loop(strings, t, args.loop_max, args.loop_pairs, rng)
        row: dict[str, Any] = {"n": n, "pairs_n_n_1_2": total, "result_pairs": len(truth),
                               "double_loop": {k: v for k, v in loop.items() if k != "pairs"}}
        if loop["pairs"] is not None:
            row["double_loop"]["identical"] = loop["pairs"] == truth
        methods = {"auto": {"metric": edits}, "built-in": {"metric": "levenshtein"}}
        if n <= args.s3j_max:
            methods["s3j"] = {"metric": edits, "algorithm": "s3j"}
        for name, kw in methods.items():
            out = spark_join(spark, df, t, **kw)
            out["identical"] = out.pop("pairs") == truth
            out["x_vs_double_loop"] = loop["seconds"] / out["seconds"]
            if out["join_calls"] is not None:
                out["calls_share_of_pairs"] = (out["join_calls"] + out["driver_calls"]) / total
            row[name] = out
            calls = ("" if out["join_calls"] is None else
                     f", calls {out['join_calls']:,} in the join + {out['driver_calls']:,} on the driver "
                     f"= {out['calls_share_of_pairs']:.4f} of n(n-1)/2 = {total:,}")
            print(f"n={n:,} {name} ({out['algorithm']}): {out['seconds']:.1f} s, {out['x_vs_double_loop']:.1f}x the double "
                  f"loop ({loop['seconds']:.1f} s{', extrapolated' if loop['extrapolated'] else ''}){calls}; "
                  f"identical: {out['identical']}; {out['reason']}", flush=True)
        record["rows"].append(row)
        df.unpersist()
    record["load_after"] = load()
    print(f"load average after: {record['load_after']}", flush=True)
    (RESULTS / "metric_user.json").write_text(json.dumps(record, indent=2, default=str))
    plot(record, RESULTS / "metric_user.png")


def plot(record: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_t, ax_c) = plt.subplots(1, 2, figsize=(11, 4))
    sizes = [r["n"] for r in record["rows"]]
    x = np.arange(len(sizes))
    for k, (name, label) in enumerate([("double_loop", "double loop"), ("s3j", "S3J (paper)"), ("auto", "driftjoin auto"),
                                       ("built-in", "built-in levenshtein")]):
        ys = [r[name]["seconds"] if name in r else np.nan for r in record["rows"]]
        ax_t.bar(x + (k - 1.5) * 0.2, ys, 0.2, label=label)
    ax_t.set_yscale("log")
    ax_t.set_xticks(x, [f"{n:,} words" for n in sizes])
    ax_t.set_ylabel("seconds (double loop above its full size: extrapolated)")
    ax_t.legend(fontsize=8)
    for k, (name, label) in enumerate([("s3j", "S3J (paper)"), ("auto", "driftjoin auto")]):
        ys = [(r[name]["join_calls"] + r[name]["driver_calls"]) if name in r else np.nan for r in record["rows"]]
        ax_c.bar(x + (k - 0.5) * 0.3, ys, 0.3, label=label)
    ax_c.plot(x, [r["pairs_n_n_1_2"] for r in record["rows"]], "k_", markersize=40, label="n(n-1)/2")
    ax_c.set_yscale("log")
    ax_c.set_xticks(x, [f"{n:,} words" for n in sizes])
    ax_c.set_ylabel("distance calls")
    ax_c.legend(fontsize=8)
    fig.suptitle(f"Python edit distance, threshold {record['threshold']}, local[2]")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main(sys.argv[1:])
