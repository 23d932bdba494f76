"""Maximum sustainable throughput (MST): the highest input rate a run keeps up with.

The thesis (3.5, after Karimov et al.) calls a rate sustainable when the system handles it
"for a long period of time without provoking backpressure", i.e. without ever-growing
latencies and a processing rate below the input rate. In the simulator an overloaded run
builds a backlog (in the sources' input and the channels) that grows linearly with time, so at
the end of the input there is work left: a rate is *sustainable* when, once the input ends,
everything is processed within ``slack`` seconds (default: 5% of the run plus 10 ms, a
record's path and a checkpoint's pause at the testbed's scale; a larger overload leaves a
larger backlog).

:func:`search` finds the MST as the thesis does, by probing: runs at rising rates until one is
not sustainable (the query is saturated), then bisection between the highest sustainable and
the lowest unsustainable rate until they are within ``tolerance``. The MST reported is a rate
that was run and kept up, with a rate that was run and did not at most ``tolerance`` above
it. Where to start probing comes from one run at a moderate rate: the runs are CPU-bound, so
the capacity is about rate / the busiest worker's utilisation. That estimate alone (no probe:
``probes=0``, :func:`estimate`) is an extrapolation from a lightly loaded run, kept by name
for comparison; it is not an MST.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from driftjoin.checkpointing.run import RunConfig, RunResult, run


def sustainable(res: RunResult, slack: float | None = None) -> bool:
    """Whether a run kept up: everything processed within ``slack`` seconds of the input's end
    (default ``0.05 * duration + 0.01``)."""
    limit = slack if slack is not None else 0.05 * res.duration + 0.01
    return res.drained and res.drain_time <= limit


@dataclass
class MSTResult:
    """The MST of a search and how it was found.

    ``mst``: the highest rate probed that was sustainable (0 when none was); ``upper``: the
    lowest rate probed that was not (``inf``: the search never saturated the query);
    ``estimate``: the utilisation estimate probing started from; ``probes``: every probe as
    (rate, sustainable, drain time)."""

    mst: float
    estimate: float
    probes: list[tuple[float, bool, float]]
    upper: float = math.inf
    runs: list[RunResult] = field(default_factory=list, repr=False)

    @property
    def saturated(self) -> bool:
        """Whether the MST is bracketed: a sustainable rate with an unsustainable one above it."""
        return self.mst > 0 and math.isfinite(self.upper)


def estimate(cfg: RunConfig, rate: float) -> tuple[float, RunResult]:
    """Capacity estimate rate / (busiest worker's utilisation) from one run at ``rate``."""
    res = run(replace(cfg, rate=rate, failures=()))
    return rate / max(res.cpu_max, 1e-9), res


def search(cfg: RunConfig, rate: float, probes: int = 8, tolerance: float = 0.03, step: float = 1.2,
           slack: float | None = None) -> MSTResult:
    """Probe the MST of ``cfg`` (failure-free) to saturation, starting from the estimate at ``rate``.

    Parameters
    ----------
    cfg:
        the run's settings (its ``rate`` and ``failures`` are replaced by the probes').
    rate:
        the moderate rate of the estimate's run (records/s), where probing starts from.
    probes:
        the most probes run after the estimate; 0 returns the estimate alone (extrapolated).
    tolerance:
        stop once the unsustainable rate is within this share above the sustainable one.
    step:
        factor between probes until the query saturates (up) or keeps up (down).
    slack:
        see :func:`sustainable`.

    >>> from driftjoin.checkpointing import RunConfig
    >>> m = search(RunConfig(query="q1", protocol="none", workers=1, duration=0.1, interval=0.05), 2000.0, probes=6)
    >>> m.saturated, m.mst < m.upper <= 1.2 * m.mst
    (True, True)
    """
    if probes < 0:
        raise ValueError(f"probes={probes!r} must be >= 0 (0: the utilisation estimate alone)")
    if not (0 < tolerance < 1 and step > 1):
        raise ValueError(f"need 0 < tolerance < 1 and step > 1, got tolerance={tolerance!r}, step={step!r}")
    est, _ = estimate(cfg, rate)
    if probes == 0:
        return MSTResult(est, est, [])
    lo, hi = 0.0, math.inf
    tried: list[tuple[float, bool, float]] = []
    runs: list[RunResult] = []
    r = est
    for _ in range(probes):
        res = run(replace(cfg, rate=r, failures=()))
        ok = sustainable(res, slack)
        tried.append((r, ok, res.drain_time))
        runs.append(res)
        if ok:
            lo = max(lo, r)
        else:
            hi = min(hi, r)
        if lo > 0 and math.isfinite(hi):
            if hi - lo <= tolerance * hi:
                break
            r = (lo + hi) / 2
        else:
            r = r * step if ok else r / step
    return MSTResult(lo, est, tried, hi, runs)
