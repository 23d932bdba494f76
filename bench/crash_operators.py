"""The operators the crash harness (bench/crash_harness.py) runs: one small adapter each.

An adapter says what input to produce (JSON-lines files, one per tick, both sides of a two-input
join in the same file and the same file source, see :func:`split_sides`),
which streaming query to run over it, and how to compare what the sink holds with the oracle
computed from the very files that were written. Every comparison reports, per result item, how
often it is in the sink and how often the oracle has it, and the input file of the item's later
record, so that a lost or repeated result can be traced to the micro-batch that read it.

- ``similarity``: ``similarity_join`` of two vector inputs (angular, 20-second windows over the
  ingestion time, 2 workers), oracle :func:`driftjoin.s3j.oracle.oracle_pairs`;
  ``similarity-sliding``: 20-second windows every 10 seconds, each pair once per window holding
  both; ``similarity-within``: the interval join ``within="5 seconds"``, each pair whose times
  differ by at most 5 s once (brute-force oracles of the definitions).
- ``topk``: ``topk_set_join`` self-join (Jaccard, k = 30, pairs within 20 seconds); the change stream
  (ordered by ``seq``) must be exactly the change stream of :class:`driftjoin.swoop.BaseTopK`
  fed the same sets in timestamp order, each change once.
- ``natural``: ``natural_join`` self-join of server-log documents, 10-second event-time windows,
  3 joiners; oracle: every pair of a window that :func:`driftjoin.schemafree.document.joinable`
  accepts.
- ``levenshtein``: ``similarity_join`` of two inputs of names under edit distance (threshold 1,
  S3J over the metric space with centroids from a sample, 2 workers), ``within="5 seconds"`` on
  event time; oracle: rapidfuzz ``cdist`` between neighbouring 5-second buckets, then the time test.
- ``jaccard``: ``similarity_join`` self-join of token sets (Jaccard 0.5, prefix filtering),
  sliding windows of 10 s every 5 s on event time; oracle: Python set arithmetic between
  neighbouring buckets, each pair once per window that holds both records.
- ``link``: ``link`` self-link of person-like records, three rules (one on hot postcodes, split by the
  control plane), ``within="5 seconds"`` on event time; oracle: every rule on every pair with rapidfuzz,
  each pair once with its first rule.
- ``equi``: ``equi_join`` (Streaming HyperCube, 3 workers) of two inputs with Zipf keys whose
  hot set moves, pairs within 2 seconds; oracle: a plain hash join with the time predicate.
- ``entities``: ``entities`` over links of a growing id range with ``max_size=12``; oracle: the
  entity rules replayed on the links as the query cut them into batches (tests/entities/oracle.py):
  every row (ids, previous ids, kinds, sizes, refused links) once, and the same final ids.

Times are multiples of 1/1024 s, exact in a double, so window boundaries are the same numbers
in Spark and in the oracle.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any, Callable

import numpy as np

TICK = 1.0 / 1024.0


def stamp(now: float, k: int) -> float:
    """The time of record ``k`` of a file written at ``now``: distinct and exact in a double."""
    return round(now / TICK) * TICK + k * TICK


def split_sides(stream):
    """Left and right rows of one input: one file source, so both sides move in lockstep.

    Two file sources would not: each writes its own log entry before the query's offset log,
    and a crash between the two makes the next batch take two entries from one source, which
    puts that side a batch ahead (window joins then drop the other side's rows as late).
    """
    from pyspark.sql import functions as F

    return stream.where(F.col("side") == 0).drop("side"), stream.where(F.col("side") == 1).drop("side")


def read_lines(work: Path, source: str) -> list[tuple[int, dict]]:
    """(file number, record) of every line written to one input directory, in file order."""
    out = []
    for p in sorted((work / "in" / source).glob("f*.json")):
        f = int(p.stem[1:])
        out.extend((f, json.loads(line)) for line in open(p))
    return out


@dataclass
class Comparison:
    """The sink against the oracle, item by item (an item is a pair, or a change by its seq)."""

    got: Counter
    expected: Counter
    file_of: Callable[[Any], int]
    notes: dict[str, Any] = field(default_factory=dict)

    def differences(self) -> dict[str, list]:
        keys = set(self.got) | set(self.expected)
        return {
            "missing": sorted(k for k in keys if self.got[k] < self.expected[k]),
            "duplicated": sorted(k for k in keys if self.got[k] > self.expected[k] > 0),
            "extra": sorted(k for k in keys if self.expected[k] == 0),
        }


class Adapter:
    name: str
    sources: tuple[str, ...]
    per_file: int

    def write(self, work: Path, f: int, now: float) -> None:
        """Write input file ``f`` of every source (a temporary name, then a rename)."""
        for source in self.sources:
            d = work / "in" / source
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".f{f:05d}.json.tmp"
            with open(tmp, "w") as out:
                for record in self.records(source, f, now):
                    out.write(json.dumps(record) + "\n")
            tmp.rename(d / f"f{f:05d}.json")

    def records(self, source: str, f: int, now: float) -> list[dict]:
        raise NotImplementedError

    def schema(self, source: str) -> str:
        raise NotImplementedError

    def job(self, spark, read: Callable[[str], Any], metrics_dir: str, balance: str):
        """The streaming DataFrame written to the Parquet sink."""
        raise NotImplementedError

    def compare(self, spark, work: Path) -> Comparison:
        raise NotImplementedError


class Similarity(Adapter):
    name, sources, per_file = "similarity", ("S",), 100
    threshold, window = 0.01, 20.0
    #: the window settings of the join
    windows: dict[str, str] = {"window": "20 seconds"}

    def records(self, source, f, now):
        rng = np.random.default_rng(f)
        return [{"id": (f * self.per_file + k) * 2 + side, "side": side, "vector": rng.uniform(-1, 1, 2).tolist(),
                 "ts": stamp(now, 0)} for k in range(self.per_file) for side in (0, 1)]

    def schema(self, source):
        return "id long, side int, vector array<double>, ts double"

    def job(self, spark, read, metrics_dir, balance):
        from pyspark.sql import functions as F

        from driftjoin import similarity_join

        left, right = split_sides(read("S").withColumn("ts", F.col("ts").cast("timestamp")))
        return similarity_join(left, right, threshold=self.threshold, metric="angular", parallelism=2, dim=2,
                               **self.windows, ingest_col="ts", metrics_dir=metrics_dir, balance=balance,
                               balance_options={"monitoring_window": 2.0, "di_threshold": 0.02} if balance != "none" else None)

    def compare(self, spark, work):
        from driftjoin.distance import get_metric
        from driftjoin.s3j.oracle import oracle_pairs

        rows = [r for _, r in read_lines(work, "S")]
        m = get_metric("angular")
        ids = np.array([r["id"] for r in rows])
        vec = m.prepare(np.array([r["vector"] for r in rows]))
        side = np.array([r["side"] for r in rows], dtype=np.int8)
        window = np.floor(np.array([r["ts"] for r in rows]) / self.window).astype(np.int64)
        expected = Counter(oracle_pairs(ids, side, vec, window, m, self.threshold, False))
        got = Counter((r.left_id, r.right_id, int(r.window_start.timestamp() // self.window))
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id", "window_start").collect())
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // 2 // self.per_file)


class SimilarityPairs(Similarity):
    """A window kind whose oracle counts pairs by brute force over the two sides' records."""

    def times_key(self, t_left: float, t_right: float) -> list:
        """One item per time the pair comes out: the window starts holding both, or ``[None]``."""
        raise NotImplementedError

    def compare(self, spark, work):
        from driftjoin.distance import get_metric

        rows = [r for _, r in read_lines(work, "S")]
        m = get_metric("angular")
        vec = m.prepare(np.array([r["vector"] for r in rows]))
        side = np.array([r["side"] for r in rows])
        left, right = np.nonzero(side == 0)[0], np.nonzero(side == 1)[0]
        expected: Counter = Counter()
        for a, b in zip(*np.nonzero(m.pairwise(vec[left], vec[right]) <= self.threshold)):
            x, y = rows[left[a]], rows[right[b]]
            for key in self.times_key(x["ts"], y["ts"]):
                expected[(x["id"], y["id"], key)] += 1
        got = Counter((r.left_id, r.right_id, None if r.window_start is None else r.window_start.timestamp())
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id", "window_start").collect())
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // 2 // self.per_file)


class SimilaritySliding(SimilarityPairs):
    name = "similarity-sliding"
    windows = {"window": "20 seconds", "slide": "10 seconds"}

    def times_key(self, t_left, t_right):
        lo, hi = min(t_left, t_right), max(t_left, t_right)
        return [k * 10.0 for k in range(int(lo // 10) - 2, int(lo // 10) + 1) if k * 10.0 <= lo and hi < k * 10.0 + 20.0]


class SimilarityWithin(SimilarityPairs):
    name = "similarity-within"
    windows = {"within": "5 seconds"}

    def times_key(self, t_left, t_right):
        return [None] if abs(t_left - t_right) <= 5.0 else []


class TopK(Adapter):
    name, sources, per_file = "topk", ("S",), 20
    k, window = 30, 20.0

    def records(self, source, f, now):
        rng = np.random.default_rng(f)
        vocab = [f"t{i}" for i in range(60)]
        return [{"id": f * self.per_file + j, "tokens": [vocab[i] for i in rng.choice(60, rng.integers(1, 7), replace=False)],
                 "ts": stamp(now, j)} for j in range(self.per_file)]

    def schema(self, source):
        return "id long, tokens array<string>, ts double"

    def job(self, spark, read, metrics_dir, balance):
        from pyspark.sql import functions as F

        from driftjoin import topk_set_join

        sets = read("S").withColumn("ts", F.col("ts").cast("timestamp"))
        return topk_set_join(sets, k=self.k, similarity="jaccard", within=f"{self.window:g} seconds", metrics_dir=metrics_dir)

    def compare(self, spark, work):
        from driftjoin.swoop import BaseTopK

        base = BaseTopK(self.k, "jaccard", self.window + 0.5e-6)  # within= is inclusive: half a microsecond longer
        changes: list[tuple] = []
        by_set: list[int] = []
        for _, r in sorted(read_lines(work, "S"), key=lambda x: x[1]["ts"]):
            for c in base.insert(r["id"], r["tokens"], r["ts"]):
                changes.append((c.kind, c.pair.first, c.pair.second))
                by_set.append(r["id"])
        expected = Counter(enumerate(changes))
        rows = spark.read.parquet(str(work / "out")).select("seq", "kind", "left_id", "right_id").collect()
        got = Counter((r.seq, (r.kind, r.left_id, r.right_id)) for r in rows)

        def file_of(item):
            seq = item[0]
            return by_set[seq] // self.per_file if seq < len(by_set) else -1

        return Comparison(got, expected, file_of, {"late": sum(1 for r in rows if r.kind == "late")})


class Natural(Adapter):
    name, sources, per_file = "natural", ("D",), 20
    window = 10.0

    @cached_property
    def documents(self) -> list[dict]:
        from driftjoin.schemafree.generator import server_log_documents

        return server_log_documents(100_000, seed=11, users=20, servers=2, files=40, timestamp=False)

    def records(self, source, f, now):
        return [{"id": i, "doc": json.dumps(self.documents[i % len(self.documents)]), "ts": stamp(now, j)}
                for j, i in enumerate(range(f * self.per_file, (f + 1) * self.per_file))]

    def schema(self, source):
        return "id long, doc string, ts double"

    def job(self, spark, read, metrics_dir, balance):
        from driftjoin import natural_join

        return natural_join(read("D"), window=f"{self.window:g} seconds", time_col="ts", watermark="5 seconds",
                            partitions=3, metrics_dir=metrics_dir)

    def compare(self, spark, work):
        from driftjoin.schemafree.document import flatten, joinable

        by_window: dict[int, list[tuple[int, dict]]] = {}
        for _, r in read_lines(work, "D"):
            by_window.setdefault(int(r["ts"] // self.window), []).append((r["id"], flatten(json.loads(r["doc"]))))
        expected: Counter = Counter()
        for w, docs in by_window.items():
            index: dict[tuple, list[int]] = {}
            for n, (_, avps) in enumerate(docs):
                for avp in avps.items():
                    index.setdefault(avp, []).append(n)
            for n, (a, avps) in enumerate(docs):
                candidates = {m for avp in avps.items() for m in index[avp] if m > n}
                for m in candidates:
                    b, other = docs[m]
                    if joinable(avps, other):
                        expected[(min(a, b), max(a, b), w)] += 1
        from driftjoin.spark.runtime.stats import read_stats

        got = Counter((r.left_id, r.right_id, r.window)
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id", "window").collect())
        late = sum(sum(s.get("late", {}).values()) for op in ("natural_joiner", "natural_assigner")  # by routing
                   for s in read_stats(str(work / "metrics"), op))
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // self.per_file, {"late": late})


class Equi(Adapter):
    name, sources, per_file = "equi", ("S",), 20
    window, keys, phase_files = 2.0, 200, 60

    def records(self, source, f, now):
        # Zipf keys whose hot set moves every phase_files files (SHC promotes, demotes, moves state)
        hot = np.random.default_rng(f // self.phase_files).permutation(self.keys)
        out = []
        for side in (0, 1):
            ranks = np.minimum(np.random.default_rng([f, side]).zipf(1.3, self.per_file), self.keys) - 1
            out += [{"id": f * self.per_file + j, "side": side, "k": int(hot[ranks[j]]), "t": stamp(now, j),
                     "v": f"{side}.{f}.{j}"} for j in range(self.per_file)]
        return out

    def schema(self, source):
        return "id long, side int, k long, t double, v string"

    def job(self, spark, read, metrics_dir, balance):
        from driftjoin import equi_join

        left, right = split_sides(read("S"))
        return equi_join(left, right, on="k", algorithm="shc", parallelism=3, within=self.window, time_col="t",
                         lateness="5 seconds", metrics_dir=metrics_dir)

    def compare(self, spark, work):
        import pandas as pd

        from driftjoin.spark.runtime.stats import read_stats

        rows = pd.DataFrame([r for _, r in read_lines(work, "S")])
        both = rows[rows["side"] == 0].merge(rows[rows["side"] == 1], on="k", suffixes=("_l", "_r"))
        both = both[(both["t_l"] - both["t_r"]).abs() <= self.window]
        expected = Counter(zip(both["id_l"].tolist(), both["id_r"].tolist()))
        got = Counter((r.left_id, r.right_id)
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id").collect())
        late = sum(s.get("late", 0) for op in ("equi_worker", "equi_dispatcher")  # by routing
                   for s in read_stats(str(work / "metrics"), op))
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // self.per_file, {"late": late})


#: Names the string adapter draws from; each record is one of them with at most one edit.
NAMES = ["anna", "hanna", "johann", "jon", "maria", "marie", "mario", "emile", "\u00e9mile", "zo\u00eb", "li", "sven",
         "kristina", "christina", "peter", "petra"]


def _typo(rng: np.random.Generator, name: str) -> str:
    """``name`` with at most one edit (a deletion, an insertion or a substitution), or unchanged."""
    k = int(rng.integers(0, 4))
    at = int(rng.integers(0, len(name) + 1))
    letter = "aeioun"[int(rng.integers(0, 6))]
    if k == 1 and len(name) > 1:
        return name[: min(at, len(name) - 1)] + name[min(at, len(name) - 1) + 1 :]
    if k == 2:
        return name[:at] + letter + name[at:]
    if k == 3 and at < len(name):
        return name[:at] + letter + name[at + 1 :]
    return name


def _bucket_pairs(rows: list[dict], width: float, close: Callable[[list[dict], list[dict]], list[tuple[int, int]]]):
    """Index pairs ``(i, j)``, ``i < j`` in ``rows``, of records at most ``width`` apart that
    ``close`` accepts: each bucket of ``width`` seconds against itself and the next."""
    buckets: dict[int, list[int]] = {}
    for i, r in enumerate(rows):
        buckets.setdefault(int(r["ts"] // width), []).append(i)
    out = set()
    for b, here in buckets.items():
        for other in (here, buckets.get(b + 1, [])):
            for i, j in close([rows[i] for i in here], [rows[j] for j in other]):
                x, y = here[i], other[j]
                if x != y and abs(rows[x]["ts"] - rows[y]["ts"]) <= width:
                    out.add((min(x, y), max(x, y)))
    return out


class Levenshtein(Adapter):
    name, sources, per_file = "levenshtein", ("S",), 40
    threshold, within = 1, 5.0

    def records(self, source, f, now):
        rng = np.random.default_rng(f)
        return [{"id": (f * self.per_file + k) * 2 + side, "side": side,
                 "name": _typo(rng, NAMES[int(rng.integers(len(NAMES)))]), "ts": stamp(now, k)}
                for k in range(self.per_file) for side in (0, 1)]

    def schema(self, source):
        return "id long, side int, name string, ts double"

    def job(self, spark, read, metrics_dir, balance):
        from pyspark.sql import functions as F

        from driftjoin import similarity_join

        left, right = split_sides(read("S").withColumn("ts", F.col("ts").cast("timestamp")))
        return similarity_join(left, right, threshold=self.threshold, metric="levenshtein", value_col="name",
                               within=f"{self.within:g} seconds", time_col="ts", watermark="10 seconds", algorithm="s3j",
                               sample=NAMES, parallelism=2, metrics_dir=metrics_dir)

    def compare(self, spark, work):
        from rapidfuzz import process
        from rapidfuzz.distance import Levenshtein as Lev

        rows = [r for _, r in read_lines(work, "S")]

        def close(a, b):
            if not a or not b:
                return []
            d = process.cdist([r["name"] for r in a], [r["name"] for r in b], scorer=Lev.distance, dtype=np.int32)
            return list(zip(*np.nonzero(d <= self.threshold)))

        expected = Counter()
        for x, y in _bucket_pairs(rows, self.within, close):
            left, right = (rows[x], rows[y]) if rows[x]["side"] == 0 else (rows[y], rows[x])
            if left["side"] == 0 and right["side"] == 1:
                expected[(left["id"], right["id"])] += 1
        got = Counter((r.left_id, r.right_id)
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id").collect())
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // 2 // self.per_file)


class Jaccard(Adapter):
    name, sources, per_file = "jaccard", ("S",), 30
    threshold, window, slide = 0.5, 10.0, 5.0

    def records(self, source, f, now):
        rng = np.random.default_rng(f)
        vocab = [f"t{i}" for i in range(12)] + ["\u00e9t\u00e9"]
        return [{"id": f * self.per_file + k, "tokens": [vocab[i] for i in rng.integers(0, len(vocab), rng.integers(1, 5))],
                 "ts": stamp(now, k)} for k in range(self.per_file)]

    def schema(self, source):
        return "id long, tokens array<string>, ts double"

    def job(self, spark, read, metrics_dir, balance):
        from pyspark.sql import functions as F

        from driftjoin import similarity_join

        sets = read("S").withColumn("ts", F.col("ts").cast("timestamp"))
        return similarity_join(sets, threshold=self.threshold, metric="jaccard", value_col="tokens",
                               window=f"{self.window:g} seconds", slide=f"{self.slide:g} seconds", time_col="ts",
                               watermark="10 seconds", algorithm="prefix", parallelism=2, metrics_dir=metrics_dir)

    def compare(self, spark, work):
        rows = [r for _, r in read_lines(work, "S")]

        def close(a, b):
            return [(i, j) for i, x in enumerate(a) for j, y in enumerate(b)
                    if float(Fraction(len(set(x["tokens"]) ^ set(y["tokens"])), len(set(x["tokens"]) | set(y["tokens"]))))
                    <= self.threshold]  # the exact distance, rounded to the nearest float (what a float threshold means)

        expected = Counter()
        for x, y in _bucket_pairs(rows, self.window, close):
            lo, hi = sorted((rows[x]["ts"], rows[y]["ts"]))
            k = int(hi // self.slide) - int(self.window // self.slide) + 1  # the first window that holds hi
            while k * self.slide <= lo:
                if hi < k * self.slide + self.window:
                    a, b = sorted((rows[x]["id"], rows[y]["id"]))
                    expected[(a, b, k * self.slide)] += 1
                k += 1
        got = Counter((r.left_id, r.right_id, r.window_start.timestamp())
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id", "window_start").collect())
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // self.per_file)


class Link(Adapter):
    """``link`` self-link of person records (three rules, two of them blocked by a Zipf postcode: the
    control plane splits the hot postcodes' groups mid-stream, ``min_heavy=8``), ``within="5
    seconds"`` on event time; oracle: every rule on every pair 5 s apart, the first rule each pair
    satisfies."""

    name, sources, per_file = "link", ("S",), 40
    within = 5.0
    rules = [{"postcode": "equal", "surname": ("levenshtein", 1)},
             {"given_name": "equal", "surname": "equal"},
             {"postcode": "equal", "given_name": ("levenshtein", 1)}]

    def records(self, source, f, now):
        rng = np.random.default_rng(f)
        return [{"id": f * self.per_file + k, "given_name": _typo(rng, NAMES[int(rng.integers(len(NAMES)))]),
                 "surname": _typo(rng, NAMES[int(rng.integers(len(NAMES)))][::-1]),
                 "postcode": None if rng.random() < 0.1 else str(int(rng.zipf(1.5)) % 20), "ts": stamp(now, k)}
                for k in range(self.per_file)]

    def schema(self, source):
        return "id long, given_name string, surname string, postcode string, ts double"

    def job(self, spark, read, metrics_dir, balance):
        from pyspark.sql import functions as F

        from driftjoin import link

        people = read("S").withColumn("ts", F.col("ts").cast("timestamp"))
        return link(people, rules=self.rules, within=f"{self.within:g} seconds", time_col="ts", watermark="10 seconds",
                    parallelism=3, min_heavy=8, drive=["block", None, "block"], metrics_dir=metrics_dir)

    def compare(self, spark, work):
        from rapidfuzz.distance import Levenshtein as Lev

        rows = [r for _, r in read_lines(work, "S")]

        def first_rule(x, y):
            if x["postcode"] is not None and x["postcode"] == y["postcode"] and Lev.distance(x["surname"], y["surname"]) <= 1:
                return 0
            if x["given_name"] == y["given_name"] and x["surname"] == y["surname"]:
                return 1
            if x["postcode"] is not None and x["postcode"] == y["postcode"] and Lev.distance(x["given_name"], y["given_name"]) <= 1:
                return 2
            return None

        def close(a, b):
            return [(i, j) for i, x in enumerate(a) for j, y in enumerate(b) if first_rule(x, y) is not None]

        expected = Counter()
        for x, y in _bucket_pairs(rows, self.within, close):
            a, b = sorted((rows[x]["id"], rows[y]["id"]))
            expected[(a, b, first_rule(rows[x], rows[y]))] += 1
        got = Counter((r.left_id, r.right_id, r.rule)
                      for r in spark.read.parquet(str(work / "out")).select("left_id", "right_id", "rule").collect())
        return Comparison(got, expected, lambda item: max(item[0], item[1]) // self.per_file)


class Entities(Adapter):
    """Links between records of a growing id range (most near the file's own records, some to
    records of earlier files, so entities formed in different batches merge), ``entities`` with a
    ``max_size`` guard. The oracle (tests/entities/oracle.py, written apart) replays the links batch
    by batch as the query cut them (the checkpoint's offsets and file-source logs): every row of
    every batch, refused links included, and each record's final entity id."""

    name, sources, per_file = "entities", ("S",), 30
    max_size = 12

    def records(self, source, f, now):
        rng = np.random.default_rng(f)
        base = f * 20
        out = []
        for k in range(self.per_file):
            a = base + int(rng.integers(0, 20))
            b = int(rng.integers(0, base + 20)) if rng.random() < 0.15 else base + int(rng.integers(0, 20))
            out.append({"a": a, "b": b, "t": stamp(now, k)})
        return out

    def schema(self, source):
        return "a long, b long, t double"

    def job(self, spark, read, metrics_dir, balance):
        from driftjoin import entities

        return entities(read("S"), left_col="a", right_col="b", time_col="t", max_size=self.max_size,
                        metrics_dir=metrics_dir)

    def compare(self, spark, work):
        import sys

        from crash_harness import batch_files, commits

        sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
        from tests.entities.oracle import Oracle

        lines = {f: [] for f, _ in read_lines(work, "S")}
        for f, r in read_lines(work, "S"):
            lines[f].append((r["a"], r["b"], r["t"], None, None))
        files = batch_files(work)
        oracle = Oracle(max_size=self.max_size)
        expected = Counter()
        first_file = {}
        seq = 0
        for batch in sorted(b for b in commits(work) if files.get(b)):
            names = sorted(name for name, _ in files[batch])
            links = [link for name in names for link in lines[int(name[1:6])]]
            if not links:
                continue
            got = oracle.batch(seq, links)
            for (side, record), (entity, previous, kind, size) in got["rows"].items():
                expected[(seq, side, record, entity, previous, kind, size)] += 1
            for x, y, why in got["refused"]:
                expected[(seq, x[0], x[1], None, y[1], "refused", why)] += 1
            first_file[seq] = int(names[0][1:6])
            seq += 1
        got = Counter()
        for r in spark.read.parquet(str(work / "out")).collect():
            if r.kind == "refused":
                got[(r.seq, r.side, r.record_id, None, r.other_id, "refused", r.reason)] += 1
            else:
                got[(r.seq, r.side, r.record_id, r.entity_id, r.previous_id, r.kind, r.entity_size)] += 1
        from driftjoin import current_entities

        final = {(r.side, r.record_id): r.entity_id for r in current_entities(spark.read.parquet(str(work / "out"))).collect()}
        return Comparison(got, expected, lambda item: first_file.get(item[0], -1),
                          {"final_ids_equal": final == oracle.ids(), "batches": seq})


OPERATORS: dict[str, Callable[[], Adapter]] = {
    "similarity": Similarity, "similarity-sliding": SimilaritySliding, "similarity-within": SimilarityWithin,
    "topk": TopK, "natural": Natural, "equi": Equi, "levenshtein": Levenshtein, "jaccard": Jaccard, "link": Link,
    "entities": Entities}
