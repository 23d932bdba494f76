"""The operators as fuzz specs (:mod:`tests.fuzz.harness`): lines, runs and models; similarity_join twice
(vectors; strings or token sets); entities with the entity oracle of tests/entities/oracle.py.

Each model is plain Python written from the operator's definition (its README section), not
from its code: which rows are malformed, when a row is late or a duplicate, and the exact output
of the others (brute force).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import Counter
from fractions import Fraction
from typing import Any

import numpy as np
from hypothesis import strategies as st

from driftjoin.distance import get_metric
from driftjoin.schemafree.document import flatten
from driftjoin.spark.entities.api import entities, invalid_entity_links
from driftjoin.spark.equi.api import equi_join, invalid_equi_records
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.natural.api import invalid_documents, natural_join
from driftjoin.spark.similarity.api import invalid_records, similarity_join
from driftjoin.spark.topk.api import invalid_sets, topk_set_join
from driftjoin.swoop import BaseTopK, DuplicateSetError, LateSetError

from tests.entities.oracle import Oracle

from .harness import Case, Line, OperatorSpec, Outcome, cut, dead_ids, dumps, kept_batches

GARBAGE = st.sampled_from(["{oops", "[1, 2, 3]", '"text"', "\x00\x01binary", "{}"])


def _stamp(seconds: float) -> str:
    """A timestamp string Spark parses (session time zone UTC)."""
    whole = int(math.floor(seconds))
    return f"1970-01-01 {whole // 3600:02d}:{whole // 60 % 60:02d}:{whole % 60:02d}.{int(round((seconds - whole) * 1000)):03d}"


def _late_rows(batches: list[list[dict]], window_end, lateness: float, time_of) -> set:
    """Ids of rows whose window closed before their micro-batch: the frontier is the largest time
    of the earlier batches' rows minus ``lateness``; ``window_end(row)`` the end of its window."""
    late, seen = set(), -math.inf
    for batch in batches:
        for r in batch:
            if window_end(r) <= seen - lateness:
                late.add(r["id"])
        times = [time_of(r) for r in batch if r["id"] not in late]
        seen = max([seen, *times])
    return late


def _settings(draw, **choices: st.SearchStrategy) -> dict[str, Any]:
    return {name: draw(strategy, label=name) for name, strategy in choices.items()}


# --------------------------------------------------------------------------------------------


