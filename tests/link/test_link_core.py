"""The link core against the brute-force oracle: rules, nulls, thresholds at a distance, batches,
windows, workers, self and two-sided, hot-key splits under changing decisions."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.linkage.choose import build_core
from driftjoin.linkage.drivers import driver_kinds
from driftjoin.linkage.engine import LinkEngine
from driftjoin.linkage.records import Fields, LinkPairs, link_records
from driftjoin.linkage.rules import RuleError, check_rules
from driftjoin.linkage.split import SplitTable
from driftjoin.windows import Windowing

from .oracle import distance, oracle_link

KINDS = {"name": "string", "zip": "string", "age": "number", "dob": "date", "addr": "string", "tags": "set",
         "vec": "vector", "ts": "timestamp"}
NAMES = ["anna", "ann", "anne", "bob", "bobby", "annab", "", "ab", "ba", "nna", "anna b"]
ADDRS = ["1 high st", "1 high street", "2 high st", "1 low st", "high st 1", "", "3 mill rd", "mill rd"]
AGES = [0.1, 0.2, 0.3, 0.7, 1.0, 3.3, 1e16, -0.0, 0.0, math.nan, math.inf]
VECS = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 2.0], [3.0, 0.0], [0.5, 0.5]]
#: timestamps in microseconds
TSS = [0, 1_000_000, 1_500_000, 3_000_000, 3_000_001, 86_400 * 10**6]


def length_gap(a: str, b: str) -> float:
    """A user metric (a pseudometric: it satisfies the triangle inequality S3J needs)."""
    return float(abs(len(a) - len(b)))


def _maybe(values):
    """A value, null about one time in eight."""
    return st.sampled_from([None, *values] if len(values) >= 7 else [None, *values * (7 // len(values) + 1)])


def _record(draw, i, side):
    return {
        "id": i, "side": side,
        "name": draw(_maybe(NAMES)),
        "zip": draw(_maybe(["a", "b"])),
        "age": draw(_maybe(AGES)),
        "dob": draw(_maybe(list(range(4)))),
        "addr": draw(_maybe(ADDRS)),
        "tags": draw(st.one_of(st.none(), st.lists(st.sampled_from("xyz"), max_size=3), st.lists(st.sampled_from("xy"), min_size=1, max_size=2))),
        "vec": draw(_maybe(VECS)),
        "ts": draw(_maybe(TSS)),
    }


CONDITIONS = [
    ("zip", "equal"), ("name", "equal"), ("dob", "equal"), ("age", "equal"),
    ("name", "levenshtein"), ("addr", "jaccard_words"), ("addr", "jaccard_q2"), ("tags", "jaccard"),
    ("age", "within"), ("dob", "within"), ("ts", "within"), ("vec", "euclidean"), ("name", "user"),
]


def _written(col, metric, t):
    """``(metric, threshold)`` as a rule writes it (timestamps: seconds; the oracle holds microseconds)."""
    if metric == "user":
        return length_gap, t
    if col == "ts":
        return "within", t / 1e6
    return metric.split("_")[0], t


def _threshold(draw, col, metric, records):
    """A threshold, often exactly a distance between two of the records."""
    base = length_gap if metric == "user" else metric.split("_")[0]
    cond = (col, KINDS[col], base, None, {"jaccard_words": "words", "jaccard_q2": "qgrams:2"}.get(metric))
    ds = [d for a in records for b in records if (d := distance(cond, a, b)) is not None]
    if metric in ("euclidean", "user"):
        return draw(st.sampled_from([float(d) for d in ds if d > 0][:6] + [0.5, 1.0, 2.0]))
    if col == "ts":
        return draw(st.sampled_from([int(d) for d in ds][:6] + [0, 500_000, 1_500_000]))
    if metric == "levenshtein":
        return draw(st.sampled_from([0, 1, 2, *[int(d) for d in ds][:5]]))
    if metric.startswith("jaccard"):
        opts = [float(d) for d in ds if d < 1][:6] + [0.0, 0.25, 0.5, 0.75]
        return draw(st.sampled_from(opts))
    if col == "dob":
        return draw(st.sampled_from([0, 1, 1.5, 2]))
    opts = [float(d) for d in ds if d < 1e300][:6] + [0.0, 0.1, 0.2, 3.2]
    return draw(st.sampled_from(opts))


@st.composite
def scenarios(draw):
    self_join = draw(st.booleans())
    n = draw(st.integers(2, 18))
    records = [_record(draw, i, 0 if self_join else draw(st.integers(0, 1))) for i in range(n)]
    for col, value in (("vec", VECS[0]), ("name", "anna")):  # S3J draws its centroids from usable values
        if all(r[col] is None for r in records):
            records[0][col] = value
    times = [draw(st.integers(0, 40)) for _ in range(n)]
    for r, t in zip(records, times):
        r["t"] = t
    rules = []
    spec = []
    for _ in range(draw(st.integers(1, 3))):
        picked = draw(st.lists(st.sampled_from(CONDITIONS), min_size=1, max_size=3, unique_by=lambda c: c[0]))
        rule, conds = {}, []
        for col, metric in picked:
            if metric == "equal":
                rule[col] = "equal"
                conds.append((col, KINDS[col], "equal", None, None))
                continue
            t = _threshold(draw, col, metric, records)
            tokens = {"jaccard_words": "words", "jaccard_q2": "qgrams:2"}.get(metric)
            base = length_gap if metric == "user" else metric.split("_")[0]
            written = _written(col, metric, t)
            rule[col] = written if tokens is None else (*written, tokens)
            conds.append((col, KINDS[col], base, t, tokens))
        rules.append(rule)
        spec.append(conds)
    window = draw(st.sampled_from([("unbounded",), ("tumbling", 10), ("sliding", 10, 5), ("interval", 7), ("interval", 0)]))
    cuts = sorted(draw(st.lists(st.integers(1, n - 1), max_size=3, unique=True)))
    workers = draw(st.integers(1, 4))
    split = draw(st.sampled_from([None, "all", "odd-windows"]))
    grid = draw(st.integers(2, 3))
    return self_join, records, rules, spec, window, cuts, workers, split, grid


def _windowing(window):
    kind = window[0]
    if kind == "unbounded":
        return Windowing.unbounded()
    if kind == "tumbling":
        return Windowing.tumbling(window[1])
    if kind == "sliding":
        return Windowing.sliding(window[1], window[2])
    return Windowing.interval(window[1])


def _fields(rs, records):
    raw = {c: [r[c] if c != "tags" or r[c] is None else list(r[c]) for r in records] for c in rs.columns}
    return Fields.build(rs, raw)


def run_core(rs, records, *, self_join, windows, cuts, workers, split=None, grid=2, drive=None, sample=True):
    """The engine's pairs over the micro-batches ``cuts`` (records in time order within each)."""
    fields = _fields(rs, records)
    core, _ = build_core(rs, n_workers=workers, self_join=self_join, windows=windows,
                         sample=fields if sample else None, drive=drive, min_heavy=1)
    version_of = None
    if split is not None:
        # every group of every rule heavy in version 1 (cells of side `grid`), version 0 none
        batch = link_records(np.array([r["id"] for r in records]), fields, side=[r["side"] for r in records])
        heavy = {}
        for r in range(len(rs.rules)):
            e, _ = core.entries(batch, r)
            heavy[r] = {int(g): grid for g in np.unique(e.pre).tolist()}
        core.tables[0] = SplitTable()
        core.tables[1] = SplitTable(1, heavy)
        version_of = (lambda w: np.ones(len(w), np.int64)) if split == "all" else (lambda w: np.asarray(w) % 2)
    engine = LinkEngine(core, lateness=10**9, version_of=version_of)
    order = sorted(range(len(records)), key=lambda i: records[i]["t"])
    bounds = [0, *cuts, len(records)]
    out = []
    for lo, hi in zip(bounds, bounds[1:]):
        idx = np.array(order[lo:hi], np.int64)
        if not len(idx):
            continue
        b = link_records(np.array([records[i]["id"] for i in idx]), fields.take(idx),
                         [records[i]["t"] for i in idx], [records[i]["side"] for i in idx])
        out.append(engine.process(b))
    assert not engine.late
    return LinkPairs.concat(out, len(rs.measures))


