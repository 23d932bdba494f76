"""Algorithm 2 (rollback propagation on the checkpoint graph) against brute force."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.checkpointing.recovery import CheckpointMeta, recovery_line


def _execution(n: int, events: list[tuple[int, int, int]]):
    """Replay (kind, a, b) events on n processes with FIFO channels; return metas and channels."""
    channels = {a * n + b: (a, b) for a in range(n) for b in range(n) if a != b}
    sent = {ch: 0 for ch in channels}
    recv = {ch: 0 for ch in channels}
    metas = {p: [CheckpointMeta(p, 0, {}, {})] for p in range(n)}
    for kind, a, b in events:
        if kind == 0:  # checkpoint of a
            out = {ch: sent[ch] for ch, (s, _) in channels.items() if s == a}
            inn = {ch: recv[ch] for ch, (_, r) in channels.items() if r == a}
            metas[a].append(CheckpointMeta(a, len(metas[a]), out, inn))
        elif a != b:
            ch = a * n + b
            if kind == 1:
                sent[ch] += 1
            elif recv[ch] < sent[ch]:  # b delivers the oldest message from a
                recv[ch] += 1
    return metas, channels


def _consistent(metas, channels, line) -> bool:
    return all(metas[j][line[j]].recv.get(ch, 0) <= metas[i][line[i]].sent.get(ch, 0)
               for ch, (i, j) in channels.items())


events = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), st.integers(0, 2)), max_size=40)


@settings(max_examples=300, deadline=None)
@given(events)
def test_rollback_propagation_is_the_maximum_consistent_line_and_invalid_is_useless(evs):
    n = 3
    metas, channels = _execution(n, evs)
    got = recovery_line(metas, channels)
    lines = [dict(enumerate(c)) for c in itertools.product(*(range(len(metas[p])) for p in range(n)))]
    good = [l for l in lines if _consistent(metas, channels, l)]
    best = {p: max(l[p] for l in good) for p in range(n)}  # consistent lines are a lattice
    assert _consistent(metas, channels, best)
    assert got.line == best
    useful = {(p, l[p]) for l in good for p in range(n)}
    useless = {(p, x) for p in range(n) for x in range(1, len(metas[p])) if (p, x) not in useful}
    assert set(got.invalid) == useless


def test_domino_rolls_back_past_every_later_checkpoint():
    # P0 and P1 alternate a message and a checkpoint: each checkpoint received a message that
    # the other side sent after its own latest checkpoint (the pattern of Figure 3.5)
    evs = [(0, 1, 1), (1, 1, 0), (2, 1, 0), (0, 0, 0), (1, 0, 1), (2, 0, 1), (0, 1, 1),
           (1, 1, 0), (2, 1, 0), (0, 0, 0), (1, 0, 1), (2, 0, 1)]
    metas, channels = _execution(2, evs)
    got = recovery_line(metas, channels)
    assert got.line == {0: 0, 1: 1}
    assert set(got.invalid) == {(0, 1), (0, 2), (1, 2)}
