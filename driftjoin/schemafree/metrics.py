"""Partition-quality metrics per window (Section VII-C).

* **replication** - average number of joiners a document of the window was sent to
  (documents broadcast for unseen pairs included);
* **maximal processing load** - the largest share of the window's documents that one
  joiner received;
* **Gini coefficient** of the per-joiner loads - 0 for perfectly equal load, towards 1
  when one joiner gets everything;
* **to_all** - documents that reached every joiner (broadcast for an unseen pair, or
  simply matching every partition);
* **repartitions** - how many times the partitions were recomputed so far.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def gini(loads: Sequence[float]) -> float:
    """Gini coefficient of non-negative loads (0 when all loads are equal or zero)."""
    x = np.sort(np.asarray(loads, dtype=float))
    n = x.size
    total = x.sum()
    if n == 0 or total == 0:
        return 0.0
    ranks = np.arange(1, n + 1)
    return float((2 * ranks - n - 1) @ x / (n * total))


@dataclass(frozen=True, slots=True)
class WindowMetrics:
    """What one window cost: routing quality, join output and partition maintenance."""

    window: int
    documents: int
    replication: float
    max_load: float
    gini: float
    loads: tuple[int, ...]
    to_all: int
    pairs: int
    repartitioned: bool
    repartitions: int


def routing_quality(loads: Sequence[int], documents: int) -> tuple[float, float, float]:
    """``(replication, maximal processing load, Gini)`` of per-joiner delivery counts."""
    if documents == 0:
        return 0.0, 0.0, 0.0
    return sum(loads) / documents, max(loads) / documents, gini(loads)
