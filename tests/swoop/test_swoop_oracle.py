"""SWOOP against Base (the oracle): after every insert and every advance of the index time the
change events and the top-k are identical, and SWOOP's stock is exactly the minimal stock
(the relevant pairs among Base's all-pairs stock). All similarity functions, self-joins and
two-stream joins, k from 1 to 1000, ties in timestamps and similarities, expiries; the compiled
engine with both scans of the inverted lists (``scan="filtered"``, the default, and ``"paper"``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop import BaseTopK, Swoop
from driftjoin.swoop.generator import set_stream
from driftjoin.swoop.similarity import SIMILARITIES

from .helpers import dominators, skyband

SMALL_K = [1, 2, 3, 5, 8]
LARGE_K = [50, 200, 1000]
ENGINES = ["compiled", "compiled/paper", "python"]  # engine, or engine/scan


def assert_same_state(swoop: Swoop, base: BaseTopK, k: int) -> None:
    assert swoop.topk() == base.topk()
    all_pairs = list(base.stock)
    assert list(swoop.stock) == skyband(all_pairs, k)
    # no pair of SWOOP's stock is irrelevant (the paper's definition, checked directly)
    doms = dominators(all_pairs)
    assert all(doms[key] < k for key in swoop.stock)
    # the skyband by the k latest ends equals the skyband by counting every pair's dominators
    assert skyband(all_pairs, k) == sorted(key for key, d in doms.items() if d < k)


@st.composite
def scenarios(draw, ks=SMALL_K):
    k = draw(st.sampled_from(ks))
    similarity = draw(st.sampled_from(sorted(SIMILARITIES)))
    window = draw(st.sampled_from([1, 2, 3, 5, 8]))
    two_stream = draw(st.booleans())
    shortest_list_first = draw(st.booleans())
    bulk_min = draw(st.sampled_from([0, 4, 10**9]))  # vectorised / mixed / scalar verification
    string_tokens = draw(st.booleans())
    vocab = draw(st.integers(3, 12))
    ops = []
    for n in range(draw(st.integers(1, 45))):
        dt = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 4]))
        if draw(st.integers(0, 9)) == 0:
            ops.append(("advance", dt, None, None))
            continue
        tokens = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=7))
        if string_tokens:
            tokens = [f"w{tok}" for tok in tokens]
        side = draw(st.sampled_from(["R", "S"])) if two_stream else None
        ops.append(("insert", dt, tokens, side))
    return k, similarity, window, two_stream, shortest_list_first, bulk_min, ops


def make(k, similarity, window, engine, **options) -> Swoop:
    """A join of ``engine`` (``"compiled/paper"``: the compiled engine with the paper's scan)."""
    engine, _, scan = engine.partition("/")
    return Swoop(k, similarity, window, engine=engine, **({"scan": scan} if scan else {}), **options)


def run(scenario, engine):
    k, similarity, window, two_stream, shortest_list_first, bulk_min, ops = scenario
    swoop = make(k, similarity, window, engine, two_stream=two_stream, shortest_list_first=shortest_list_first)
    engine = engine.partition("/")[0]
    assert swoop.engine == engine
    swoop.generator.bulk_min = bulk_min
    base = BaseTopK(k, similarity, window, two_stream=two_stream)
    t = 0
    for n, (op, dt, tokens, side) in enumerate(ops):
        t += dt
        if op == "advance":
            assert swoop.advance(t) == base.advance(t)
        else:
            assert swoop.insert(n, tokens, t, side) == base.insert(n, tokens, t, side)
        assert swoop.index_time == base.index_time == t
        assert swoop.window_size == base.window_size
        assert_same_state(swoop, base, k)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=120, deadline=None)
@given(scenario=scenarios())
def test_swoop_equals_base_small_k(engine, scenario):
    run(scenario, engine)


