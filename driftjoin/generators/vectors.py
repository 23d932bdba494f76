"""Vector stream generators: the distributions of the S3J experiments and concept drift.

Every generator is a pure function of ``(seed, stream, first index, count, time)`` so a
streaming source can regenerate any offset range deterministically (replay after a crash gives
the same records).

Distributions (``dist``):

- ``uniform``: uniform in ``[-1, 1]^dim`` (the paper's experiments);
- ``gaussian``: a mixture of ``clusters`` Gaussian clusters with equal weights;
- ``skewed``: the same clusters with Zipf-like weights (cluster k has weight 1/(k+1)^1.5);
- ``pareto``: Pareto-distributed coordinates (shape 2), randomly signed: heavy tails;
- ``drift``: Gaussian clusters whose centres move along a circle over time (one turn per
  ``drift_period`` seconds): concept drift.
"""

from __future__ import annotations

import math

import numpy as np

DISTRIBUTIONS = ("uniform", "gaussian", "skewed", "pareto", "drift")


def _cluster_centres(seed: int, clusters: int, dim: int) -> np.ndarray:
    return np.random.default_rng([seed, 7919]).uniform(-0.8, 0.8, size=(clusters, dim))


def generate_vectors(
    dist: str,
    *,
    seed: int,
    stream: int,
    start: int,
    count: int,
    dim: int,
    times: np.ndarray | None = None,
    clusters: int = 8,
    spread: float = 0.08,
    drift_period: float = 120.0,
) -> np.ndarray:
    """``count`` vectors of stream ``stream`` starting at index ``start`` (deterministic)."""
    if dist not in DISTRIBUTIONS:
        raise ValueError(f"unknown distribution {dist!r}; choose one of {', '.join(DISTRIBUTIONS)}")
    if dim < 1:
        raise ValueError(f"dim must be >= 1, got {dim}")
    rng = np.random.default_rng([seed, stream, start, count])
    if dist == "uniform":
        return rng.uniform(-1.0, 1.0, size=(count, dim))
    if dist == "pareto":
        return (rng.pareto(2.0, size=(count, dim)) + 0.01) * rng.choice([-1.0, 1.0], size=(count, dim))
    centres = _cluster_centres(seed, clusters, dim)
    if dist == "skewed":
        weights = 1.0 / np.arange(1, clusters + 1) ** 1.5
        which = rng.choice(clusters, size=count, p=weights / weights.sum())
    else:
        which = rng.integers(0, clusters, size=count)
    points = centres[which] + rng.normal(0.0, spread, size=(count, dim))
    if dist == "drift":
        t = np.zeros(count) if times is None else np.asarray(times, dtype=np.float64)
        phase = 2.0 * math.pi * t / drift_period + which * (2.0 * math.pi / clusters)
        shift = np.zeros((count, dim))
        shift[:, 0] = 0.5 * np.cos(phase)
        if dim > 1:
            shift[:, 1] = 0.5 * np.sin(phase)
        points = points + shift
    return points