class SimilaritySpec(OperatorSpec):
    """similarity_join of two streams on event time, watermark 5 s: tumbling windows of 10 s,
    sliding windows of 10 s every 5 s, or an interval join within 5 s."""

    name = "similarity_join"
    schema = "id long, vector array<double>, ts string"
    two_sides = True
    WINDOW, SLIDE, WITHIN, LATENESS = 10.0, 5.0, 5.0, 5.0
    WINDOWS = {"tumbling": {"window": "10 seconds"}, "sliding": {"window": "10 seconds", "slide": "5 seconds"},
               "interval": {"within": "5 seconds"}}

    def case(self) -> st.SearchStrategy[Case]:
        @st.composite
        def generate(draw) -> Case:
            s = _settings(draw, metric=st.sampled_from(["euclidean", "angular"]), threshold=st.sampled_from([0.1, 0.3, 0.5]),
                          windows=st.sampled_from(sorted(self.WINDOWS)))
            n = draw(st.integers(1, 60), label="rows")
            coord = st.integers(-10, 10).map(lambda v: v / 10)
            lines, valid = [], {}
            for i in range(n):
                side = draw(st.integers(0, 1))
                ts = draw(st.integers(0, 400).map(lambda v: v / 10))
                row = {"id": i, "vector": [draw(coord), draw(coord)], "ts": _stamp(ts), "_ts": ts, "side": side}
                bad = draw(st.sampled_from([None] * 6 + ["id", "vector", "dim", "nan", "null", "edge", "ts",
                                                               "unparsable", "garbage"]))
                if bad == "id":
                    row.pop("id")
                elif bad == "vector":
                    row["vector"] = None
                elif bad == "dim":
                    row["vector"] = row["vector"][:1]
                elif bad == "nan":
                    row["vector"][0] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
                elif bad == "null":
                    row["vector"][1] = None
                elif bad == "edge":  # a zero vector has no angle; 1e200 overflows squared distances
                    row["vector"] = [0.0, 0.0] if s["metric"] == "angular" else [1e200, 0.0]
                elif bad == "ts":
                    row.pop("ts")
                elif bad == "unparsable":
                    row["ts"] = "yesterday"
                if bad == "garbage":
                    lines.append(Line(side, None, draw(GARBAGE)))
                    continue
                text = dumps({k: v for k, v in row.items() if not k.startswith("_") and k != "side"})
                lines.append(Line(side, row.get("id"), text))
                if bad is None and not (s["metric"] == "angular" and not any(row["vector"])):  # zero: no angle
                    valid[len(lines) - 1] = row
            s["valid"] = valid
            return Case(cut(lines, draw, 4), s)

        return generate()

    def join(self, left, right, case, metrics_dir, streaming):
        s = case.settings
        return similarity_join(left, right, threshold=s["threshold"], metric=s["metric"], dim=2, parallelism=2,
                               **self.WINDOWS[s["windows"]], time_col="ts", watermark="5 seconds", metrics_dir=metrics_dir)

    def dead_letters(self, left, right, case):
        return invalid_records(left, right, metric=case.settings["metric"], dim=2, time_col="ts")

    def observe(self, output, dead, metrics_dir):
        late = Counter(r["id"] for s in read_stats(metrics_dir, "formulation") for r in s.get("late_rows", []))
        return Outcome(Counter((r.left_id, r.right_id) for r in output), Counter(r.id for r in dead), late)

    def windows_of(self, kind: str, t: float) -> list[float]:
        """The starts of the windows holding time ``t`` (an interval join: its home bucket's), earliest first."""
        if kind == "tumbling":
            return [math.floor(t / self.WINDOW) * self.WINDOW]
        if kind == "interval":  # buckets of width within: [b within, (b + 1) within)
            return [math.floor(t / self.WITHIN) * self.WITHIN]
        return [k * self.SLIDE for k in range(math.floor(t / self.SLIDE) - 3, math.floor(t / self.SLIDE) + 1)
                if k * self.SLIDE <= t < k * self.SLIDE + self.WINDOW]

    def expect(self, case, streaming):
        s = case.settings
        kind = s["windows"]
        length = self.WITHIN if kind == "interval" else self.WINDOW
        batches = kept_batches(case, streaming)
        # late: the earliest window (an interval join's home bucket) ended at or before the frontier
        late = _late_rows(batches, lambda r: self.windows_of(kind, r["_ts"])[0] + length, self.LATENESS, lambda r: r["_ts"])
        kept = [r for b in batches for r in b if r["id"] not in late]
        m = get_metric(s["metric"])
        pairs: Counter = Counter()
        for a in kept:
            for b in kept:
                if a["side"] != 0 or b["side"] != 1:
                    continue
                d = m.pairwise(m.prepare(np.array([a["vector"]])), m.prepare(np.array([b["vector"]])))[0, 0]
                if d > s["threshold"]:
                    continue
                if kind == "interval":
                    pairs[(a["id"], b["id"])] += abs(a["_ts"] - b["_ts"]) <= self.WITHIN + 1e-9
                else:
                    pairs[(a["id"], b["id"])] += len(set(self.windows_of(kind, a["_ts"])) & set(self.windows_of(kind, b["_ts"])))
        return Outcome(+pairs, dead_ids(case), Counter(late))


# --------------------------------------------------------------------------------------------


def _edits(a: str, b: str) -> int:
    from rapidfuzz.distance import Levenshtein

    return Levenshtein.distance(a, b)


def _jaccard(a: list, b: list) -> Fraction:
    """The exact Jaccard distance (the thresholds drawn, 0 and 1/2, are exact floats)."""
    sa, sb = set(a), set(b)
    return Fraction(len(sa ^ sb), len(sa | sb))


