"""The compiled engine (numba kernels, driftjoin.swoop.fast) against the pure-Python reference:
similarity kernels bit-identical, the lookup order, whole joins on longer streams that exercise
every growth and compaction path, pickling, and the engine choice."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop import Swoop
from driftjoin.swoop import _kernels as K
from driftjoin.swoop.generator import set_stream
from driftjoin.swoop.similarity import JACCARD, SIMILARITIES, Jaccard

sizes = st.integers(1, 60)


@settings(max_examples=200, deadline=None)
@given(sizes, sizes, st.sampled_from(sorted(SIMILARITIES)), st.data())
def test_sim_and_overlap_kernels_match_the_reference(l_r, l_s, name, data):
    fn, code = SIMILARITIES[name], K.SIM_CODES[name]
    for o in range(min(l_r, l_s) + 1):
        assert K.sim(code, l_r, l_s, o) == fn.sim(l_r, l_s, o)  # bit-identical floats
        tau = fn.sim(l_r, l_s, o)
        assert K.overlap(code, l_r, l_s, tau) == fn.overlap(l_r, l_s, tau)
    tau = data.draw(st.floats(-1.0, 70.0, allow_nan=False))
    assert K.overlap(code, l_r, l_s, tau) == fn.overlap(l_r, l_s, tau)


def test_lookup_order_is_shortest_list_first_then_token_order():
    tokens = np.array([0, 4, 2, 3, 1], np.int64)
    itok = np.zeros((2, 5, 4), np.int64)
    live = {0: 1, 1: 3, 2: 1, 3: 2, 4: 0}  # token -> valid list entries
    for t, n in live.items():
        itok[0, t, K.F_TAIL] = n
    lens, order = np.zeros(5, np.int64), np.zeros(5, np.int64)
    K._lookup_order(tokens, itok, 0, lens, order, True)
    # token 4 (no list) first; 2 before 0 (equal lengths: later-numbered first); then 3, 1
    assert tokens[order].tolist() == [4, 2, 0, 3, 1]
    K._lookup_order(tokens, itok, 0, lens, order, False)  # SWOOP-noopt: token order only
    assert tokens[order].tolist() == [4, 3, 2, 1, 0]


@pytest.mark.parametrize("n", [1, 5, 32, 33, 200, 5_000])
def test_lookup_order_of_short_and_long_sets_is_the_stable_sort_by_length_then_descending_token(n):
    """Both sorts (insertion up to 32 tokens, merge sorts beyond) against Python's stable sort,
    with many equal list lengths; tokens in ascending order, the insertion sort's worst case."""
    rng = np.random.default_rng(n)
    tokens = np.sort(rng.choice(4 * n + 10, n, replace=False)).astype(np.int64)
    itok = np.zeros((2, 4 * n + 10, 4), np.int64)
    itok[1, tokens, K.F_TAIL] = rng.integers(0, 4, n)  # the probed side's lists: 0-3 entries
    lens, order = np.zeros(n + 1, np.int64), np.full(n + 1, -1, np.int64)
    for shortest_first in (True, False):
        K._lookup_order(tokens, itok, 1, lens, order, shortest_first)
        length = itok[1, tokens, K.F_TAIL]
        key = (lambda x: (length[x], -tokens[x])) if shortest_first else (lambda x: -tokens[x])
        assert order[:n].tolist() == sorted(range(n), key=key)


def _streams(n, seed, two_stream, **kwargs):
    for set_id, tokens, ts in set_stream(n, seed=seed, **kwargs):
        yield set_id, tokens, ts, (("R", "S")[set_id % 3 == 0] if two_stream else None)


