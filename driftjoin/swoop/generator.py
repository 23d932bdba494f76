"""Synthetic set streams: Zipf-distributed tokens, optional drift, Poisson arrivals.

``set_stream(n, ...)`` yields ``(set_id, tokens, ts)`` with ``set_id = 0, 1, ...`` and strictly
increasing ``ts`` (exponential gaps of mean ``1 / rate``, so ``rate`` is in sets per time unit
and a window of duration ``w`` holds ``rate * w`` sets on average, the paper's ``|W|``).

Tokens. Each set draws a size uniformly from ``size = (lo, hi)`` and then distinct tokens from
a Zipf law over ``vocabulary`` ranks: rank ``r`` (1-based) has probability proportional to
``r ** -s``. Without drift, rank ``r`` is token ``r - 1``. With ``drift = d`` the popularity
ranking rotates by ``d`` token numbers per time unit: at time ``ts`` rank ``r`` is token
``(r - 1 + floor(d * ts)) mod vocabulary``, so the hot tokens keep moving to tokens that were
cold, which defeats the first-appearance token order (section 5.5, the DBLP effect of 7.2).
``string_tokens=True`` returns tokens as strings ``"t<number>"``.

Near-duplicates. With probability ``near_duplicates`` a set is instead a copy of one of the
last ``recent`` sets with one token replaced by a fresh draw (a retweet with an edit, a repost,
a revised title), so the stream has pairs of high similarity as real set streams do; with the
default ``0.0`` all sets are independent Zipf samples, where even the top pairs are only
moderately similar.

Deterministic for a given ``seed`` (numpy's PCG64).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

_BUFFER = 1 << 16


def set_stream(
    n: int | None = None,
    *,
    vocabulary: int = 10_000,
    s: float = 1.0,
    size: tuple[int, int] = (5, 15),
    rate: float = 1_000.0,
    drift: float = 0.0,
    seed: int = 0,
    string_tokens: bool = False,
    start: float = 0.0,
    near_duplicates: float = 0.0,
    recent: int = 256,
) -> Iterator[tuple[int, list[int] | list[str], float]]:
    """Yield ``n`` sets (endless if ``n`` is ``None``) as ``(set_id, tokens, ts)``."""
    lo, hi = size
    if not 1 <= lo <= hi <= vocabulary:
        raise ValueError(f"size {size!r} must satisfy 1 <= lo <= hi <= vocabulary ({vocabulary})")
    if s < 0 or rate <= 0 or drift < 0 or not math.isfinite(rate):
        raise ValueError("need s >= 0, a finite rate > 0 and drift >= 0")
    if not 0.0 <= near_duplicates <= 1.0 or recent < 1:
        raise ValueError("need 0 <= near_duplicates <= 1 and recent >= 1")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ts = start
    set_id = 0
    ranks: list[int] = []
    pos = 0
    history: list[list[int]] = []

    def draw(shift: int) -> int:
        nonlocal ranks, pos
        if pos == len(ranks):
            ranks = np.searchsorted(cdf, rng.random(_BUFFER), side="right").tolist()
            pos = 0
        pos += 1
        return (ranks[pos - 1] + shift) % vocabulary

    while n is None or set_id < n:
        ts += float(rng.exponential(1.0 / rate))
        shift = int(drift * ts) if drift else 0
        if history and near_duplicates and rng.random() < near_duplicates:
            source = history[int(rng.integers(len(history)))]
            chosen = dict.fromkeys(source)
            del chosen[source[int(rng.integers(len(source)))]]
            while len(chosen) < len(source):  # one fresh token (maybe the removed one again)
                chosen[draw(shift)] = None
        else:
            want = int(rng.integers(lo, hi + 1))
            chosen = {}
            while len(chosen) < want:
                chosen[draw(shift)] = None
        picked = list(chosen)
        if near_duplicates:
            history.append(picked)
            if len(history) > recent:
                del history[0]
        yield set_id, [f"t{tok}" for tok in picked] if string_tokens else picked, ts
        set_id += 1