class MetricSpec(OperatorSpec):
    """similarity_join of two streams of strings (edit distance) or token sets (Jaccard): the
    metric path; event-time windows of 10 s, watermark 5 s; S3J from a fixed sample, or the
    strategy that needs none."""

    name = "similarity_join_metric"
    schema = "id long, name string, toks array<string>, ts string"
    two_sides = True
    WINDOW, LATENESS = 10.0, 5.0
    SAMPLES = {"levenshtein": ["ab", "abc", "", "b\u00e9"], "jaccard": [["a"], ["b", "c"], ["a", "c", "d"]]}

    def case(self) -> st.SearchStrategy[Case]:
        @st.composite
        def generate(draw) -> Case:
            s = _settings(draw, metric=st.sampled_from(["levenshtein", "jaccard"]), algorithm=st.sampled_from(["auto", "s3j"]))
            s["threshold"] = draw(st.sampled_from([0, 1, 2] if s["metric"] == "levenshtein" else [0.0, 0.5]), label="threshold")
            n = draw(st.integers(1, 50), label="rows")
            text = st.text(alphabet="ab\u00e9c", max_size=4)  # empty strings, unicode, repeats
            tokens = st.lists(st.sampled_from(["a", "b", "c", "d", "\u00e9"]), min_size=1, max_size=4)  # repeated tokens
            lines, valid = [], {}
            for i in range(n):
                side = draw(st.integers(0, 1))
                ts = draw(st.integers(0, 400).map(lambda v: v / 10))
                row = {"id": i, "ts": _stamp(ts), "_ts": ts, "side": side}
                column = "name" if s["metric"] == "levenshtein" else "toks"
                row[column] = draw(text if column == "name" else tokens)
                bad = draw(st.sampled_from([None] * 6 + ["id", "null", "missing", "empty", "null token", "ts",
                                                               "unparsable", "garbage"]))
                if bad == "garbage":
                    lines.append(Line(side, None, draw(GARBAGE)))
                    continue
                if bad == "id":
                    row.pop("id")
                elif bad == "null":
                    row[column] = None
                elif bad == "missing":
                    row.pop(column)
                elif bad == "empty" and column == "toks":
                    row[column] = []
                elif bad == "null token" and column == "toks":
                    row[column] = [*row[column], None]
                elif bad in ("empty", "null token"):  # an empty string is a valid string
                    bad = None
                elif bad == "ts":
                    row.pop("ts")
                elif bad == "unparsable":
                    row["ts"] = "yesterday"
                lines.append(Line(side, row.get("id"), dumps({k: v for k, v in row.items() if not k.startswith("_") and k != "side"})))
                if bad is None:
                    valid[len(lines) - 1] = row
            s["valid"] = valid
            return Case(cut(lines, draw, 4), s)

        return generate()

    def _settings(self, case) -> dict[str, Any]:
        s = case.settings
        return {"metric": s["metric"], "value_col": "name" if s["metric"] == "levenshtein" else "toks", "time_col": "ts"}

    def join(self, left, right, case, metrics_dir, streaming):
        s = case.settings
        return similarity_join(left, right, threshold=s["threshold"], algorithm=s["algorithm"], parallelism=2,
                               window="10 seconds", watermark="5 seconds", metrics_dir=metrics_dir,
                               sample=self.SAMPLES[s["metric"]], **self._settings(case))

    def dead_letters(self, left, right, case):
        return invalid_records(left, right, **self._settings(case))

    def observe(self, output, dead, metrics_dir):
        late = Counter(r["id"] for s in read_stats(metrics_dir, "computation") for r in s.get("late_rows", []))
        return Outcome(Counter((r.left_id, r.right_id) for r in output), Counter(r.id for r in dead), late)

    def expect(self, case, streaming):
        s = case.settings
        batches = kept_batches(case, streaming)
        late = _late_rows(batches, lambda r: (math.floor(r["_ts"] / self.WINDOW) + 1) * self.WINDOW, self.LATENESS,
                          lambda r: r["_ts"])
        kept = [r for b in batches for r in b if r["id"] not in late]
        column, dist = ("name", _edits) if s["metric"] == "levenshtein" else ("toks", _jaccard)
        pairs = Counter((a["id"], b["id"]) for a in kept for b in kept
                        if a["side"] == 0 and b["side"] == 1 and math.floor(a["_ts"] / self.WINDOW) == math.floor(b["_ts"] / self.WINDOW)
                        and dist(a[column], b[column]) <= s["threshold"])
        return Outcome(pairs, dead_ids(case), Counter(late))


# --------------------------------------------------------------------------------------------


