"""Batch inserts (``Swoop.insert_many``, ``RoutedWorker.insert_routed_many``): the tokens of a
batch are validated and numbered at once, and every set gives the same changes or the same
refusal as one ``insert`` per set, leaving the same join (token numbers, window, lists, stock,
counters); over random data with repeated, new, int and str tokens, bad token containers and
tokens, empty sets, late and duplicate sets, advances between batches, self-joins and
two-stream joins, single joins and workers of both routed designs, both engines."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop import InvalidSetError, Swoop
from driftjoin.swoop.partitioned import WORKERS, owner_of
from driftjoin.swoop.records import TokenOrder

from .test_swoop_delta import logical_state

GOOD = st.one_of(st.integers(0, 9).map(lambda t: f"w{t}"), st.integers(0, 4))
TOKENS = st.one_of(GOOD, st.just(True), st.just(2.5))


@st.composite
def token_field(draw):
    kind = draw(st.integers(0, 12))
    if kind == 0:
        return None
    if kind == 1:
        return "w1"  # a str for a collection
    tokens = draw(st.lists(TOKENS if kind == 2 else GOOD, max_size=6))
    if kind == 3:
        return tuple(tokens)
    if kind == 4:
        return np.array(tokens, object)
    return tokens


@st.composite
def scenarios(draw):
    two_stream = draw(st.booleans())
    batches, ts = [], 0
    for _ in range(draw(st.integers(1, 6))):
        batch = []
        for _ in range(draw(st.integers(0, 12))):
            ts += draw(st.sampled_from([0, 0, 1, 2]))
            late = draw(st.integers(0, 9)) == 0
            side = draw(st.sampled_from(["R", "S"])) if two_stream else None
            batch.append((draw(st.integers(0, 12)), draw(token_field()), ts - 3 if late else ts, side))
        advance = None
        if draw(st.booleans()):
            ts += draw(st.integers(0, 3))
            advance = ts
        batches.append((batch, advance))
    return (draw(st.sampled_from([1, 2, 3])), draw(st.sampled_from(["jaccard", "cosine", "overlap"])),
            draw(st.sampled_from([2, 4, 8])), two_stream, batches)


def _normalised(join: Swoop) -> dict:
    """:func:`logical_state` with each window row's tokens as a set (a batch stores a set's
    numbers ascending, one by one insert in first-occurrence order; the kernels read either alike)."""
    state = logical_state(join)
    if "rows" in state:
        state["rows"] = [(n, size2, end, sorted(tokens)) for n, size2, end, tokens in state["rows"]]
    return state


def _outcome(result):
    return (type(result).__name__, str(result)) if isinstance(result, InvalidSetError) else result


@pytest.mark.parametrize("engine", ["compiled", "python"])
@pytest.mark.parametrize("join_kind", ["single", "owner", "probe"])
@settings(max_examples=80, deadline=None)
@given(scenario=scenarios(), w=st.integers(0, 1))
def test_batch_insert_equals_one_by_one(engine, join_kind, scenario, w):
    k, similarity, window, two_stream, batches = scenario
    if join_kind == "single":
        one, many = (Swoop(k, similarity, window, two_stream=two_stream, engine=engine) for _ in range(2))
    else:
        one, many = (WORKERS[join_kind](k, similarity, window, w, 2, two_stream=two_stream, engine=engine)
                     for _ in range(2))
    for batch, advance in batches:
        if join_kind == "single":
            expected = []
            for set_id, tokens, ts, side in batch:
                try:
                    expected.append(one.insert(set_id, tokens, ts, side))
                except InvalidSetError as exc:
                    expected.append(exc)
            got = many.insert_many(batch)
        else:
            routed = [(*row, owner_of(row[0], row[3], 2)) for row in batch]
            expected = []
            for row in routed:
                try:
                    expected.append(one.insert_routed(*row))
                except InvalidSetError as exc:
                    expected.append(exc)
            got = many.insert_routed_many(routed)
        assert [_outcome(r) for r in got] == [_outcome(r) for r in expected]
        if advance is not None:
            assert many.advance(advance) == one.advance(advance)
        assert _normalised(many) == _normalised(one)


def test_number_known_leaves_new_and_bad_sets_to_the_insert():
    order = TokenOrder()
    order.number_array(["a", "b", 7])
    got = order.number_known([["b", "a", "a"], ["a", "new"], [], None, "ab", (7,), np.array(["b", "a"], object),
                              [True], ["a", 1.5], [np.int64(7)]])
    # (new tokens are numbered ints first: 7 -> 0, "a" -> 1, "b" -> 2)
    assert [None if g is None else g.tolist() for g in got] == [[1, 2], None, None, None, None, [0], [1, 2], None,
                                                                None, None]
    assert len(order) == 3  # numbered nothing
