"""Strategy choice (driftjoin.metric.choose) and validation (driftjoin.metric.validate): counts not
timings, deterministic; settings that fail before the start say what to change; dead-letter reasons."""

from __future__ import annotations

import numpy as np
import pytest

import driftjoin
from driftjoin.metric.choose import (CANDIDATE, DISTANCE, ENTRY, build_strategy, choose, estimate, sample_free,
                                    strategies_for)
from driftjoin.metric.spaces import CallableSpace, JaccardSpace, LevenshteinSpace, PairwiseSpace, VectorSpace
from driftjoin.metric.validate import check_settings, check_user_metric, reasons
from driftjoin.windows import Windowing


def names(n: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list("abcdefghij"), size=rng.integers(4, 10))) for _ in range(n)]


def test_choice_is_deterministic_and_the_least_estimated_work():
    sp = LevenshteinSpace()
    sample = sp.prepare(names(400))
    first = choose(sp, 1, sample, n_workers=3, expected=5000)
    assert first == choose(sp, 1, sample, n_workers=3, expected=5000)
    name, estimates = first
    assert [e.strategy for e in estimates] == ["s3j", "passjoin"]
    assert name == min(estimates, key=lambda e: e.work).strategy == "passjoin"
    e = estimates[1]
    f = 5000 / 400
    assert e.work == pytest.approx(ENTRY * e.entries * f + (CANDIDATE * e.candidates + DISTANCE * e.distances) * f * f)


def test_s3j_wins_where_it_computes_less():
    """One value repeated: S3J puts every copy in one inner set (no centroid scans), PassJoin
    stores and matches all segments and substrings of every copy."""
    sp = LevenshteinSpace()
    sample = sp.prepare(["abcdefghijkl"] * 300)
    name, (s3j, passjoin) = choose(sp, 3, sample, n_workers=2)
    assert name == "s3j" and s3j.work < passjoin.work


def test_strategies_by_space():
    assert strategies_for(LevenshteinSpace()) == ("s3j", "passjoin", "pivots")
    assert strategies_for(JaccardSpace()) == ("s3j", "prefix", "pivots")
    assert strategies_for(CallableSpace(abs)) == ("s3j", "pivots")
    assert sample_free(LevenshteinSpace()) == "passjoin" and sample_free(CallableSpace(abs)) is None
    # a user metric: pivot filtering, without running S3J on the sample (that alone costs calls)
    counted = CallableSpace(lambda a, b: abs(a - b))
    assert choose(counted, 1.0, counted.prepare([float(v) for v in range(50)]), n_workers=2) == ("pivots", [])
    assert counted.calls == 0
    sp = JaccardSpace()
    assert choose(sp, 0.3, sp.prepare([["a", "b"], ["a", "c"], ["b", "c", "d"]] * 20), n_workers=2)[0] in ("s3j", "prefix")
    assert estimate("prefix", sp, 0.3, sp.prepare([["a"], ["a"]]), n_workers=1).candidates == 1


def test_build_strategy_refuses_what_does_not_apply():
    w = Windowing.unbounded()
    with pytest.raises(ValueError, match="algorithm='prefix' does not apply to metric='levenshtein'; choose one of s3j, passjoin"):
        build_strategy("prefix", LevenshteinSpace(), 1, 2, self_join=True, windows=w)
    with pytest.raises(ValueError, match="S3J needs a sample"):
        build_strategy("s3j", LevenshteinSpace(), 1, 2, self_join=True, windows=w)
    assert build_strategy("s3j", LevenshteinSpace(), 1, 2, self_join=True, windows=w,
                          sample=LevenshteinSpace().prepare(["a", "bb", "ccc"])).n_workers == 2


@pytest.mark.parametrize("kwargs, message", [
    ({"metric": "levenshtein", "threshold": 1.5, "value_kind": "string"}, "whole edits"),
    ({"metric": "jaccard", "threshold": 1.0, "value_kind": "set"}, r"in \[0, 1\)"),
    ({"metric": "jaccard", "threshold": -0.5, "value_kind": "set"}, r"in \[0, 1\)"),
    ({"metric": "levenshtein", "threshold": 1, "value_kind": "set", "column": "tags"},
     "metric='levenshtein' compares string values, but column 'tags' holds set values: use metric='jaccard'"),
    ({"metric": "jaccard", "threshold": 0.2, "value_kind": "string"}, "use metric='levenshtein'"),
    ({"metric": "euclidean", "threshold": 1, "value_kind": "string"}, "compares vector values"),
    ({"metric": "levenshtein", "threshold": 1, "value_kind": "string", "window": "20 seconds", "slide": "1 minute"},
     "slide='1 minute' is longer than window='20 seconds'"),
    ({"metric": "levenshtein", "threshold": 1, "value_kind": "string", "window": "1 minute", "within": "10 seconds"},
     "cannot be combined"),
    ({"metric": "levenshtein", "threshold": 1, "value_kind": "string", "algorithm": "prefix"}, "choose one of auto, s3j, passjoin"),
    ({"metric": "levenshtein", "threshold": 1, "value_kind": "text"}, "value_kind must be one of"),
])
def test_bad_settings_fail_with_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        check_settings(**kwargs)


def test_good_settings_resolve():
    s = check_settings("jaccard", 0, value_kind="set", window="1 minute", slide="20 seconds", algorithm="prefix")
    assert isinstance(s.space, JaccardSpace) and s.threshold == 0.0 and s.windows.kind == "sliding"
    u = check_settings(lambda a, b: abs(len(a) - len(b)), 2, value_kind="other")
    assert isinstance(u.space, CallableSpace) and u.algorithm == "auto"
    assert isinstance(check_settings("angular", 0.1, value_kind="vector").space, VectorSpace)


def test_user_metric_check_before_the_start():
    squared = driftjoin.user_metric(lambda A, B: (A[:, None] - B[None, :]) ** 2, name="squared gap")
    assert isinstance(squared, PairwiseSpace)
    with pytest.raises(ValueError, match="squared gap.*violates the triangle inequality"):
        check_user_metric(squared, [0.0, 1.0, 2.0, None])
    check_user_metric(CallableSpace(lambda a, b: abs(a - b)), [0.0, 1.0, 2.0, None])
    check_user_metric(LevenshteinSpace(), ["not", "checked"])  # built-in metrics are metrics


def test_dead_letter_reasons_per_value():
    assert reasons(LevenshteinSpace(), ["", "ok", None, 3.5, b"x"]) == [
        None, None, "null string", "not a string: float 3.5", "not a string: bytes b'x'"]
    got = reasons(JaccardSpace(), [["a"], [], None, ["a", 1.0], "abc", [1, 1]])
    assert got[0] is None and got[-1] is None
    assert got[1] == "empty token set: Jaccard distance needs at least one token"
    assert got[2] == "null token set"
    assert "neither str nor int" in got[3] and "not a single str" in got[4]