class TopKSpec(OperatorSpec):
    """topk_set_join of one stream (Jaccard), pairs within 20 s."""

    name = "topk_set_join"
    schema = "id long, tokens array<string>, ts string"
    two_sides = False
    WINDOW = 20.0

    def case(self) -> st.SearchStrategy[Case]:
        @st.composite
        def generate(draw) -> Case:
            s = _settings(draw, k=st.integers(1, 5))
            n = draw(st.integers(1, 50), label="rows")
            lines, valid, stamps = [], {}, {}
            for i in range(n):
                ts = draw(st.integers(0, 600).map(lambda v: v / 10))
                ident = i
                if valid and draw(st.integers(0, 9)) == 0:  # the id of an earlier set
                    ident = draw(st.sampled_from(sorted({r["id"] for r in valid.values()})))
                while ts in stamps.setdefault(ident, set()):  # (time, id) orders the inserts totally
                    ts += 0.05
                row = {"id": ident, "tokens": draw(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=4)),
                       "ts": _stamp(ts), "_ts": ts}
                bad = draw(st.sampled_from([None] * 6 + ["id", "tokens", "empty", "null", "ts", "unparsable", "garbage"]))
                if bad == "garbage":
                    lines.append(Line(0, None, draw(GARBAGE)))
                    continue
                if bad is not None:
                    row["id"] = 10_000 + i  # a malformed row never shares an id
                if bad == "id":
                    row.pop("id")
                elif bad == "tokens":
                    row.pop("tokens")
                elif bad == "empty":
                    row["tokens"] = []
                elif bad == "null":
                    row["tokens"] = [*row["tokens"], None]
                elif bad == "ts":
                    row.pop("ts")
                elif bad == "unparsable":
                    row["ts"] = "soon"
                lines.append(Line(0, row.get("id"), dumps({k: v for k, v in row.items() if not k.startswith("_")})))
                if bad is None:
                    stamps[ident].add(ts)
                    valid[len(lines) - 1] = row
            s["valid"] = valid
            return Case(cut(lines, draw, 4), s)

        return generate()

    def join(self, left, right, case, metrics_dir, streaming):
        return topk_set_join(left, k=case.settings["k"], within="20 seconds")

    def dead_letters(self, left, right, case):
        return invalid_sets(left)

    def observe(self, output, dead, metrics_dir):
        refused = Counter((r.kind, r.left_id) for r in output if r.kind not in ("enter", "leave"))
        last: dict[tuple, str] = {}
        for r in sorted((r for r in output if r.kind in ("enter", "leave")), key=lambda r: r.seq):
            last[(r.left_id, r.right_id)] = r.kind
        return Outcome(Counter(p for p, kind in last.items() if kind == "enter"), Counter(r.id for r in dead), refused)

    def expect(self, case, streaming):
        # within= is inclusive: Base's strict window is half a microsecond longer
        base, refused = BaseTopK(case.settings["k"], "jaccard", self.WINDOW + 0.5e-6), Counter()
        for batch in kept_batches(case, streaming):
            for r in sorted(batch, key=lambda r: (r["_ts"], r["id"])):
                try:
                    base.insert(r["id"], r["tokens"], r["_ts"])
                except LateSetError:
                    refused[("late", r["id"])] += 1
                except DuplicateSetError:
                    refused[("duplicate", r["id"])] += 1
        return Outcome(Counter((p.first, p.second) for p in base.topk()), dead_ids(case), refused)


# --------------------------------------------------------------------------------------------


