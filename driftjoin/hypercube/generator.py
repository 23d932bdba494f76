"""Seedable streams of R(A, B) and S(B, C) with Zipf-distributed join values (section 4.2).

The stream is cut into ``phases`` of equal length. In every phase each side draws join-value
ranks from a Zipf law over ``domain`` values with its own exponent (``alpha = 0`` is uniform,
larger is more skewed, and the exponent may change from phase to phase), and maps rank to value
through a permutation drawn afresh per phase: the hot set moves at each phase boundary, so values
turn heavy and light again over time. With ``shared_hot_set`` both sides use the same
permutation, so the hot values of R and S coincide and the output is skewed too (a many-many
join, where SHC differs most from the baselines).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driftjoin.hypercube.model import Side, StreamTuple


@dataclass(frozen=True)
class ZipfStreamSpec:
    """``n_r`` R tuples and ``n_s`` S tuples, interleaved at random, ``rate`` tuples per time unit."""

    n_r: int
    n_s: int
    domain: int = 10_000
    alpha_r: float | tuple[float, ...] = 1.0
    alpha_s: float | tuple[float, ...] = 1.0
    phases: int = 1
    shared_hot_set: bool = True
    rate: float = 1.0
    seed: int = 0

    def alphas(self, side: Side) -> tuple[float, ...]:
        """The exponent of each phase for one side."""
        a = self.alpha_r if side is Side.R else self.alpha_s
        out = (float(a),) * self.phases if isinstance(a, (int, float)) else tuple(map(float, a))
        if len(out) != self.phases or any(x < 0 for x in out):
            raise ValueError("give one alpha >= 0, or one per phase")
        return out


def zipf_ranks(rng: np.random.Generator, n: int, alpha: float, domain: int) -> np.ndarray:
    """``n`` ranks in ``[0, domain)`` with ``P(rank = i) ~ (i + 1) ** -alpha`` (inverse CDF)."""
    cdf = np.cumsum(np.arange(1, domain + 1, dtype=np.float64) ** -alpha)
    cdf /= cdf[-1]
    return np.minimum(np.searchsorted(cdf, rng.random(n), side="right"), domain - 1)


def zipf_stream(spec: ZipfStreamSpec) -> list[StreamTuple]:
    """The stream in arrival order; ``tid`` counts per side, ``ts`` is arrival index / rate."""
    if spec.n_r < 0 or spec.n_s < 0 or spec.domain < 1 or spec.phases < 1 or spec.rate <= 0:
        raise ValueError(f"invalid stream spec {spec}")
    rng = np.random.default_rng(spec.seed)
    total = spec.n_r + spec.n_s
    sides = np.repeat(np.array([Side.R, Side.S], dtype=np.int8), [spec.n_r, spec.n_s])
    rng.shuffle(sides)
    phase = np.arange(total, dtype=np.int64) * spec.phases // max(total, 1)
    perms_r = [rng.permutation(spec.domain) for _ in range(spec.phases)]
    perms_s = perms_r if spec.shared_hot_set else [rng.permutation(spec.domain) for _ in range(spec.phases)]
    keys = np.empty(total, dtype=np.int64)
    tids = np.empty(total, dtype=np.int64)
    for side, perms in ((Side.R, perms_r), (Side.S, perms_s)):
        pos = np.flatnonzero(sides == side)
        tids[pos] = np.arange(len(pos))
        for i, alpha in enumerate(spec.alphas(side)):
            at = pos[phase[pos] == i]
            keys[at] = perms[i][zipf_ranks(rng, len(at), alpha, spec.domain)]
    ts = np.arange(total, dtype=np.float64) / spec.rate
    side_of = (Side.R, Side.S)
    return [
        StreamTuple(side_of[s], k, t, x)
        for s, k, t, x in zip(sides.tolist(), keys.tolist(), tids.tolist(), ts.tolist())
    ]
