"""The set stream generator: determinism, shape of the output, Zipf skew and drift."""

from __future__ import annotations

from collections import Counter

import pytest

from driftjoin.swoop.generator import set_stream


def test_deterministic_and_well_formed():
    first = list(set_stream(500, seed=5, size=(2, 9), rate=250.0))
    assert first == list(set_stream(500, seed=5, size=(2, 9), rate=250.0))
    assert first != list(set_stream(500, seed=6, size=(2, 9), rate=250.0))
    assert [set_id for set_id, _, _ in first] == list(range(500))
    stamps = [ts for _, _, ts in first]
    assert all(a < b for a, b in zip(stamps, stamps[1:]))
    assert 1.5 < stamps[-1] < 2.5  # 500 sets at 250 sets per time unit
    for _, tokens, _ in first:
        assert 2 <= len(tokens) <= 9 and len(set(tokens)) == len(tokens)


def test_string_tokens():
    ints = list(set_stream(50, seed=1))
    strs = list(set_stream(50, seed=1, string_tokens=True))
    for (_, a, ta), (_, b, tb) in zip(ints, strs):
        assert ta == tb and b == [f"t{tok}" for tok in a]


def test_zipf_skew():
    counts = Counter(tok for _, tokens, _ in set_stream(3000, seed=2, s=1.2) for tok in tokens)
    ranked = [tok for tok, _ in counts.most_common(3)]
    assert ranked == [0, 1, 2]
    flat = Counter(tok for _, tokens, _ in set_stream(3000, seed=2, s=0.0) for tok in tokens)
    assert max(flat.values()) < counts[0] / 10


def test_drift_moves_the_hot_tokens():
    stream = list(set_stream(4000, seed=3, s=1.2, rate=1000.0, drift=500.0))
    early = Counter(t for _, tokens, ts in stream if ts < 0.5 for t in tokens).most_common(1)
    late = Counter(t for _, tokens, ts in stream if ts > 3.0 for t in tokens).most_common(1)
    assert early[0][0] < 250 <= 1500 <= late[0][0]


def test_endless_and_invalid_arguments():
    stream = set_stream(seed=0)
    assert [next(stream)[0] for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="size"):
        next(set_stream(1, vocabulary=5, size=(3, 8)))
    with pytest.raises(ValueError, match="rate"):
        next(set_stream(1, rate=0.0))


def test_near_duplicates_copy_a_recent_set_with_one_token_replaced():
    stream = list(set_stream(600, seed=4, near_duplicates=0.5, recent=16))
    assert stream == list(set_stream(600, seed=4, near_duplicates=0.5, recent=16))
    copies = 0
    for n, (_, tokens, _) in enumerate(stream[1:], start=1):
        recent = [set(t) for _, t, _ in stream[max(0, n - 16) : n]]
        if any(len(set(tokens) - r) <= 1 and len(tokens) == len(r) for r in recent):
            copies += 1
    assert 250 < copies < 400  # about half, plus the odd chance match
    with pytest.raises(ValueError, match="near_duplicates"):
        next(set_stream(1, near_duplicates=1.5))