class EquiSpec(OperatorSpec):
    """equi_join of two streams on a small key, pairs within 5 s, with a drawn lateness."""

    name = "equi_join"
    schema = "id long, k long, t double"
    two_sides = True
    WINDOW = 5.0

    def case(self) -> st.SearchStrategy[Case]:
        @st.composite
        def generate(draw) -> Case:
            s = _settings(draw, algorithm=st.sampled_from(["shc", "phj", "biclique"]), lateness=st.sampled_from([0.0, 2.0]))
            n = draw(st.integers(1, 60), label="rows")
            lines, valid = [], {}
            for i in range(n):
                side = draw(st.integers(0, 1))
                row = {"id": i, "k": draw(st.integers(0, 4)), "t": draw(st.integers(0, 300).map(lambda v: v / 10)),
                       "side": side}
                bad = draw(st.sampled_from([None] * 6 + ["key", "nokey", "t", "nan", "inf", "garbage"]))
                if bad == "garbage":
                    lines.append(Line(side, None, draw(GARBAGE)))
                    continue
                if bad == "key":
                    row["k"] = None
                elif bad == "nokey":
                    row.pop("k")
                elif bad == "t":
                    row["t"] = None
                elif bad in ("nan", "inf"):
                    row["t"] = math.nan if bad == "nan" else math.inf
                lines.append(Line(side, i, dumps({k: v for k, v in row.items() if k != "side"})))
                if bad is None:
                    valid[len(lines) - 1] = row
            s["valid"] = valid
            return Case(cut(lines, draw, 4), s)

        return generate()

    def join(self, left, right, case, metrics_dir, streaming):
        s = case.settings
        return equi_join(left, right, on="k", algorithm=s["algorithm"], parallelism=2, within=self.WINDOW, time_col="t",
                         lateness=s["lateness"], metrics_dir=metrics_dir)

    def dead_letters(self, left, right, case):
        return invalid_equi_records(left, right, on="k", time_col="t")

    def observe(self, output, dead, metrics_dir):
        late = Counter(json.loads(p)["id"] for s in read_stats(metrics_dir, "equi_worker") for p in s.get("late_rows", []))
        return Outcome(Counter((r.left_id, r.right_id) for r in output), Counter(json.loads(r.raw).get("id") for r in dead), late)

    def expect(self, case, streaming):
        s = case.settings
        late, seen, kept = set(), -math.inf, []
        for rows in kept_batches(case, streaming):  # late: below the largest earlier time minus the lateness
            late |= {r["id"] for r in rows if r["t"] < seen - s["lateness"]}
            kept += [r for r in rows if r["id"] not in late]
            seen = max([seen, *(r["t"] for r in rows if r["id"] not in late)])
        pairs = Counter((a["id"], b["id"]) for a in kept for b in kept
                        if a["side"] == 0 and b["side"] == 1 and a["k"] == b["k"] and abs(a["t"] - b["t"]) <= self.WINDOW)
        return Outcome(pairs, dead_ids(case), Counter(late))


# --------------------------------------------------------------------------------------------


class NaturalSpec(OperatorSpec):
    """natural_join of one stream of JSON documents, event-time windows of 10 s, watermark 2 s."""

    name = "natural_join"
    schema = "id long, doc string, t double"
    two_sides = False
    WINDOW, LATENESS = 10.0, 2.0

    def case(self) -> st.SearchStrategy[Case]:
        @st.composite
        def generate(draw) -> Case:
            s = _settings(draw, partitions=st.integers(1, 3), partitioner=st.sampled_from(["ag", "sc", "ds", "value"]))
            n = draw(st.integers(1, 50), label="rows")
            attrs = st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(0, 2), min_size=1, max_size=3)
            lines, valid = [], {}
            for i in range(n):
                row = {"id": i, "doc": json.dumps(draw(attrs)), "t": draw(st.integers(0, 400).map(lambda v: v / 10))}
                bad = draw(st.sampled_from([None] * 6 + ["id", "json", "array", "nodoc", "t", "nan", "garbage"]))
                if bad == "garbage":
                    lines.append(Line(0, None, draw(GARBAGE)))
                    continue
                if bad == "id":
                    row.pop("id")
                elif bad == "json":
                    row["doc"] = "{oops"
                elif bad == "array":
                    row["doc"] = "[1, 2]"
                elif bad == "nodoc":
                    row["doc"] = None
                elif bad == "t":
                    row["t"] = None
                elif bad == "nan":
                    row["t"] = math.nan
                lines.append(Line(0, row.get("id"), dumps(row)))
                if bad is None:
                    valid[len(lines) - 1] = row
            s["valid"] = valid
            return Case(cut(lines, draw, 4), s)

        return generate()

    def join(self, left, right, case, metrics_dir, streaming):
        s = case.settings
        return natural_join(left, window="10 seconds", time_col="t", watermark="2 seconds", partitions=s["partitions"],
                            partitioner=s["partitioner"], metrics_dir=metrics_dir)

    def dead_letters(self, left, right, case):
        return invalid_documents(left, time_col="t", window="10 seconds")

    def observe(self, output, dead, metrics_dir):
        late = Counter(r["id"] for op in ("natural_joiner", "natural_assigner")  # parallel routing: a joiner reports
                       for s in read_stats(metrics_dir, op) for r in s.get("late_rows", []))
        return Outcome(Counter((r.left_id, r.right_id, r.window) for r in output), Counter(r.id for r in dead), late)

    def expect(self, case, streaming):
        batches = kept_batches(case, streaming)
        late = _late_rows(batches, lambda r: (math.floor(r["t"] / self.WINDOW) + 1) * self.WINDOW, self.LATENESS,
                          lambda r: r["t"])
        kept = [r for b in batches for r in b if r["id"] not in late]
        flat = {r["id"]: flatten(json.loads(r["doc"])) for r in kept}
        pairs = Counter()
        for a, b in itertools.combinations(sorted(kept, key=lambda r: r["id"]), 2):
            w = math.floor(a["t"] / self.WINDOW)
            if w != math.floor(b["t"] / self.WINDOW):
                continue
            fa, fb = flat[a["id"]], flat[b["id"]]
            shared = fa.keys() & fb.keys()
            if shared and all(fa[k] == fb[k] for k in shared):
                pairs[(a["id"], b["id"], w)] += 1
        return Outcome(pairs, dead_ids(case), Counter(late))


