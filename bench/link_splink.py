"""``link`` against Splink 5's ``deterministic_link()`` (DuckDB) on the same rules, in one run.

Records: the person generator (:mod:`driftjoin.generators.persons`, seed 1, names less skewed
than its default, ``name_zipf=0.5``) with a ``full_name`` column (given name and surname) and,
for Splink, the address's word set as a list column (the words of
:func:`driftjoin.linkage.rules.words`, distinct).

Rule sets (each rule written for Splink as a blocking rule in SQL):

* ``fuzzy`` (a rule without an equal field, the issue's shape): equal postcode and surname within
  2 edits; address words within Jaccard 0.25; full name within 1 edit. Splink's blocking on a rule
  with no equality is a cross join filtered by the SQL.
* ``blocked`` (every rule carries an equal field): equal postcode and surname within 2 edits;
  equal date of birth and given name within 1 edit; equal surname and address words within
  Jaccard 0.25. Splink's blocking is then a DuckDB hash join per rule.

Jaccard in SQL, exactly: ``4 |A & B| >= 3 |A | B|`` (distance <= 0.25 on distinct word lists).
For every size both run on the same records; the pairs are checked equal (as unordered id pairs) and
Splink's ``match_key`` (the first rule a pair meets) against driftjoin's ``rule``. driftjoin runs
``link`` on a static DataFrame on ``local[2]`` (Spark's start-up and a warm-up link of 500 records
per rule set, on Spark and in one process, excluded; the time includes reading the input from
Parquet and collecting every pair's ids and first rule); the same link in one process (driftjoin's
core, :mod:`driftjoin.linkage.engine`, no Spark) is timed beside it, since Spark's fixed cost per
job (seconds) dominates small inputs. A growth curve runs driftjoin alone on the ``fuzzy`` set up to
``--curve`` sizes (Splink's cross join is quadratic: its time at those sizes is not measured),
with the generator's vocabularies fixed (coincidental matches, and so the output, grow as n^2)
or, ``--curve-pools scaled``, growing with the records (the output grows with the duplicates);
it prints how time and pairs grow between consecutive sizes.

Caps, so that a run on a busy machine ends when it should: Splink runs in a child process killed
after ``--splink-cap`` seconds (the row then says ``splink_s: "> cap"`` and the ratio is a lower
bound); the whole run has ``--budget`` seconds: a Spark job still running then is cancelled, and a
curve size is not started when the last one's time grown by ``(n / n_last) ** 1.5`` would not fit.
Each row is written to the JSON as soon as it is measured, with the load average at the time.

Run: ``flock /tmp/bench.lock nice -n 10 .venv/bin/python bench/link_splink.py`` (``--sizes``,
``--blocked-sizes``, ``--curve``, ``--curve-pools``, ``--splink-cap``, ``--budget``, ``--repeats``: the median of
that many runs of each of the three at the compared sizes). Writes
``bench/results/link_splink.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import datetime as dt

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / "out" / "link_splink"
EPOCH = dt.date(1970, 1, 1)

RULES = {
    "fuzzy": [
        {"postcode": "equal", "surname": ("levenshtein", 2)},
        {"address": ("jaccard", 0.25, "words")},
        {"full_name": ("levenshtein", 1)},
    ],
    "blocked": [
        {"postcode": "equal", "surname": ("levenshtein", 2)},
        {"dob": "equal", "given_name": ("levenshtein", 1)},
        {"surname": "equal", "address": ("jaccard", 0.25, "words")},
    ],
}
JACCARD_SQL = "4 * len(list_intersect(l.address_words, r.address_words)) >= 3 * len(list_distinct(list_concat(l.address_words, r.address_words)))"
SQL = {
    "fuzzy": ["l.postcode = r.postcode and levenshtein(l.surname, r.surname) <= 2",
              f"len(l.address_words) > 0 and len(r.address_words) > 0 and {JACCARD_SQL}",
              "levenshtein(l.full_name, r.full_name) <= 1"],
    "blocked": ["l.postcode = r.postcode and levenshtein(l.surname, r.surname) <= 2",
                "l.dob = r.dob and levenshtein(l.given_name, r.given_name) <= 1",
                f"l.surname = r.surname and len(l.address_words) > 0 and len(r.address_words) > 0 and {JACCARD_SQL}"],
}


def pools(n: int, kind: str) -> dict[str, float]:
    """The generator's vocabularies: ``fixed`` (its defaults, whatever ``n``) or ``scaled`` with
    ``n`` (the default sizes at 20,000 records), postcodes then as mildly skewed as the names
    (Zipf 0.5, not 1.1, whose hottest postcode holds about a sixth of the records at every size).
    With fixed pools coincidental matches (same house number and street type, names one edit
    apart, surnames two edits apart in the hot postcode) grow as ``n^2``; with scaled pools each
    value is shared by about as many records at every ``n``, and the pairs grow with the duplicates."""
    if kind == "fixed":
        return {}
    return {"postcodes": max(1, n // 4), "surnames": max(1, n), "given_names": max(1, n // 10),
            "streets": max(1, n * 3 // 20), "house_numbers": max(1, n * 299 // 20_000), "zipf": 0.5}


def records(n: int, kind: str = "fixed"):
    """The persons as a pandas DataFrame (``unique_id`` = id), vocabularies by :func:`pools`."""
    import pandas as pd

    from driftjoin.generators.persons import PersonOptions, person_records
    from driftjoin.linkage.rules import words

    r = person_records(1, 0, 0, n, PersonOptions(name_zipf=0.5, **pools(n, kind)))
    df = pd.DataFrame({"unique_id": r["id"], "given_name": r["given_name"], "surname": r["surname"],
                       "dob": pd.Series(r["dob"]).dt.date, "address": r["address"], "postcode": r["postcode"]})
    df["full_name"] = [None if g is None or s is None else f"{g} {s}" for g, s in zip(df.given_name, df.surname)]
    df["address_words"] = [None if a is None else sorted(set(words(a))) for a in df.address]
    df = df.astype(object).where(df.notna(), None)
    return df


def _splink_child(df, which: str, out) -> None:
    out.put(run_splink(df, which))


def run_splink_capped(df, which: str, cap: float) -> tuple[float | None, dict | None]:
    """:func:`run_splink` in a child process, killed after ``cap`` seconds: (None, None) then."""
    import multiprocessing as mp
    import queue

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    child = ctx.Process(target=_splink_child, args=(df, which, out))
    child.start()
    try:
        return out.get(timeout=cap)
    except queue.Empty:
        return None, None
    finally:
        child.kill()
        child.join()


def run_splink(df, which: str) -> tuple[float, dict]:
    from splink import Linker, SettingsCreator
    from splink.backends.duckdb import DuckDBAPI

    db = DuckDBAPI()
    sdf = db.register(df)
    settings = SettingsCreator(link_type="dedupe_only", blocking_rules_to_generate_predictions=SQL[which],
                               retain_intermediate_calculation_columns=False)
    linker = Linker(sdf, settings, log_level="WARNING")
    t = time.perf_counter()
    out = linker.inference.deterministic_link().as_pandas_dataframe()
    dt = time.perf_counter() - t
    pairs = {(min(a, b), max(a, b)): int(k) for a, b, k in zip(out.unique_id_l, out.unique_id_r, out.match_key)}
    return dt, pairs


def run_link(spark, path: str, which: str, parallelism: int = 2, cap: float | None = None
             ) -> tuple[float | None, dict | None]:
    """``link`` on the Parquet records; its jobs are cancelled after ``cap`` seconds: (None, None) then."""
    import threading

    from driftjoin import link

    df = spark.read.parquet(path)
    timer = threading.Timer(cap, spark.sparkContext.cancelAllJobs) if cap is not None else None
    t = time.perf_counter()
    if timer is not None:
        timer.start()
    try:
        rows = link(df, rules=RULES[which], id_col="unique_id", parallelism=parallelism).select(
            "left_id", "right_id", "rule").collect()
    except Exception:  # noqa: BLE001 -- cancelled at the cap (Spark raises its own error types)
        if timer is not None and not timer.is_alive():
            return None, None
        raise
    finally:
        if timer is not None:
            timer.cancel()
    dt = time.perf_counter() - t
    return dt, {(r.left_id, r.right_id): r.rule for r in rows}


def run_core(df, which: str, parallelism: int = 2) -> tuple[float, dict]:
    """The same link in one process (driftjoin's core, no Spark): what the algorithm costs."""
    from driftjoin.linkage.choose import build_core
    from driftjoin.linkage.engine import LinkEngine
    from driftjoin.linkage.records import Fields, link_records
    from driftjoin.linkage.rules import check_rules
    from driftjoin.windows import Windowing

    kinds = {"given_name": "string", "surname": "string", "dob": "date", "address": "string", "postcode": "string",
             "full_name": "string"}
    t = time.perf_counter()
    rs = check_rules(RULES[which], kinds)
    raw = {c: (np.array([np.iinfo(np.int64).min if d is None else (d - EPOCH).days for d in df[c]], np.int64)
               if c == "dob" else df[c].tolist()) for c in rs.columns}
    fields = Fields.build(rs, raw)
    core, _ = build_core(rs, n_workers=parallelism, self_join=True, windows=Windowing.unbounded(), sample=fields)
    pairs = LinkEngine(core).process(link_records(df.unique_id.to_numpy(np.int64), fields))
    dt = time.perf_counter() - t
    return dt, {(a, b): r for a, b, r in zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.rule.tolist())}


