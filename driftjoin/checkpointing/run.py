"""One testbed run: settings (checked before anything runs), the run, and its CheckMate metrics.

:class:`RunConfig` holds a run's settings; :func:`run` builds the query's dataflow and input,
runs it under the protocol with the failures, and returns a :class:`RunResult` with the
metrics of thesis section 3.5:

- end-to-end latency (p50, p99): sink time minus the arrival time of the input record that
  caused the output (for a join, the later of the two);
- throughput: input records read per second; ``drained`` and ``drain_time``: whether and how
  long after the input ended everything was processed (:mod:`~driftjoin.checkpointing.mst`
  decides sustainability from them);
- average checkpoint time: COOR, a round from trigger to the last acknowledgement; UNC and
  CIC, one instance's snapshot plus upload;
- restart time (detection to processing again: recovery line, downloading state and logs) and
  recovery time (detection to the end of the first fifth of an interval of output whose median
  latency is back within twice the median before the failure, or the p99 before it if higher;
  as the thesis reads Figure 3.9, whose points are per second of a 60-second run of about 8
  checkpoint intervals);
- invalid checkpoints (part of no consistent recovery line; see
  :mod:`~driftjoin.checkpointing.recovery`), forced checkpoints (CIC);
- message overhead: protocol bytes (markers, triggers, acknowledgements, checkpoint
  metadata, piggybacked vectors) as a share of all bytes sent, and as the ratio of all bytes to
  the data bytes (the thesis's Table 3.2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import numpy as np

from driftjoin.checkpointing.costs import CostModel
from driftjoin.checkpointing.engine import Engine
from driftjoin.checkpointing.protocols import PROTOCOLS
from driftjoin.checkpointing.queries import QUERIES, canonical

MAX_WORKERS = 64


@dataclass(frozen=True)
class RunConfig:
    query: str = "q1"
    protocol: str = "coor"
    workers: int = 2
    interval: float = 1.0
    rate: float = 2000.0
    duration: float = 4.0
    hot: float = 0.0
    #: failure times in seconds (each on a random worker), or a number of failures at random times
    failures: Sequence[float] | int = ()
    seed: int = 0
    #: UNC and CIC: whose clock the checkpoint timers follow, "worker" (the thesis) or "instance",
    #: and how far apart the workers' clocks are: each worker's timer starts at a phase drawn
    #: (from ``seed``) uniformly in ``[0, clock_skew)`` seconds. ``None``, the default, is the
    #: whole interval: workers that start their clocks when they start, seconds apart, tick at
    #: independent phases. ``0.0`` puts every worker's timer in step, which makes UNC an
    #: accidentally coordinated protocol (what this testbed did before; see protocols/unc.py)
    clocks: str = "worker"
    clock_skew: float | None = None
    costs: CostModel = field(default_factory=CostModel)
    drain_limit: float = 5.0
    trace: bool = False
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def skew(self) -> float:
        """How far apart the workers' clocks are, in seconds (``clock_skew``; the interval when None)."""
        return self.interval if self.clock_skew is None else float(self.clock_skew)

    def max_failures(self) -> int:
        """Failures must be an interval apart and leave an interval before the input ends."""
        return max(0, int(self.duration / self.interval) - 1)

    def validate(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"unknown protocol {self.protocol!r}: choose one of {', '.join(PROTOCOLS)}")
        if self.query not in QUERIES:
            raise ValueError(f"unknown query {self.query!r}: choose one of {', '.join(QUERIES)}")
        if not (isinstance(self.workers, int) and 1 <= self.workers <= MAX_WORKERS):
            raise ValueError(f"workers must be an integer in 1..{MAX_WORKERS}, got {self.workers!r}")
        if not self.interval > 0:
            raise ValueError(f"interval must be > 0 seconds (the time between checkpoints, e.g. 1.0), got {self.interval}")
        if not self.rate > 0:
            raise ValueError(f"rate must be > 0 records per second, got {self.rate}")
        if not self.duration > 0:
            raise ValueError(f"duration must be > 0 seconds of input, got {self.duration}")
        if not 0.0 <= self.hot < 1.0:
            raise ValueError(f"hot (the share of hot-item events) must be in [0, 1), got {self.hot}")
        if self.hot > 0 and not QUERIES[self.query].skewable:
            raise ValueError(f"query {self.query} has no keyed operator that hot items would skew: use hot=0 "
                             f"(skewable queries: {', '.join(q for q, d in QUERIES.items() if d.skewable)})")
        if self.clocks not in ("worker", "instance"):
            raise ValueError(f"clocks={self.clocks!r}: choose 'worker' (a worker's instances checkpoint together, the "
                             "thesis) or 'instance' (every instance on a clock of its own)")
        if self.clock_skew is not None and not 0.0 <= self.clock_skew <= self.interval:
            raise ValueError(f"clock_skew={self.clock_skew!r} must be in [0, interval={self.interval:g}] seconds (how far "
                             "apart the workers' clocks are; None: the whole interval)")
        if not self.drain_limit > 0:
            raise ValueError(f"drain_limit must be > 0 seconds, got {self.drain_limit}")
        proto = PROTOCOLS[self.protocol]
        if not proto.supports_cycles and self.query == "reach":
            raise ValueError(f"protocol {self.protocol} (aligned markers) deadlocks on the cyclic query {self.query}: "
                             "an operator on the cycle would wait for a marker that has to pass through itself; "
                             "use protocol 'unc' or 'cic'")
        n = self.failures if isinstance(self.failures, int) else len(self.failures)
        if n < 0:
            raise ValueError(f"failures must be >= 0, got {n}")
        if n > self.max_failures():
            raise ValueError(
                f"{n} failures do not fit in a {self.duration:g} s run with a checkpoint every {self.interval:g} s "
                f"(at most {self.max_failures()}: failures must be at least one interval apart and leave one interval "
                "before the input ends); use fewer failures, a longer duration or a shorter interval")
        if not isinstance(self.failures, int):
            times = sorted(self.failures)
            if any(not 0 < t < self.duration for t in times):
                raise ValueError(f"failure times must lie inside the input (0, {self.duration:g}) s, got {list(self.failures)}")
            if any(b - a < self.interval - 1e-9 for a, b in zip(times, times[1:])):
                raise ValueError(f"failure times must be at least one checkpoint interval ({self.interval:g} s) apart, "
                                 f"got {times}")

    def failure_plan(self) -> list[tuple[float, int]]:
        rng = np.random.default_rng([self.seed, 7])
        if isinstance(self.failures, int):
            # k failures at random, one interval apart, inside [interval, duration - interval)
            slots = rng.choice(self.max_failures(), size=self.failures, replace=False) if self.failures else []
            times = sorted(float((s + rng.uniform(0.5, 1.0)) * self.interval) for s in slots)
        else:
            times = sorted(float(t) for t in self.failures)
        return [(t, int(rng.integers(self.workers))) for t in times]