@pytest.mark.parametrize("engine", ENGINES)
@settings(max_examples=40, deadline=None)
@given(scenario=scenarios(ks=LARGE_K))
def test_swoop_equals_base_large_k(engine, scenario):
    run(scenario, engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("similarity", sorted(SIMILARITIES))
@pytest.mark.parametrize(
    ("k", "two_stream", "bulk_min"),
    [(1, False, 10**9), (10, False, 0), (10, True, 20), (1000, False, 20)],
)
def test_swoop_equals_base_on_generated_streams(similarity, k, two_stream, bulk_min, engine):
    """Longer Zipf streams with drift: expiries at steady state, skewed lists."""
    swoop = make(k, similarity, 0.05, engine, two_stream=two_stream)
    swoop.generator.bulk_min = bulk_min
    base = BaseTopK(k, similarity, 0.05, two_stream=two_stream)
    stream = set_stream(300, vocabulary=60, s=1.1, size=(1, 8), rate=1000.0, drift=200.0, seed=k)
    for set_id, tokens, ts in stream:
        side = ("R", "S")[set_id % 2] if two_stream else None
        assert swoop.insert(set_id, tokens, ts, side) == base.insert(set_id, tokens, ts, side)
        if set_id % 25 == 0:
            assert_same_state(swoop, base, k)
    assert swoop.advance(ts + 0.03) == base.advance(ts + 0.03)
    assert_same_state(swoop, base, k)
    assert swoop.advance(ts + 1.0) == base.advance(ts + 1.0)
    assert swoop.topk() == [] and len(swoop.stock) == 0


def test_change_stream_replays_to_topk():
    """Applying the events in order to a set reproduces topk() after every operation."""
    swoop = Swoop(4, "jaccard", 0.02)
    current: set = set()
    for set_id, tokens, ts in set_stream(400, vocabulary=40, size=(2, 6), seed=7):
        for event in swoop.insert(set_id, tokens, ts):
            if event.kind == "enter":
                assert event.pair not in current
                current.add(event.pair)
            else:
                current.remove(event.pair)
            assert event.time <= ts
        # set ids equal arrival numbers here, so they complete the tie-break
        assert sorted(current, key=lambda p: (-p.sim, -p.end, p.first, p.second)) == swoop.topk()
        assert len(current) <= 4


def test_self_join_pair_orientation_and_times():
    """(later set, earlier set); a pair leaves when the earlier set leaves the window."""
    swoop = Swoop(2, "jaccard", 10)
    assert swoop.insert("a", ["x", "y"], 0) == []
    (event,) = swoop.insert("b", ["x", "y", "z"], 3)
    assert event.kind == "enter" and event.time == 3
    assert event.pair == (2 / 3, "b", "a", 10)
    # (c, a) = 1 enters; (c, b) ties (b, a) at 2/3 but stays valid longer and pushes it out
    changes = swoop.insert("c", ["x", "y"], 4)
    assert [(e.kind, e.pair.first, e.pair.second) for e in changes] == [
        ("leave", "b", "a"),
        ("enter", "c", "a"),
        ("enter", "c", "b"),
    ]
    assert [(p.first, p.second) for p in swoop.topk()] == [("c", "a"), ("c", "b")]
    assert len(swoop.stock) == 2  # (b, a) is dominated by both: irrelevant, dropped
    # "a" expires at t = 10 with its pair; (b, a) does not come back
    assert swoop.advance(12) == [(10, "leave", (1.0, "c", "a", 10))]
    assert swoop.advance(13) == [(13, "leave", (2 / 3, "c", "b", 13))]
    assert swoop.topk() == [] and swoop.window_size == 1


def test_two_stream_joins_only_across_sides():
    swoop = Swoop(5, "overlap", 100, two_stream=True)
    swoop.insert(1, ["a", "b"], 0, side="R")
    assert swoop.insert(2, ["a", "b"], 1, side="R") == []  # same side: never a pair
    changes = swoop.insert(1, ["a"], 2, side="S")  # ids are per side: S 1 is not R 1
    assert [e.pair for e in changes] == [(1.0, 2, 1, 101), (1.0, 1, 1, 100)]
    # reported as (R set, S set) even though the S set is the earlier one
    (event,) = swoop.insert(3, ["a", "b", "c"], 3, side="R")
    assert event.pair == (1.0, 3, 1, 102)
    assert [p.first for p in swoop.topk()] == [3, 2, 1]
    assert swoop.insert(4, ["c"], 4, side="S") == [(4, "enter", (1.0, 3, 4, 103))]


def test_tie_break_similarity_then_later_end_then_ids():
    swoop = Swoop(10, "jaccard", 100)
    swoop.insert("a", ["x"], 0)
    swoop.insert("b", ["x"], 1)  # (b, a) sim 1, end 100
    swoop.insert("c", ["x"], 2)  # (c, a) sim 1, end 100; (c, b) sim 1, end 101
    swoop.insert("d", ["x", "y"], 2)  # sim 1/2 with a, b, c
    top = [(p.first, p.second) for p in swoop.topk()]
    assert top == [("c", "b"), ("b", "a"), ("c", "a"), ("d", "c"), ("d", "b"), ("d", "a")]


def test_determinism():
    def events(seed):
        swoop = Swoop(5, "cosine", 0.03)
        out = []
        for set_id, tokens, ts in set_stream(300, seed=seed, string_tokens=True, size=(2, 6)):
            out += swoop.insert(set_id, set(tokens), ts)
        return out

    assert events(3) == events(3)


@pytest.mark.parametrize("engine", ENGINES)
def test_long_stream_compacts_window_and_lists(engine):
    """Over 2048 expired sets: window, token buffer and inverted lists are compacted."""
    swoop, base = make(3, "dice", 0.02, engine), BaseTopK(3, "dice", 0.02)
    engine = engine.partition("/")[0]
    swoop.generator.bulk_min = 8
    for set_id, tokens, ts in set_stream(3000, vocabulary=30, size=(1, 6), seed=9):
        assert swoop.insert(set_id, tokens, ts) == base.insert(set_id, tokens, ts)
        if set_id % 250 == 0:
            assert_same_state(swoop, base, 3)
    assert swoop._W._base > 0  # the window was compacted at least once
    if engine == "compiled":
        from driftjoin.swoop import _kernels

        assert swoop._core.meta[_kernels.M_BASE] > 0  # and the compiled window's columns
    assert_same_state(swoop, base, 3)


def test_lookup_order_is_shortest_list_first_then_token_order():
    """The Python engine's lookup order (the compiled one: test_swoop_kernels.py)."""
    swoop = Swoop(2, "jaccard", 100, engine="python")
    swoop.insert(0, ["a", "c"], 0)  # numbers a0 c1
    swoop.insert(1, ["e", "b"], 1)  # numbers b2 e3: e appears late but becomes frequent
    swoop.insert(2, ["e"], 2)
    swoop.insert(3, ["e", "c"], 3)
    index = swoop._indexes[None]
    record = swoop._records[0]

    def probe(tokens):
        numbers = swoop.tokens.number(tokens)
        return type(record)(99, "x", None, 4, 104, numbers, len(numbers))

    lengths = lambda order: [0 if p is None else len(p) for p in order]  # noqa: E731
    # shortest list first; equal lengths (a, b: 1 set each) and the new token z (no list,
    # number 4) in token order, later-numbered first
    assert lengths(swoop.generator.lookup_order(probe(["a", "b", "c", "e", "z"]).tokens, index)) == [
        0, 1, 1, 2, 3
    ]
    order = swoop.generator.lookup_order(probe(["a", "b", "e"]).tokens, index)
    assert order[0] is index.get(2) and order[1] is index.get(0)  # b (2) before a (0)
    swoop.generator.shortest_list_first = False  # SWOOP-noopt: token order only
    assert lengths(swoop.generator.lookup_order(probe(["a", "e"]).tokens, index)) == [3, 1]
