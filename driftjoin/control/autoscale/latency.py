"""The thesis's queue latency (section 4.5.1) of every record offered, waiting ones included.

The thesis measures latency as "the time a record stays in the input queue until the SPE
processes it". Over the *processed* records alone that number flatters a policy that falls
behind: a query that processes 1% of its input has a small latency over that 1% while the
other 99% wait. So a record still waiting when the run (or window) ends counts the time it has
waited so far: a lower bound on its latency, never left out.

Records are numbered by offset: record ``k`` is offered at ``offset + schedule.time_of(k)``
(the generator sources and the simulator share :class:`~driftjoin.generators.rates.RateSchedule`).
A micro-batch that starts at ``t`` and reads offsets ``[first, end)`` gives each of them the
queue latency ``t - offered``. The functions sample at most ``samples`` records per batch,
evenly over its offsets, each standing for ``(end - first) / samples`` records (weights), so a
run of millions of records costs a few thousand numbers.

>>> from driftjoin.generators.rates import RateSchedule
>>> s = RateSchedule("constant", high=10.0, duration=100.0)
>>> done = batch_waits(s, 0, 10, start=1.0)          # records 0..9 (offered at 0.0 .. 0.9) read at 1.0
>>> late = waiting_waits(s, 10, 1000, end=100.0)     # the run ended with 990 records waiting
>>> round(weighted_quantile(*done, 0.5), 2), round(weighted_quantile(*late, 0.5), 1)
(0.5, 49.4)
"""

from __future__ import annotations

import numpy as np

from driftjoin.generators.rates import RateSchedule

#: records sampled per batch (or per waiting range) for the quantiles
SAMPLES = 256


def _sample(first: int, end: int, samples: int) -> tuple[np.ndarray, float]:
    idx = np.unique(np.linspace(first, end - 1, min(samples, end - first)).astype(np.int64))
    return idx, (end - first) / len(idx)


def batch_waits(schedule: RateSchedule, first: int, end: int, start: float, *, offset: float = 0.0,
                samples: int = SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """Latencies ``start - offered`` of records ``[first, end)`` read by a batch at ``start``
    (or ending at ``start``, for the processing-time latency), and their weights.

    ``offset``: the schedule's zero on the clock ``start`` is read on.
    """
    if end <= first:
        return np.array([]), np.array([])
    idx, w = _sample(first, end, samples)
    return start - (offset + schedule.time_of(idx)), np.full(len(idx), w)


def waiting_waits(schedule: RateSchedule, first: int, offered: int, end: float, *, offset: float = 0.0,
                  samples: int = SAMPLES) -> tuple[np.ndarray, np.ndarray]:
    """The waits so far, at ``end``, of records ``[first, offered)``: offered, not processed."""
    return batch_waits(schedule, first, offered, end, offset=offset, samples=samples)


def weighted_quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    """The smallest value with at least ``q`` of the total weight at or below it (nan if empty)."""
    values, weights = np.asarray(values, dtype=float), np.asarray(weights, dtype=float)
    if len(values) == 0:
        return float("nan")
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weights[order])
    return float(values[order][min(len(values) - 1, int(np.searchsorted(cum, q * cum[-1])))])