def check_against_oracle(rs, spec, records, pairs: LinkPairs, *, self_join, window):
    expected = oracle_link(records, spec, self_join=self_join, window=window)
    interval = window[0] == "interval"
    got = {}
    for k in range(len(pairs)):
        key = (int(pairs.left_id[k]), int(pairs.right_id[k]), None if interval else int(pairs.window[k]))
        assert key not in got, f"pair {key} emitted twice"
        got[key] = k
    assert set(got) == set(expected), (sorted(set(expected) - set(got)), sorted(set(got) - set(expected)))
    lists = pairs.rule_lists()
    for key, k in got.items():
        first, sat, dist = expected[key]
        assert int(pairs.rule[k]) == first and lists[k] == sat, key
        for j, m in enumerate(rs.measures):
            want = dist[(m.column, length_gap if m.metric == "callable" else m.metric, m.tokens)]
            d = pairs.distances[k, j]
            if want is None:
                assert math.isnan(d), (key, m.field, d)
            else:
                unit = Fraction(1, 10**6) if (m.kind, m.metric) == ("timestamp", "within") else Fraction(1)  # seconds
                assert d == float(want * unit), (key, m.field, d, want)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(scenarios(), st.booleans())
def test_core_equals_oracle(case, sampled):
    """With a sample (drivers chosen by counted work) and without one (a stream's default:
    conditions inside blocks, token orders by hash), where every rule can run without one."""
    self_join, records, rules, spec, window, cuts, workers, split, grid = case
    rs = check_rules(rules, {c: KINDS[c] for r in rules for c in r})
    needs_sample = any(not r.equal and all(driver_kinds(c) == "s3j" for c in r.fuzzy) for r in rs.rules)
    pairs = run_core(rs, records, self_join=self_join, windows=_windowing(window), cuts=cuts, workers=workers,
                     split=split, grid=grid, sample=sampled or needs_sample)
    check_against_oracle(rs, spec, records, pairs, self_join=self_join, window=window)