@dataclass
class FailureResult:
    time: float
    worker: int
    restart_s: float
    recovery_s: float
    rolled_back: int
    replayed_messages: int
    replayed_records: int


@dataclass
class RunResult:
    query: str
    protocol: str
    workers: int
    interval: float
    rate: float
    duration: float
    hot: float
    seed: int
    #: UNC and CIC's timers: "worker" or "instance", and how far apart the workers' clocks were (s)
    clocks: str
    clock_skew: float
    ingested: int
    throughput: float
    drained: bool
    drain_time: float
    outputs: int
    p50_ms: float
    p99_ms: float
    checkpoints: int
    forced: int
    avg_checkpoint_ms: float
    invalid: int
    judged: int
    invalid_pct: float
    #: of the invalid ones: discarded at failures (above the recovery line); the rest are useless
    #: checkpoints below the line (on a Z-cycle)
    discarded: int
    bytes_data: int
    bytes_protocol: int
    protocol_share: float
    overhead_ratio: float
    messages: int
    duplicates: int
    cpu_max: float
    failures: list[FailureResult]
    #: per 20 ms of sink time: (start, p50 ms, p99 ms) of the outputs (the thesis's Figures 3.9, 3.10)
    timeline: list[tuple[float, float, float]] = field(default_factory=list, repr=False)
    result: Any = field(default=None, repr=False)
    traces: list = field(default_factory=list, repr=False)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("result")
        d.pop("traces")
        return d


def _p(values: np.ndarray, q: float) -> float:
    return float(np.percentile(values, q) * 1e3) if len(values) else float("nan")


