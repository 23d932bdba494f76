"""Maximum sustainable throughput (MST): the highest input rate a run keeps up with.

The thesis (3.5, after Karimov et al.) calls a rate sustainable when the system handles it
"for a long period of time without provoking backpressure", i.e. without ever-growing
latencies and a processing rate below the input rate. In the simulator an overloaded run
builds a backlog (in the sources' input and the channels) that grows linearly with time, so at
the end of the input there is work left: a rate is *sustainable* when, once the input ends,
everything is processed within ``slack`` seconds (default: 5% of the run plus 50 ms, which
flags an overload of more than about 5%).

The search is the thesis's (raise the rate until the system falls behind), made cheap by a
first estimate: a run at a moderate rate measures the busiest worker's CPU utilisation u, and
the run is CPU-bound, so the capacity is about rate / u. Bisection between a sustainable and
an unsustainable rate around that estimate then narrows the MST to ``tolerance``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from driftjoin.checkpointing.run import RunConfig, RunResult, run


def sustainable(res: RunResult, slack: float | None = None) -> bool:
    limit = slack if slack is not None else 0.05 * res.duration + 0.05
    return res.drained and res.drain_time <= limit


@dataclass
class MSTResult:
    mst: float
    estimate: float
    probes: list[tuple[float, bool, float]]  # (rate, sustainable, drain time)


def estimate(cfg: RunConfig, rate: float) -> tuple[float, RunResult]:
    """Capacity estimate rate / (busiest worker's utilisation) from one run at ``rate``."""
    res = run(replace(cfg, rate=rate, failures=()))
    return rate / max(res.cpu_max, 1e-9), res


def search(cfg: RunConfig, rate: float, probes: int = 4, tolerance: float = 0.03) -> MSTResult:
    """Bisect the MST of ``cfg`` (failure-free), starting from the estimate at ``rate``."""
    est, _ = estimate(cfg, rate)
    if probes == 0:
        return MSTResult(est, est, [])
    lo, hi = 0.0, float("inf")
    tried: list[tuple[float, bool, float]] = []
    r = 0.97 * est
    for _ in range(probes):
        res = run(replace(cfg, rate=r, failures=()))
        ok = sustainable(res)
        tried.append((r, ok, res.drain_time))
        if ok:
            lo = r
        else:
            hi = r
        if hi < float("inf") and lo > 0 and hi - lo <= tolerance * hi:
            break
        r = (lo + hi) / 2 if hi < float("inf") and lo > 0 else (r * 1.1 if ok else r * 0.85)
    if lo == 0.0:  # nothing tried was sustainable: the best known lower bound is below the last probe
        lo = min(t[0] for t in tried) * 0.85
    return MSTResult(lo, est, tried)