@pytest.mark.parametrize("drive", ["block", "name"])
def test_forced_drivers_agree(drive):
    rng = np.random.default_rng(3)
    records = [{"id": i, "side": 0, "t": 0, "zip": str(rng.integers(3)), "name": "".join(rng.choice(list("ab"), 4)),
                "age": None, "dob": None, "addr": None, "tags": None} for i in range(60)]
    rules = [{"zip": "equal", "name": ("levenshtein", 1)}]
    rs = check_rules(rules, {"zip": "string", "name": "string"})
    pairs = run_core(rs, records, self_join=True, windows=Windowing.unbounded(), cuts=[20, 40], workers=3, drive=[drive])
    spec = [[("zip", "string", "equal", None, None), ("name", "string", "levenshtein", 1, None)]]
    check_against_oracle(rs, spec, records, pairs, self_join=True, window=("unbounded",))


def test_without_a_sample_a_rule_is_driven_by_a_condition_inside_its_block():
    rules = [{"zip": "equal", "name": ("levenshtein", 1)}, {"zip": "equal", "addr": ("jaccard", 0.5, "words")},
             {"zip": "equal"}]
    rs = check_rules(rules, {"zip": "string", "name": "string", "addr": "string"})
    core, _ = build_core(rs, n_workers=2, self_join=True, windows=Windowing.unbounded())
    assert [d.name for d in core.drivers] == ["passjoin", "prefix", "block"]
    forced, _ = build_core(rs, n_workers=2, self_join=True, windows=Windowing.unbounded(), drive=["block", None, None])
    assert [d.name for d in forced.drivers] == ["block", "prefix", "block"]