def _recovery_seconds(times: np.ndarray, lat: np.ndarray, failure: Any, bin_s: float) -> float:
    before = lat[times < failure.time]
    if not len(before) or math.isnan(failure.restarted):
        return float("nan")
    normal = max(2.0 * float(np.median(before)), float(np.percentile(before, 99)))
    after = times >= failure.restarted
    t, l = times[after], lat[after]
    if not len(t):
        return float("nan")
    bins = np.floor((t - failure.restarted) / bin_s).astype(np.int64)
    for b in np.unique(bins):
        if float(np.median(l[bins == b])) <= normal:
            return float(failure.restarted + (b + 1) * bin_s - failure.detected)
    return float("nan")


def latency_timeline(times: np.ndarray, lat: np.ndarray, bin_s: float = 0.02) -> list[tuple[float, float, float]]:
    if not len(times):
        return []
    bins = np.floor(times / bin_s).astype(np.int64)
    order = np.argsort(bins, kind="stable")
    bins, lat = bins[order], lat[order]
    cuts = np.flatnonzero(np.diff(bins)) + 1
    return [(float(b[0] * bin_s), float(np.percentile(l, 50) * 1e3), float(np.percentile(l, 99) * 1e3))
            for b, l in zip(np.split(bins, cuts), np.split(lat, cuts))]


def build_engine(cfg: RunConfig, protocol: Any = None) -> Engine:
    """The engine of ``cfg`` (``protocol``: another protocol class than ``cfg.protocol``'s, e.g. a
    variant under test)."""
    cfg.validate()
    q = QUERIES[cfg.query]
    flow = q.build(cfg.workers, seed=cfg.seed, **cfg.params)
    flow.inputs = q.generate(cfg.rate, cfg.duration, cfg.workers, cfg.seed, cfg.hot, **cfg.params)
    flow.validate()
    proto = protocol or PROTOCOLS[cfg.protocol]
    clocks = {"clocks": cfg.clocks, "clock_skew": cfg.skew} if proto.has_clocks else {}
    return Engine(flow, cfg.workers, lambda e: proto(e, cfg.interval, cfg.seed, **clocks), cfg.costs, cfg.failure_plan(),
                  cfg.seed, cfg.drain_limit, cfg.trace)


def run(cfg: RunConfig, protocol: Any = None) -> RunResult:
    """Run ``cfg`` and measure it (``protocol`` as in :func:`build_engine`)."""
    engine = build_engine(cfg, protocol)
    engine.run()
    proto = engine.protocol
    proto.finish()
    times = np.asarray(engine.sink_times)
    lat = np.asarray(engine.sink_latency)
    outputs = engine.outputs()
    total = engine.bytes_data + engine.bytes_protocol
    fails = [FailureResult(f.time, f.worker, f.restarted - f.detected, _recovery_seconds(times, lat, f, cfg.interval / 5),
                           f.rolled_back, f.replayed_messages, f.replayed_records) for f in engine.failures]
    return RunResult(
        query=cfg.query, protocol=cfg.protocol, workers=cfg.workers, interval=cfg.interval, rate=cfg.rate,
        duration=cfg.duration, hot=cfg.hot, seed=cfg.seed, clocks=cfg.clocks, clock_skew=cfg.skew,
        ingested=engine.ingested,
        throughput=engine.ingested / max(engine.end_time, cfg.duration),
        drained=engine.drained, drain_time=engine.end_time - engine.input_end,
        outputs=len(outputs), p50_ms=_p(lat, 50), p99_ms=_p(lat, 99),
        checkpoints=len(proto.taken), forced=getattr(proto, "forced", 0),
        avg_checkpoint_ms=float(np.mean(proto.checkpoint_seconds) * 1e3) if proto.checkpoint_seconds else float("nan"),
        invalid=proto.invalid, judged=proto.judged,
        invalid_pct=100.0 * proto.invalid / proto.judged if proto.judged else 0.0,
        discarded=getattr(proto, "discarded", 0),
        bytes_data=engine.bytes_data, bytes_protocol=engine.bytes_protocol,
        protocol_share=engine.bytes_protocol / total if total else 0.0,
        overhead_ratio=total / engine.bytes_data if engine.bytes_data else 1.0,
        messages=engine.messages, duplicates=engine.duplicates,
        cpu_max=max(engine.cpu_used) / max(engine.end_time, 1e-9),
        failures=fails,
        timeline=latency_timeline(times, lat),
        result=canonical(cfg.query, outputs),
        traces=engine.traces,
    )