@pytest.mark.parametrize(
    ("k", "similarity", "window", "two_stream", "kwargs"),
    [
        # many distinct tokens: token arrays and index pools grow, lists are repacked
        (10, "jaccard", 2.0, False, dict(vocabulary=20_000, size=(1, 12), s=0.8)),
        # a large k: the stock grows past its initial capacity, long cleanup scans
        (1000, "cosine", 0.3, False, dict(vocabulary=300, size=(2, 8), near_duplicates=0.3)),
        # two streams, expiries at steady state, window compaction (window of ~500 sets)
        (25, "dice", 0.5, True, dict(vocabulary=2_000, size=(3, 10), drift=50.0)),
        # sets larger than the initial window capacity (scratch space grows with |r|)
        (5, "overlap", 0.05, False, dict(vocabulary=5_000, size=(900, 1500), s=0.5)),
        (7, "hamming", 0.3, False, dict(vocabulary=100, size=(1, 6), drift=20.0)),
    ],
)
def test_compiled_engine_equals_python_engine(k, similarity, window, two_stream, kwargs):
    n = 80 if kwargs["size"][0] > 100 else 600 if k >= 1000 else 3_000
    compiled = Swoop(k, similarity, window, two_stream=two_stream, engine="compiled")
    python = Swoop(k, similarity, window, two_stream=two_stream, engine="python")
    for set_id, tokens, ts, side in _streams(n, k, two_stream, rate=1000.0, **kwargs):
        assert compiled.insert(set_id, tokens, ts, side) == python.insert(set_id, tokens, ts, side)
        if set_id % 500 == 0:
            assert list(compiled.stock) == list(python.stock)
    assert list(compiled.stock) == list(python.stock)
    assert compiled.advance(ts + window / 2) == python.advance(ts + window / 2)
    assert compiled.advance(ts + 2 * window) == python.advance(ts + 2 * window)
    assert len(compiled.stock) == 0 and compiled.window_size == 0


def test_growth_paths_are_exercised():
    """The stream of the first case above does reach the index repack and stock growth."""
    calls = {"repack": 0}
    repack = K.index_repack

    def counting(*args):
        calls["repack"] += 1
        return repack(*args)

    swoop = Swoop(300, "jaccard", 2.0, engine="compiled")
    K.index_repack = counting
    try:
        for set_id, tokens, ts, _ in _streams(3000, 1, False, vocabulary=20_000, size=(1, 12)):
            swoop.insert(set_id, tokens, ts)
    finally:
        K.index_repack = repack
    assert calls["repack"] > 0
    assert swoop._core.stock.sf.shape[1] > 64  # the stock grew
    assert swoop._core.ntok > 64 and swoop._core.wcap > 1024


@pytest.mark.parametrize("engine", ["compiled", "python"])
def test_pickled_join_continues_identically(engine):
    stream = list(_streams(1_500, 3, True, vocabulary=500, size=(2, 9), rate=1000.0))
    swoop = Swoop(20, "jaccard", 0.3, two_stream=True, engine=engine)
    for set_id, tokens, ts, side in stream[:900]:
        swoop.insert(set_id, tokens, ts, side)
    copy = pickle.loads(pickle.dumps(swoop))
    for set_id, tokens, ts, side in stream[900:]:
        assert copy.insert(set_id, tokens, ts, side) == swoop.insert(set_id, tokens, ts, side)
    assert copy.topk() == swoop.topk() and list(copy.stock) == list(swoop.stock)


def test_engine_choice():
    assert Swoop(3, "jaccard", 1).engine == "compiled"
    assert Swoop(3, "jaccard", 1, engine="python").engine == "python"

    class Custom(Jaccard):  # a user-defined function runs on the Python engine
        name = "custom"

    assert Swoop(3, Custom(), 1).engine == "python"
    assert Swoop(3, JACCARD, 1).engine == "compiled"
    with pytest.raises(ValueError, match="built-in similarity functions only"):
        Swoop(3, Custom(), 1, engine="compiled")
    with pytest.raises(ValueError, match="engine must be one of"):
        Swoop(3, "jaccard", 1, engine="cuda")


def test_join_pickled_before_the_compiled_engine_still_runs():
    """A Python-engine join pickled by an earlier version (no engine attributes) unpickles."""
    import copy

    stream = list(_streams(400, 4, False, vocabulary=60, size=(2, 6), rate=1000.0))
    swoop = Swoop(5, "jaccard", 0.1, engine="python")
    for set_id, tokens, ts, _ in stream[:200]:
        swoop.insert(set_id, tokens, ts)
    state = copy.deepcopy(swoop.__dict__)
    del state["engine"], state["_core"]
    del state["_W"]._with_columns  # older windows always had the columns
    old = Swoop.__new__(Swoop)
    old.__setstate__(state)
    assert old.engine == "python" and old._W._with_columns
    for set_id, tokens, ts, _ in stream[200:]:
        assert old.insert(set_id, tokens, ts) == swoop.insert(set_id, tokens, ts)