def test_bad_rules_say_what_to_write():
    cols = {"dob": "date", "name": "string", "tags": "set", "age": "number"}
    cases = [
        ([{}], "rules\\[0\\] has no condition"),
        ([{"nme": ("levenshtein", 1)}], "names no column of the input; columns are age, dob, name, tags"),
        ([{"dob": ("levenshtein", 1)}], "compares dates with levenshtein"),
        ([{"name": ("levenshtein", 1.5)}], "whole number"),
        ([{"name": ("jaccard", 0.3)}], "write \\('jaccard', t, 'words'\\)"),
        ([{"name": ("jaccard", 1.2, "words")}], "in \\[0, 1\\)"),
        ([{"tags": "equal"}], "not compared for equality"),
        ([{"age": ("within", "2 days")}], "on a number column the threshold is a finite number"),
        ([{"dob": ("within", "soon")}], "write a duration"),
        ([{"name": ("cosmic", 1)}], "unknown metric"),
        ([{"name": ("levenstein", 1)}], r"unknown metric 'levenstein' \(did you mean 'levenshtein'\?\); .*jaccard"),
        ([{"name": ("jaccard", 0.5, "letters")}], "tokens='letters'"),
        ("name", "non-empty list"),
    ]
    for rules, message in cases:
        with pytest.raises(RuleError, match=message):
            check_rules(rules, cols)


def test_within_on_dates_and_timestamps_takes_durations():
    rs = check_rules([{"dob": ("within", "2 days")}, {"ts": ("within", "90 minutes")}, {"dob": ("within", 3)}],
                     {"dob": "date", "ts": "timestamp"})
    assert [c.threshold for r in rs.rules for c in r.conditions] == [2.0, 90 * 60 * 10**6, 3.0]
    assert [m.field for m in rs.measures] == ["dob", "ts"]


@pytest.mark.parametrize("threshold, linked", [(0.3, True), (Fraction(3, 10), True), (0.29, False), (0.1, False)])
def test_jaccard_thresholds_are_the_numbers_written(threshold, linked):
    """A pair at Jaccard distance exactly 3/10 links under 0.3 (which stands for 3/10, as in
    similarity_join), whichever driver finds it, and not under 0.29."""
    tokens = list("abcdefghij")
    records = [{"id": 1, "side": 0, "t": 0, "tags": tokens[:7], "zip": "a"},
               {"id": 2, "side": 0, "t": 0, "tags": tokens, "zip": "a"}]
    for rules, drive in (([{"tags": ("jaccard", threshold)}], None), ([{"zip": "equal", "tags": ("jaccard", threshold)}],
                                                                       ["block"])):
        rs = check_rules(rules, {"tags": "set", "zip": "string"})
        pairs = run_core(rs, records, self_join=True, windows=Windowing.unbounded(), cuts=[1], workers=2, drive=drive)
        assert pairs.tuples() == ([(1, 2, 0, 0)] if linked else [])
        if linked:
            assert pairs.distances[0, rs.measures.index(next(m for m in rs.measures if m.column == "tags"))] == 0.3


def test_a_second_decision_before_any_record_reaches_the_bound_window_replaces_its_version():
    from driftjoin.linkage.split import Binding

    b = Binding().extend(5, 1)
    assert b.extend(5, 2).as_dict() == {"starts": [5], "versions": [2]}  # nothing reached window 5 yet
    assert b.extend(7, 2).version_of(np.array([4, 5, 6, 7])).tolist() == [0, 1, 1, 2]
    with pytest.raises(ValueError, match="at or after 5"):
        b.extend(4, 2)
