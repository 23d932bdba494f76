"""The link core on the streaming bench's records: where a batch's time goes, rule by rule.

The records of ``bench/link_stream.py`` (two ``driftjoin-persons`` streams, seed 1, 2 x 1,000
records/s) in batches of ``--batch`` records (4,000: a 2-second trigger), interval join
``within`` 60 s, 2 workers, in one process (:class:`driftjoin.linkage.engine.LinkEngine`: no
Spark). Each row is one configuration of one rule set; every configuration gets the same batches
in turn (batch k of every configuration before batch k + 1 of any), so a slow spell of the
machine hits them alike. Configurations:

* ``bounds`` / ``no bounds``: the workers test the count bounds of :mod:`driftjoin.metric.bounds`
  before the exact conditions, or test every candidate exactly;
* ``drivers``: without a sample (a stream's default: a condition inside the block), with a
  sample of 20,000 other records of the same generator (drivers chosen by counted work, token
  order by frequency), or each rule with an equal field driven by its block alone.

Reported per configuration: the median time of the batches after the window is full (the last
``--steady`` batches), candidates and exact tests per batch, pairs, and that the pairs of every
configuration of a rule set are the same, batch by batch. Run:
``flock /tmp/bench.lock .venv/bin/python bench/link_core.py``; writes ``bench/results/link_core.json``
and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from driftjoin.generators.persons import person_records
from driftjoin.linkage.choose import build_core
from driftjoin.linkage.engine import LinkEngine
from driftjoin.linkage.records import Fields, link_records
from driftjoin.linkage.rules import check_rules
from driftjoin.windows import Windowing, to_ticks

RESULTS = Path(__file__).resolve().parent / "results"
RULES = [
    {"dob": "equal", "surname": ("levenshtein", 2)},
    {"postcode": "equal", "address": ("jaccard", 0.4, "words")},
    {"given_name": ("levenshtein", 1), "surname": ("levenshtein", 1)},
]
KINDS = {"dob": "date", "surname": "string", "postcode": "string", "address": "string", "given_name": "string"}
RATE = 2000.0  # records per second, both streams


def records(start: int, count: int) -> dict[str, list]:
    """Records ``start .. start + count`` of each stream's half, as raw columns (dates as days)."""
    out: dict[str, list] = {}
    for s in (0, 1):
        r = person_records(seed=1, stream=s, start=start // 2, count=count // 2)
        for k, v in r.items():
            out.setdefault(k, []).extend(list(v))
    out["dob"] = [None if np.isnat(v) else int(v.astype("datetime64[D]").astype(np.int64)) for v in out["dob"]]
    return out


def configurations(rule_sets: dict[str, list[int]], sample_rows: int) -> list[dict]:
    sample_raw = records(10**6, sample_rows)
    out = []
    for name, idx in rule_sets.items():
        rules = [RULES[i] for i in idx]
        rs = check_rules(rules, {c: k for c, k in KINDS.items() if any(c in r for r in rules)})
        sample = Fields.build(rs, {c: sample_raw[c] for c in rs.columns})
        windows = Windowing.interval(to_ticks(60))
        variants = [("no sample", "bounds", None, True), ("no sample", "no bounds", None, False),
                    ("sample", "bounds", sample, True)]
        if any(r.equal and r.fuzzy for r in rs.rules):
            variants.append(("blocks", "bounds", None, True))
        for drivers, bounds, smp, on in variants:
            drive = ["block" if r.equal else None for r in rs.rules] if drivers == "blocks" else None
            core, _ = build_core(rs, n_workers=2, self_join=True, windows=windows, sample=smp,
                                 expected=int(60 * RATE) if smp is not None else None, drive=drive)
            out.append({"rules": name, "drivers": drivers, "bounds": bounds, "rs": rs,
                        "chosen": [d.settings() for d in core.drivers], "engine": LinkEngine(core, bounds=on),
                        "times": [], "pairs": [], "candidates": [], "tested": [], "dead": False})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4000, help="records per batch (both streams)")
    ap.add_argument("--batches", type=int, default=36)
    ap.add_argument("--steady", type=int, default=6, help="batches at the end the median is taken over")
    ap.add_argument("--budget", type=float, default=20.0,
                    help="seconds after which a configuration's batch is its last (it is reported as not finished)")
    args = ap.parse_args()
    rule_sets = {"three rules": [0, 1, 2], "postcode + address": [1], "given + surname": [2]}
    load = os.getloadavg()
    configs = configurations(rule_sets, 20000)
    for b in range(args.batches):
        raw = records(b * args.batch, args.batch)
        times = np.full(args.batch, to_ticks(b * args.batch / RATE), np.int64)
        for c in configs:
            if c["dead"]:
                continue
            rs = c["rs"]
            batch = link_records(np.asarray(raw["id"]), Fields.build(rs, {k: raw[k] for k in rs.columns}), times)
            t0 = time.perf_counter()
            pairs = c["engine"].process(batch)
            dt = time.perf_counter() - t0
            stats = [w.stats for w in c["engine"].workers.values()]
            c["times"].append(dt)
            c["pairs"].append(sorted(pairs.tuples()))
            c["candidates"].append(sum(s.candidates for s in stats))
            c["tested"].append(sum(s.comparisons for s in stats))
            c["dead"] = dt > args.budget
        print(f"batch {b + 1}/{args.batches}: " + ", ".join(
            f"{c['rules']}/{c['drivers']}/{c['bounds']} {c['times'][-1]:.2f}s" for c in configs if len(c["times"]) == b + 1),
            flush=True)
    rows = []
    for name in rule_sets:
        group = [c for c in configs if c["rules"] == name]
        full = [c for c in group if not c["dead"]]
        same = all(c["pairs"] == full[0]["pairs"] for c in full)
        base = next(c for c in group if c["drivers"] == "no sample" and c["bounds"] == "bounds")
        for c in group:
            steady = c["times"][-args.steady:]
            # cumulative counters (LinkStats accumulate): per-batch counts are differences
            cand = np.diff([0] + c["candidates"])[-args.steady:]
            tested = np.diff([0] + c["tested"])[-args.steady:]
            rows.append({"rules": name, "drivers": c["drivers"], "bounds": c["bounds"], "chosen": c["chosen"],
                         "batches": len(c["times"]), "finished": not c["dead"],
                         "median_batch_s": round(float(np.median(steady)), 3),
                         "vs_default": round(float(np.median(steady)) / float(np.median(base["times"][-args.steady:])), 1),
                         "candidates_per_batch": int(np.median(cand)), "tested_per_batch": int(np.median(tested)),
                         "pairs_last_batch": len(c["pairs"][-1]), "same_pairs": same if not c["dead"] else None,
                         "times": [round(t, 3) for t in c["times"]]})
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "link_core.json").write_text(json.dumps({"load_before": load, "load_after": os.getloadavg(),
                                                       "args": vars(args), "rows": rows}, indent=1))
    print(f"\nload average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}; {args.batch} records per batch, "
          f"median of the last {args.steady}")
    print(f"{'rules':<20} {'drivers':<10} {'bounds':<10} {'batch s':>8} {'x default':>9} {'candidates':>11} "
          f"{'tested':>10} {'pairs':>6}  same pairs")
    for r in rows:
        done = "" if r["finished"] else f" (stopped after {r['batches']} batches)"
        print(f"{r['rules']:<20} {r['drivers']:<10} {r['bounds']:<10} {r['median_batch_s']:>8.3f} {r['vs_default']:>9.1f} "
              f"{r['candidates_per_batch']:>11,} {r['tested_per_batch']:>10,} {r['pairs_last_batch']:>6}  "
              f"{r['same_pairs']}{done}")
    try:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 4))
        for r in rows:
            ax.plot(r["times"], label=f"{r['rules']}: {r['drivers']}, {r['bounds']}")
        ax.set_yscale("log")
        ax.set_xlabel(f"batch ({args.batch} records)")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=6)
        fig.tight_layout()
        fig.savefig(RESULTS / "link_core.png", dpi=120)
    except ImportError:
        pass


if __name__ == "__main__":
    main()