# --------------------------------------------------------------------------------------------


class EntitiesSpec(OperatorSpec):
    """entities of one stream of links (self or two-sided, with or without ``max_size``), ordered
    by their time; the model is the entity oracle of tests/entities/oracle.py."""

    name = "entities"
    schema = "id long, a long, b long, t double"
    two_sides = False

    def case(self) -> st.SearchStrategy[Case]:
        @st.composite
        def generate(draw) -> Case:
            s = _settings(draw, two_sided=st.booleans(), max_size=st.sampled_from([None, 3]))
            n = draw(st.integers(1, 40), label="rows")
            lines, valid = [], {}
            for i in range(n):
                row = {"id": i, "a": draw(st.integers(0, 9)), "b": draw(st.integers(0, 9)),
                       "t": draw(st.integers(0, 50).map(lambda v: v / 10))}
                bad = draw(st.sampled_from([None] * 6 + ["a", "b", "t", "nan", "garbage"]))
                if bad == "garbage":
                    lines.append(Line(0, None, draw(GARBAGE)))
                    continue
                if bad in ("a", "b", "t"):
                    row[bad] = None
                elif bad == "nan":
                    row["t"] = math.nan
                lines.append(Line(0, i, dumps(row)))
                if bad is None and (s["two_sided"] or row["a"] != row["b"]):  # a self-link of one record is dead
                    valid[len(lines) - 1] = row
            s["valid"] = valid
            return Case(cut(lines, draw, 4), s)

        return generate()

    def join(self, left, right, case, metrics_dir, streaming):
        s = case.settings
        return entities(left, left_col="a", right_col="b", two_sided=s["two_sided"], time_col="t",
                        max_size=s["max_size"], metrics_dir=metrics_dir)

    def dead_letters(self, left, right, case):
        return invalid_entity_links(left, left_col="a", right_col="b", two_sided=case.settings["two_sided"],
                                    time_col="t")

    def observe(self, output, dead, metrics_dir):
        rows = Counter((r.seq, r.side, r.record_id, r.entity_id, r.previous_id, r.kind, r.entity_size)
                       for r in output if r.kind != "refused")
        refused = Counter((r.record_id, r.other_id) for r in output if r.kind == "refused")
        return Outcome(rows, Counter(json.loads(r.raw).get("id") for r in dead), refused)

    def expect(self, case, streaming):
        s = case.settings
        oracle = Oracle(two_sided=s["two_sided"], max_size=s["max_size"])
        rows, refused, seq = Counter(), Counter(), 0
        for batch in kept_batches(case, streaming):
            if not batch:
                continue  # a micro-batch without a valid link does not reach the entity key
            got = oracle.batch(seq, [(r["a"], r["b"], r["t"], None, None) for r in batch])
            for (side, record), (entity, previous, kind, size) in got["rows"].items():
                rows[(seq, side, record, entity, previous, kind, size)] += 1
            for x, y, _ in got["refused"]:
                refused[(x[1], y[1])] += 1
            seq += 1
        return Outcome(rows, dead_ids(case), refused)


SPECS = {spec.name: spec for spec in (SimilaritySpec(), MetricSpec(), TopKSpec(), EquiSpec(), NaturalSpec(),
                                      EntitiesSpec())}
