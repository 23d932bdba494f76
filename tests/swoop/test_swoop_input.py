"""Bad-input policy: every rejection is a ValueError (InvalidSetError) with a clear message and
leaves the join unchanged; duplicate tokens are deduplicated; str and int tokens both work."""

from __future__ import annotations

import pytest

from driftjoin.swoop import BaseTopK, InvalidSetError, Swoop


@pytest.fixture(params=[Swoop, BaseTopK])
def join_cls(request):
    return request.param


def snapshot(join):
    return (join.topk(), join.index_time, join.window_size, len(join.tokens))


def loaded(join_cls, **kwargs):
    join = join_cls(3, "jaccard", 10, **kwargs)
    side = "R" if kwargs.get("two_stream") else None
    join.insert("a", ["x", "y"], 5, side)
    join.insert("b", ["x", "z"], 6, "S" if side else None)
    return join


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("c", [], 7), "empty set"),
        (("c", set(), 7), "empty set"),
        (("c", ["x"], 4), r"out-of-order timestamp 4: expected ts >= 6 \(the index time\)"),
        ((None, ["x"], 7), "missing field 'set_id'"),
        (("c", None, 7), "missing field 'tokens'"),
        (("c", ["x"], None), "missing field 'ts'"),
        (("c", "xyz", 7), "not a single str"),
        (("c", 42, 7), "iterable of str or int"),
        (("c", ["x", 1.5], 7), "token 1.5 of type float"),
        (("c", ["x", True], 7), "token True of type bool"),
        (("c", ["x"], float("nan")), "not a finite real number"),
        (("c", ["x"], "7"), "not a finite real number"),
        ((["c"], ["x"], 7), "not hashable"),
        (("a", ["x"], 7), "duplicate id"),
        (("c", ["x"], 7, "R"), "side 'R' given to a self-join"),
    ],
)
def test_rejections_leave_the_join_unchanged(join_cls, args, message):
    join = loaded(join_cls)
    before = snapshot(join)
    with pytest.raises(InvalidSetError, match=message) as info:
        join.insert(*args)
    assert isinstance(info.value, ValueError)
    assert snapshot(join) == before
    # the stream goes on as if the bad record had never been seen
    changes = join.insert("c", ["x", "y"], 7)
    assert [(e.pair.first, e.pair.second) for e in changes if e.kind == "enter"][0] == ("c", "a")


def test_two_stream_side_policy(join_cls):
    join = loaded(join_cls, two_stream=True)
    with pytest.raises(ValueError, match="missing field 'side'"):
        join.insert("c", ["x"], 7)
    with pytest.raises(ValueError, match=r"side 'T' is not one of \('R', 'S'\)"):
        join.insert("c", ["x"], 7, side="T")
    with pytest.raises(ValueError, match="duplicate id"):
        join.insert("a", ["x"], 7, side="R")
    join.insert("a", ["x"], 7, side="S")  # the same id on the other side is a different set


def test_advance_rejects_time_going_backwards(join_cls):
    join = loaded(join_cls)
    with pytest.raises(ValueError, match=r"advance: out-of-order timestamp 5.5: expected ts >= 6"):
        join.advance(5.5)
    with pytest.raises(ValueError, match="missing field 'ts'"):
        join.advance(None)
    assert join.advance(6) == [] and join.index_time == 6


def test_equal_timestamps_are_in_order(join_cls):
    join = loaded(join_cls)
    join.insert("c", ["y"], 6)
    assert join.index_time == 6


def test_id_reusable_after_expiry(join_cls):
    join = loaded(join_cls)
    join.insert("a", ["x", "y"], 15)  # the old "a" (ts 5) left the window at 15
    assert [(p.first, p.second) for p in join.topk()] == [("a", "b")]


def test_duplicate_tokens_are_deduplicated(join_cls):
    join = join_cls(1, "jaccard", 10)
    join.insert(1, ["x", "x", "y", "y"], 0)
    (event,) = join.insert(2, ["x", "y", "x"], 1)
    assert event.pair.sim == 1.0  # {x, y} vs {x, y}, not a multiset similarity


def test_str_and_int_tokens_are_distinct_tokens(join_cls):
    join = join_cls(1, "overlap", 10)
    join.insert(1, ["1", 2], 0)
    (event,) = join.insert(2, [1, 2, "2"], 1)
    assert event.pair.sim == 1.0  # only the int 2 is shared


def test_constructor_arguments():
    with pytest.raises(ValueError, match="k must be a positive int"):
        Swoop(0, "jaccard", 1)
    with pytest.raises(ValueError, match="window must be a positive finite duration"):
        Swoop(1, "jaccard", 0)
    with pytest.raises(ValueError, match="unknown similarity"):
        BaseTopK(1, "nope", 1)


def test_token_order_is_first_appearance_and_container_independent():
    join = Swoop(1, "jaccard", 10)
    join.insert(1, {"b", "a", 3}, 0)  # new tokens of one set: ints first, then by value
    join.insert(2, ["z", "a"], 1)
    assert join.tokens.number(["a", "b", 3, "z"]) == frozenset({1, 2, 0, 3})
    assert join.tokens.number([3]) == frozenset({0})


def test_numpy_integer_tokens_equal_python_ints(join_cls):
    import numpy as np

    join = join_cls(1, "jaccard", 10)
    join.insert(1, np.array([4, 5, 6]), 0)
    (event,) = join.insert(2, [4, 5, 6], 1)
    assert event.pair.sim == 1.0
