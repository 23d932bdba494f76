"""When a window closes, decided the same way by every key of an operator.

A window join keeps each window's records until no more records can arrive for it. Records
arrive out of order (event time, or an ingestion time stamped upstream), so "the oldest window
in this batch" is not a safe rule: a record of an older window in a later batch would find its
window's state already gone and lose its pairs with no error (25 of 48 pairs with rows 40 s
out of order under a watermark of one hour). Nor may each key
decide on its own: a record is copied to several keys, and all of them must agree whether it
is on time.

The rule, Spark's watermark applied per batch: ``seen`` is the largest time of all records of
the batches before this one (over the whole operator, not one key); the *frontier* is
``seen - lateness``; a window is closed once its end is at or below the frontier (the window's
end for every kind of :mod:`driftjoin.windows`: ``o + kS + W``, an interval join's bucket
``(b + 1)B``). A record is *late* when its earliest window is closed: it cannot be joined
exactly and goes to the dead-letter report whole, at every key one of its copies reaches.
Windows below the first open one are dropped from state.

Times are integer ticks (:data:`driftjoin.windows.TICKS_PER_SECOND`), so a record on a boundary
and one a tick beside it are decided exactly. Every key learns the batch's largest time from
heartbeat rows that each upstream task sends to every key (its own largest time), so every key
computes the same ``seen`` and frontier; a replayed batch has the same rows, hence the same
heartbeats and the same decisions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from driftjoin.windows import TICKS_PER_SECOND, Windowing


@dataclass
class WindowClock:
    """Open windows and late records of a window join (module docstring), in ticks.

    Example::

        >>> clock = WindowClock(Windowing.sliding(60, 20), lateness=0)
        >>> clock.advance(75)
        >>> clock.first_open(), clock.late(np.array([14, 15])).tolist()
        (1, [True, False])
    """

    windows: Windowing
    lateness: int
    #: the largest time of the batches before this one (None: no batch had a time yet)
    seen: int | None = None

    def frontier(self) -> int | None:
        """``seen - lateness`` (None before the first time)."""
        return None if self.seen is None else self.seen - self.lateness

    def first_open(self) -> int | None:
        """The oldest window that can still receive records (None: all windows are open)."""
        return self.windows.first_open(self.frontier())

    def late(self, times: np.ndarray) -> np.ndarray:
        """Which records (by time) have a closed earliest window."""
        return self.windows.late(times, self.frontier())

    def advance(self, batch_max: int | None) -> None:
        """Take this batch's largest time into account (after the batch is processed)."""
        if batch_max is not None and (self.seen is None or batch_max > self.seen):
            self.seen = int(batch_max)


def batch_max(times: np.ndarray) -> float:
    """The largest finite time of a batch (``-inf`` when it has none)."""
    finite = np.asarray(times, dtype=np.float64)
    finite = finite[np.isfinite(finite)]
    return float(finite.max()) if len(finite) else -math.inf


def ticks(seconds: np.ndarray) -> np.ndarray:
    """Times in seconds (Spark's doubles, microsecond resolution) as int64 ticks.

    A timestamp's microseconds divided by 10^6 and multiplied back rounds to the same integer
    while the rounding error stays below half a tick (times before the year 2200).
    """
    return np.round(np.asarray(seconds, dtype=np.float64) * TICKS_PER_SECOND).astype(np.int64)


def tick_of(seconds: float) -> int | None:
    """One time in seconds as ticks (None for ``-inf``: no time yet)."""
    return None if not math.isfinite(seconds) else int(round(seconds * TICKS_PER_SECOND))
