"""The compiled engine's two scans of the inverted lists (``Swoop(scan=...)``,
``_kernels.get_candidates``): the filtered scan's overlap bound against brute force, and whole
joins with the filtered scan against the paper's scan and against Base (the oracle), over
random streams with large sets (ranks by sorting, crowded signature buckets), sets too large
for the packed entry, self-joins and two-stream joins; a join saved before list entries
carried their sets' data continues identically."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop import BaseTopK, Swoop
from driftjoin.swoop import _kernels as K
from driftjoin.swoop.generator import set_stream
from driftjoin.swoop.similarity import SIMILARITIES

from .helpers import skyband


@st.composite
def first_meetings(draw):
    """A new set ``r``, its lookup order, a position ``rho`` and a set ``s`` that contains the
    token looked up there and none looked up before (``s`` is first met in that list)."""
    tokens = draw(st.lists(st.integers(0, 200), min_size=1, max_size=45, unique=True))
    order = draw(st.permutations(tokens))
    rho = draw(st.integers(0, len(order) - 1))
    v = order[rho]
    later = order[rho + 1 :]
    shared = draw(st.lists(st.sampled_from(later), unique=True)) if later else []
    others = draw(st.lists(st.integers(201, 400), max_size=30, unique=True))
    return order, rho, [v, *shared, *others]


def signature_masks(available: list[int]) -> tuple[int, int, int, int]:
    """The masks of buckets holding at least 1..4 of ``available`` (``-1``: a bucket holds more)."""
    counts = [0] * K.SIG_BITS
    for u in available:
        counts[u % K.SIG_BITS] += 1
    if max(counts) > K.SIG_KMAX:
        return -1, 0, 0, 0
    return tuple(sum(1 << x for x, c in enumerate(counts) if c >= level) for level in (1, 2, 3, 4))


@settings(max_examples=400, deadline=None)
@given(first_meetings())
def test_new_overlap_bound_is_an_upper_bound_of_the_overlap(case):
    order, rho, s = case
    v = order[rho]
    available = order[rho + 1 :]  # r's tokens a set first met in the list of v may share
    a = sum(u > v for u in available)
    b = len(available) - a
    pi = sum(u > v for u in s)
    sig = 0
    for u in s:
        sig |= 1 << (u % K.SIG_BITS)
    info = K._info(len(s), pi, sig)
    overlap = len(set(order) & set(s))
    for masks in (signature_masks(available), (-1, 0, 0, 0)):
        bound = K.new_overlap_bound(info, a, b, *masks)
        assert overlap <= bound <= min(len(order) - rho, len(s))  # never looser than the paper's


def run_three(k, similarity, window, two_stream, stream, drain=True):
    """The filtered scan, the paper's and Base side by side: the same changes after every
    insert, the same stock (the minimal one), the same candidates and scanned entries; with
    ``drain``, the same changes when every set expires."""
    filtered = Swoop(k, similarity, window, two_stream=two_stream, engine="compiled")
    paper = Swoop(k, similarity, window, two_stream=two_stream, engine="compiled", scan="paper")
    base = BaseTopK(k, similarity, window, two_stream=two_stream)
    for n, (set_id, tokens, ts, side) in enumerate(stream):
        out = filtered.insert(set_id, tokens, ts, side)
        assert out == paper.insert(set_id, tokens, ts, side) == base.insert(set_id, tokens, ts, side)
        if n % 7 == 0:
            assert list(filtered.stock) == list(paper.stock) == skyband(list(base.stock), k)
    f, p = filtered.generator, paper.generator
    assert (f.candidates, f.scanned) == (p.candidates, p.scanned)  # the stop = the crop
    assert f.pre_candidates <= p.pre_candidates
    if drain:
        end = stream[-1][2] + window
        assert filtered.advance(end) == paper.advance(end) == base.advance(end)
    return filtered, paper


@st.composite
def streams(draw):
    k = draw(st.sampled_from([1, 2, 3, 5, 10]))
    similarity = draw(st.sampled_from(sorted(SIMILARITIES)))
    window = draw(st.sampled_from([2, 4, 8, 16]))
    two_stream = draw(st.booleans())
    vocab = draw(st.sampled_from([6, 20, 80]))
    large = draw(st.booleans())  # sets of up to 45 tokens: ranks by sorting, crowded buckets
    stream, ts = [], 0
    for n in range(draw(st.integers(1, 70))):
        ts += draw(st.sampled_from([0, 0, 1, 1, 2]))
        size = draw(st.integers(1, 45 if large else 8))
        tokens = draw(st.lists(st.integers(0, max(vocab, size) - 1), min_size=1, max_size=size))
        side = draw(st.sampled_from(["R", "S"])) if two_stream else None
        stream.append((n, tokens, ts, side))
    return k, similarity, window, two_stream, stream


@settings(max_examples=60, deadline=None)
@given(streams())
def test_filtered_scan_equals_paper_scan_and_base(case):
    run_three(*case)


@pytest.mark.parametrize("similarity", ["jaccard", "cosine"])
def test_filtered_scan_on_long_zipf_streams(similarity):
    """Steady-state windows with long lists, near-duplicates and a high skyband bound: the
    filtered scan reads far fewer window rows, and finds the same pairs."""
    stream = [(i, t, ts, None) for i, t, ts in set_stream(
        700, vocabulary=300, size=(3, 12), rate=1000.0, near_duplicates=0.2, seed=5)]
    filtered, paper = run_three(5, similarity, 0.4, False, stream)
    assert filtered.generator.pre_candidates < paper.generator.pre_candidates / 3


def test_sets_too_large_for_a_packed_entry():
    """Sets of 65,535 tokens or more are not filtered from their entries (their rows are read)."""
    big = list(range(70_000))
    stream = [
        (0, big, 0, None), (1, big[:-1] + [80_000], 1, None), (2, [1, 2, 3], 1, None),
        (3, big[5:], 2, None), (4, [1, 2, 3, 4], 2, None),
    ]
    filtered, _ = run_three(2, "jaccard", 10, False, stream, drain=False)
    assert filtered.topk()[0].sim == 69_999 / 70_001


def test_join_saved_before_entries_carried_their_sets_continues_identically():
    """A compiled join pickled when a list entry was its window number only (a 1-d pool) gets
    its entries' end times, sizes, ranks and signatures on loading, and runs on as the original."""
    stream = [(i, t, ts, ("R", "S")[i % 3 == 0]) for i, t, ts in set_stream(
        1_500, vocabulary=400, size=(2, 40), rate=1000.0, seed=2)]
    swoop = Swoop(10, "jaccard", 0.3, two_stream=True, engine="compiled")
    for set_id, tokens, ts, side in stream[:900]:
        swoop.insert(set_id, tokens, ts, side)
    core = swoop._core
    state = pickle.loads(pickle.dumps(swoop)).__dict__
    old = state["_core"]
    old.pools = [pool[K.P_SEQ].copy() for pool in core.pools]  # the earlier layout
    old.scratch = np.zeros((6, old.wcap), np.int64)
    loaded = pickle.loads(pickle.dumps(old))
    for side in (0, 1):
        for t in range(core.itok.shape[1]):
            head, tail = core.itok[side, t, K.F_HEAD], core.itok[side, t, K.F_TAIL]
            assert (loaded.pools[side][:, head:tail] == core.pools[side][:, head:tail]).all()
    copy = Swoop.__new__(Swoop)
    copy.__setstate__({**state, "_core": loaded, "stock": loaded.stock, "generator": loaded.generator})
    for set_id, tokens, ts, side in stream[900:]:
        assert copy.insert(set_id, tokens, ts, side) == swoop.insert(set_id, tokens, ts, side)
    assert list(copy.stock) == list(swoop.stock)


def test_scan_choice():
    assert Swoop(3, "jaccard", 1)._core.meta[K.M_PAPER] == 0
    assert Swoop(3, "jaccard", 1, scan="paper")._core.meta[K.M_PAPER] == 1
    with pytest.raises(ValueError, match="scan must be one of"):
        Swoop(3, "jaccard", 1, scan="fast")
