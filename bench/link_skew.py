"""Hot blocking keys: the largest worker's share of the work, with and without the hot-key split.

Records from the person generator (Zipf postcodes: exponent ``--zipf`` over 5,000 postcodes, the
first holding about 15% of the records at 1.1), linked by a rule that pairs the postcode's block
(``{"postcode": "equal", "surname": ("levenshtein", 1)}``, driven by the block, so one postcode is
one group) beside a rule with no hot block (``{"dob": "equal", "given_name": ("levenshtein",
1)}``). The work of a worker is the candidate pairs its stores yield (each tested on the values);
the table gives the largest worker's work over the mean, without the split (``min_heavy`` above
any group) and with it (groups decided heavy on a 5,000-record sample), for ``--workers`` workers.
The pairs are checked equal. The same code runs in the Spark operator's workers; here it runs in
one process (:mod:`driftjoin.linkage.engine`), one worker after another, so only the counts matter.

Run: ``flock /tmp/bench.lock .venv/bin/python bench/link_skew.py``. Writes ``bench/results/link_skew.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
RULES = [{"postcode": "equal", "surname": ("levenshtein", 1)}, {"dob": "equal", "given_name": ("levenshtein", 1)}]


def run(n: int, workers: int, zipf: float, split: bool) -> dict:
    from driftjoin.generators.persons import PersonOptions, person_records
    from driftjoin.linkage.choose import build_core
    from driftjoin.linkage.engine import LinkEngine
    from driftjoin.linkage.records import Fields, link_records
    from driftjoin.linkage.rules import NULL_TIME, check_rules
    from driftjoin.windows import Windowing

    r = person_records(2, 0, 0, n, PersonOptions(zipf=zipf))
    rs = check_rules(RULES, {"postcode": "string", "surname": "string", "dob": "date", "given_name": "string"})
    dob = r["dob"].astype("datetime64[D]").astype(np.int64)
    dob[np.isnat(r["dob"])] = NULL_TIME
    fields = Fields.build(rs, {"postcode": r["postcode"], "surname": r["surname"], "dob": dob,
                               "given_name": r["given_name"]})
    sample = fields.take(np.random.default_rng(0).permutation(n)[:5000])
    core, _ = build_core(rs, n_workers=workers, self_join=True, windows=Windowing.unbounded(), sample=sample,
                         expected=n, drive=["block", "block"], min_heavy=64 if split else 10**12)
    t = time.perf_counter()
    engine = LinkEngine(core)
    pairs = engine.process(link_records(r["id"], fields))
    secs = time.perf_counter() - t
    work = np.array([engine.workers[w].stats.candidates if w in engine.workers else 0 for w in range(workers)])
    return {"split": split, "records": n, "workers": workers, "hot_groups": core.tables[0].size(),
            "max_over_mean": round(float(work.max() / work.mean()), 3), "work": work.tolist(), "pairs": len(pairs),
            "seconds": round(secs, 1), "pair_set": set(zip(pairs.left_id.tolist(), pairs.right_id.tolist()))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=50_000)
    ap.add_argument("--workers", default="4,8")
    ap.add_argument("--zipf", type=float, default=1.1)
    args = ap.parse_args()
    load = os.getloadavg()
    rows = []
    for p in [int(x) for x in args.workers.split(",")]:
        without = run(args.records, p, args.zipf, False)
        with_split = run(args.records, p, args.zipf, True)
        same = without.pop("pair_set") == with_split.pop("pair_set")
        for row in (without, with_split):
            row["same_pairs"] = same
            rows.append(row)
            print(row, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "link_skew.json").write_text(json.dumps({"load_before": load, "load_after": os.getloadavg(),
                                                        "zipf": args.zipf, "rows": rows}, indent=1))
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print(f"{'workers':>7} {'split':>6} {'hot groups':>10} {'largest/mean':>13} {'pairs':>9} same")
    for r in rows:
        print(f"{r['workers']:>7} {str(r['split']):>6} {r['hot_groups']:>10} {r['max_over_mean']:>13} {r['pairs']:>9,} "
              f"{r['same_pairs']}")


if __name__ == "__main__":
    main()
