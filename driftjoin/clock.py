"""When a tumbling window closes, decided the same way by every key of an operator.

A window join keeps each window's records until no more records can arrive for it. Records
arrive out of order (event time, or an ingestion time stamped upstream), so "the oldest window
in this batch" is not a safe rule: a record of an older window in a later batch would find its
window's state already gone and lose its pairs with no error (25 of 48 pairs with rows 40 s
out of order under a watermark of one hour). Nor may each key
decide on its own: a record is copied to several keys, and all of them must agree whether it
is on time.

The rule, Spark's watermark applied per batch: ``seen`` is the largest time of all records of
the batches before this one (over the whole operator, not one key); the *frontier* is
``seen - lateness``; window ``w`` (times ``[w W, (w + 1) W)``) is closed once its end is at or
below the frontier. A record of a closed window is *late*: it cannot be joined exactly and goes
to the dead-letter report. Windows below the first open one are dropped from state.

Every key learns the batch's largest time from heartbeat rows that each upstream task sends to
every key (its own largest time), so every key computes the same ``seen`` and frontier; a
replayed batch has the same rows, hence the same heartbeats and the same decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class WindowClock:
    """Open and late windows of a tumbling-window join (module docstring).

    ``window_seconds=None``: one unbounded window, never closed, no record is late.
    """

    window_seconds: float | None
    lateness: float
    seen: float = -math.inf

    def first_open(self) -> int | None:
        """The oldest window that can still receive records (None: all windows are open)."""
        if self.window_seconds is None or self.seen == -math.inf:
            return None
        return math.floor((self.seen - self.lateness) / self.window_seconds)

    def late(self, window: np.ndarray) -> np.ndarray:
        """Which records (by window id) belong to a closed window."""
        first = self.first_open()
        if first is None:
            return np.zeros(len(window), dtype=bool)
        return np.asarray(window) < first

    def advance(self, batch_max: float) -> None:
        """Take this batch's largest time into account (after the batch is processed)."""
        if math.isfinite(batch_max) and batch_max > self.seen:
            self.seen = float(batch_max)


def batch_max(times: np.ndarray) -> float:
    """The largest finite time of a batch (``-inf`` when it has none)."""
    finite = np.asarray(times, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if len(finite) else -math.inf
