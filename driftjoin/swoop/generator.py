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
) -> Iterator[tuple[int, list[int] | list[str], float]]:
    """Yield ``n`` sets (endless if ``n`` is ``None``) as ``(set_id, tokens, ts)``."""
    lo, hi = size
    if not 1 <= lo <= hi <= vocabulary:
        raise ValueError(f"size {size!r} must satisfy 1 <= lo <= hi <= vocabulary ({vocabulary})")
    if s < 0 or rate <= 0 or drift < 0 or not math.isfinite(rate):
        raise ValueError("need s >= 0, a finite rate > 0 and drift >= 0")
    rng = np.random.default_rng(seed)
    weights = np.arange(1, vocabulary + 1, dtype=np.float64) ** -s
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ts = start
    set_id = 0
    ranks: list[int] = []
    pos = 0
    while n is None or set_id < n:
        ts += float(rng.exponential(1.0 / rate))
        want = int(rng.integers(lo, hi + 1))
        shift = int(drift * ts) if drift else 0
        chosen: dict[int, None] = {}
        while len(chosen) < want:
            if pos == len(ranks):
                ranks = np.searchsorted(cdf, rng.random(_BUFFER), side="right").tolist()
                pos = 0
            chosen[(ranks[pos] + shift) % vocabulary] = None
            pos += 1
        tokens = [f"t{tok}" for tok in chosen] if string_tokens else list(chosen)
        yield set_id, tokens, ts
        set_id += 1