def write_parquet(spark, df, path: Path) -> str:
    if path.exists():
        shutil.rmtree(path)
    sdf = spark.createDataFrame(df.drop(columns=["address_words"]),
                                "unique_id long, given_name string, surname string, dob date, address string, "
                                "postcode string, full_name string")
    sdf.write.parquet(str(path))
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="8000,20000", help="fuzzy rule set: both")
    ap.add_argument("--blocked-sizes", default="20000,100000", help="blocked rule set: both")
    ap.add_argument("--curve", default="50000,100000,200000,500000,1000000", help="fuzzy rule set: driftjoin alone")
    ap.add_argument("--curve-pools", choices=("fixed", "scaled"), default="fixed",
                    help="the curve's vocabularies (pools): fixed, or growing with the records")
    ap.add_argument("--splink-cap", type=float, default=1200.0, help="seconds before Splink's child is killed")
    ap.add_argument("--budget", type=float, default=3600.0, help="seconds for the whole run")
    ap.add_argument("--repeats", type=int, default=1,
                    help="runs of link, the core and Splink per compared size: the median is reported")
    args = ap.parse_args()
    from driftjoin import local_session

    began = time.monotonic()
    load = os.getloadavg()
    spark = local_session(2, "link-splink")
    WORK.mkdir(parents=True, exist_ok=True)
    RESULTS.mkdir(exist_ok=True)
    small = records(500)
    warm = write_parquet(spark, small, WORK / "warm")
    for which in RULES:  # each rule set's kernels compiled or loaded from numba's cache, untimed
        run_link(spark, warm, which)
        run_core(small, which)
    rows = []

    def left() -> float:
        return args.budget - (time.monotonic() - began)

    def save() -> None:
        (RESULTS / "link_splink.json").write_text(json.dumps(
            {"load_before": load, "load_after": os.getloadavg(), "args": vars(args), "rows": rows}, indent=1))

    def compare(which: str, n: int, with_splink: bool, kind: str = "fixed") -> None:
        df = records(n, kind)
        path = write_parquet(spark, df, WORK / f"{which}-{n}{'' if kind == 'fixed' else '-' + kind}")
        t_link, got = run_link(spark, path, which, cap=max(left(), 1.0))
        if t_link is not None and with_splink and args.repeats > 1:  # the median of the repeats
            t_link = float(np.median([t_link] + [run_link(spark, path, which)[0] for _ in range(args.repeats - 1)]))
        row = {"rules": which, "records": n, "pools": kind, "load_1min": round(os.getloadavg()[0], 1),
               "driftjoin_s": "> cap" if t_link is None else round(t_link, 2)}
        if got is not None:
            row["pairs"] = len(got)
        if with_splink and got is not None:
            t_core, core_pairs = run_core(df, which)
            t_core = float(np.median([t_core] + [run_core(df, which)[0] for _ in range(args.repeats - 1)]))
            row.update(core_s=round(t_core, 2), core_same=core_pairs == got)
            t_sp, want = run_splink_capped(df, which, min(args.splink_cap, max(left(), 1.0)))
            if want is not None and args.repeats > 1:
                more = (run_splink_capped(df, which, args.splink_cap)[0] for _ in range(args.repeats - 1))
                t_sp = float(np.median([t_sp] + [t for t in more if t is not None]))
            if want is None:
                cap = min(args.splink_cap, max(left(), 1.0))
                row.update(splink_s=f"> {cap:g}", ratio=f"> {cap / t_link:.1f}", core_ratio=f"> {cap / t_core:.1f}")
            else:
                row.update(splink_s=round(t_sp, 2), ratio=round(t_sp / t_link, 2), core_ratio=round(t_sp / t_core, 2),
                           same_pairs=set(got) == set(want),
                           same_first_rule=all(got[p] == want[p] for p in want if p in got))
        rows.append(row)
        save()
        print(row, flush=True)

    for n in [int(x) for x in args.sizes.split(",") if x]:
        compare("fuzzy", n, True)
    for n in [int(x) for x in args.blocked_sizes.split(",") if x]:
        compare("blocked", n, True)
    for n in [int(x) for x in args.curve.split(",") if x]:
        done = [r for r in rows if r["rules"] == "fuzzy" and isinstance(r["driftjoin_s"], float)]
        if done and done[-1]["driftjoin_s"] * (n / done[-1]["records"]) ** 1.5 > left():
            print(f"curve stops before {n:,} records: it would not fit the budget", flush=True)
            break
        compare("fuzzy", n, False, args.curve_pools)
    curve = [r for r in rows if r["rules"] == "fuzzy" and isinstance(r["driftjoin_s"], float)
             and r["pools"] == args.curve_pools]
    for a, b in zip(curve, curve[1:]):
        grow = np.log(b["records"] / a["records"])
        print(f"{args.curve_pools} pools, {a['records']:,} -> {b['records']:,} records: time grows as n^"
              f"{np.log(b['driftjoin_s'] / a['driftjoin_s']) / grow:.2f}, pairs as n^{np.log(b['pairs'] / a['pairs']) / grow:.2f}"
              f"; {1e6 * b['driftjoin_s'] / b['pairs']:.0f} us per pair")
    save()
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print(f"{'rules':8} {'pools':6} {'records':>9} {'link (Spark) s':>15} {'core s':>7} {'splink s':>9} {'splink/link':>12} "
          f"{'splink/core':>12} {'pairs':>9} same")
    for r in rows:
        print(f"{r['rules']:8} {r['pools']:6} {r['records']:>9,} {r['driftjoin_s']:>15} {r.get('core_s', '-'):>7} "
              f"{r.get('splink_s', '-'):>9} {r.get('ratio', '-'):>12} {r.get('core_ratio', '-'):>12} "
              f"{r.get('pairs', '-'):>9} {r.get('same_pairs', '-')}/{r.get('core_same', '-')} load {r['load_1min']}")
    try:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 4))
        for which in RULES:
            pts = [r for r in rows if r["rules"] == which and isinstance(r["driftjoin_s"], float)]
            ax.loglog([r["records"] for r in pts], [r["driftjoin_s"] for r in pts], "o-", label=f"driftjoin {which}")
            sp = [r for r in pts if isinstance(r.get("splink_s"), float)]
            if sp:
                ax.loglog([r["records"] for r in sp], [r["splink_s"] for r in sp], "s--", label=f"Splink {which}")
        ax.set_xlabel("records")
        ax.set_ylabel("seconds")
        ax.legend()
        fig.tight_layout()
        fig.savefig(RESULTS / "link_splink.png")
    except ImportError:
        pass
    spark.stop()


if __name__ == "__main__":
    main()
