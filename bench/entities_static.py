"""The entity stage on a static DataFrame of links over generated person records, against union-find in one process.

Records: ``--records`` person records of :mod:`driftjoin.generators.persons` (two streams' worth of
one seed, with known duplicates). Links: the pairs of three exact blocking rules, computed with
pandas (the same pairs a rule set of ``link`` with only ``"equal"`` conditions returns), so the
graph has what real links have: duplicates joined through several rules, chains, and false links
between different persons who share the fields:

* surname and date of birth equal;
* given name and date of birth equal;
* given name, surname and postcode equal.

Then, side by side in one run:

* ``entities`` on Spark (``local[2]``): the links read from Parquet, the entity rows written to
  Parquet (one warm-up on a small input first: the Python workers' imports are paid once);
* the entity core (:class:`driftjoin.entitygraph.EntityGraph`, one batch) in this process;
* scipy: ``pandas.factorize`` of the ids and ``scipy.sparse.csgraph.connected_components`` (a
  union-find's grouping without ids, rows or state), in this process.

Same grouping: each record's entity id from Spark and from the core equals the smallest record of
its scipy component (the static id rule). Reports links/s of each and the ratios; also how the
entities compare with the generator's true persons (whole, split, merged: what the three exact
rules miss and join wrongly, not a property of the entity stage).

Run: ``flock /tmp/bench.lock .venv/bin/python bench/entities_static.py`` (``--records 1000000``).
Writes ``bench/results/entities_static.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / "out" / "entities_static"
RULES = (("surname", "dob"), ("given_name", "dob"), ("given_name", "surname", "postcode"))


def persons(n: int, seed: int) -> pd.DataFrame:
    """``n`` person records (half from each of the generator's two streams), cached as Parquet."""
    path = WORK / f"persons-{n}-{seed}.parquet"
    if path.exists():
        return pd.read_parquet(path)
    from driftjoin.generators.persons import person_records

    parts = [pd.DataFrame(person_records(seed=seed, stream=s, start=0, count=n // 2 + (n % 2) * (1 - s)))
             for s in (0, 1)]
    df = pd.concat(parts, ignore_index=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    df.to_parquet(path)
    return df


def rule_links(df: pd.DataFrame) -> pd.DataFrame:
    """Every pair of records (smaller id left) that agrees on all fields of at least one rule."""
    out = []
    for fields in RULES:
        sub = df[["id", *fields]].dropna()
        pairs = sub.merge(sub, on=list(fields), suffixes=("_l", "_r"))
        pairs = pairs[pairs["id_l"] < pairs["id_r"]]
        out.append(pairs[["id_l", "id_r"]])
    links = pd.concat(out, ignore_index=True).drop_duplicates()
    return links.rename(columns={"id_l": "left_id", "id_r": "right_id"}).reset_index(drop=True)


def scipy_smallest(left: np.ndarray, right: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Each linked record and the smallest record of its component, by scipy; seconds taken."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    t = time.perf_counter()
    codes, uniq = pd.factorize(np.concatenate([left, right]))
    n = len(left)
    graph = coo_matrix((np.ones(n, np.int8), (codes[:n], codes[n:])), shape=(len(uniq), len(uniq)))
    _, labels = connected_components(graph.tocsr(), directed=False)
    smallest = pd.Series(uniq).groupby(labels).transform("min").to_numpy()
    return np.asarray(uniq), smallest, time.perf_counter() - t


def truth_report(df: pd.DataFrame, ids: np.ndarray, entity: np.ndarray) -> dict[str, int]:
    """True persons (of two records or more) whole, split over entities or singletons, or merged with
    records of another person."""
    found = pd.Series(entity, index=ids)
    ent = df.set_index("id")["entity"]
    assigned = found.reindex(ent.index)
    assigned = assigned.fillna(pd.Series(-1 - np.arange(len(ent)), index=ent.index))  # singletons: own id
    g = pd.DataFrame({"truth": ent.to_numpy(), "found": assigned.to_numpy()})
    sizes = g.groupby("truth").size()
    multi = sizes[sizes >= 2].index
    per_truth = g[g["truth"].isin(multi)].groupby("truth")["found"].nunique()
    found_truths = g.groupby("found")["truth"].nunique()
    merged_found = set(found_truths[found_truths > 1].index)
    merged = g[g["truth"].isin(multi) & g["found"].isin(merged_found)]["truth"].nunique()
    return {"true_groups": int(len(multi)), "whole": int((per_truth == 1).sum()), "split": int((per_truth > 1).sum()),
            "merged_with_another": int(merged)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    started = time.time()
    load = os.getloadavg()
    df = persons(args.records, args.seed)
    links = rule_links(df)
    print(f"{len(df):,} person records, {len(links):,} links from {len(RULES)} exact rules "
          f"(load {load[0]:.1f} {load[1]:.1f} {load[2]:.1f})", flush=True)
    WORK.mkdir(parents=True, exist_ok=True)
    links_path = WORK / f"links-{args.records}-{args.seed}.parquet"
    links.to_parquet(links_path)

    from driftjoin import entities, local_session
    from driftjoin.entitygraph import EntityGraph, EntityRules, LinkBatch

    left, right = links["left_id"].to_numpy(), links["right_id"].to_numpy()
    ids, smallest, scipy_s = scipy_smallest(left, right)
    truth = dict(zip(ids.tolist(), smallest.tolist()))

    t = time.perf_counter()
    graph = EntityGraph(EntityRules(), persist=False)
    changes = graph.apply(LinkBatch(left, right))
    core_s = time.perf_counter() - t
    core_ok = dict(zip(changes.record.tolist(), changes.entity.tolist())) == truth

    spark = local_session(2, "driftjoin-entities-static")
    small = spark.createDataFrame(links.head(1000))
    entities(small).write.format("noop").mode("overwrite").save()
    out = WORK / "entities.parquet"
    shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    entities(spark.read.parquet(str(links_path))).write.parquet(str(out))
    spark_s = time.perf_counter() - t
    got = pd.read_parquet(out, columns=["record_id", "entity_id"])
    spark_ok = len(got) == len(truth) and dict(zip(got["record_id"].tolist(), got["entity_id"].tolist())) == truth
    spark.stop()

    sizes = pd.Series(smallest).value_counts()
    result: dict[str, Any] = {
        "records": len(df), "links": len(links), "linked_records": len(ids), "entities": int(len(sizes)),
        "largest": int(sizes.max()), "load_before": load, "load_after": os.getloadavg(),
        "spark_s": spark_s, "core_s": core_s, "scipy_s": scipy_s, "spark_same_grouping": spark_ok,
        "core_same_grouping": core_ok, "truth": truth_report(df, ids, smallest),
    }
    n = len(links)
    rows = [("entities on Spark (read links, write rows)", spark_s), ("entity core, one process", core_s),
            ("scipy connected_components, one process", scipy_s)]
    print(f"\n{'method':<44} {'seconds':>8} {'links/s':>12} {'x scipy':>8}")
    for name, s in rows:
        print(f"{name:<44} {s:>8.2f} {n / s:>12,.0f} {s / scipy_s:>8.1f}")
    print(f"\nsame grouping as scipy: Spark {spark_ok}, core {core_ok}; {len(ids):,} linked records in "
          f"{len(sizes):,} entities, largest {sizes.max()}")
    tr = result["truth"]
    print(f"against the generator's persons ({tr['true_groups']:,} with duplicates): {tr['whole']:,} whole, "
          f"{tr['split']:,} split, {tr['merged_with_another']:,} merged with another person (the three exact rules)")
    print(f"load average after: {' '.join(f'{x:.1f}' for x in result['load_after'])}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "entities_static.json").write_text(json.dumps(result, indent=1, default=str))
    plot(result, RESULTS / "entities_static.png")
    print(f"wrote {RESULTS / 'entities_static.json'} and .png in {time.time() - started:.0f} s")
    if not (spark_ok and core_ok):
        sys.exit(1)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = ["entities (Spark)", "entity core", "scipy csgraph"]
    seconds = [result["spark_s"], result["core_s"], result["scipy_s"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.bar(names, [result["links"] / s for s in seconds])
    ax.set(ylabel="links per second", title=f"{result['links']:,} links over {result['records']:,} person records")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
