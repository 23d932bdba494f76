"""The autoscaling policies of the thesis (chapter 4, section 4.4) as pure deciders.

Each policy maps the metrics of one monitoring window (:class:`WindowMetrics`) and the current
number of workers to the number of workers it wants (``recommend``); :class:`Scaler` wraps a
policy with what every policy shares in the thesis's evaluation: the ``[min, max]`` range and a
cooldown after every scaling action (5 minutes in section 4.6.1). The thesis's parameters are
the defaults; every one is a keyword argument.

- :class:`Dhalion` (4.4.1): *underprovisioned* when the source is backpressured, which for a
  source means its lag grows (the thesis's Kafka adaptation): scale up by equation 4.2,
  ``1 + pendingRecordsRate / consumedRecordsRate`` (at most 10x, as in the thesis's code);
  *overprovisioned* when nothing is backpressured and the input queue is almost empty: scale
  down by the scale-down factor 0.2 (``floor(p * (1 - 0.2))``). One step at a time.
- :class:`DhalionStage` (``dhalion-stage``): the thesis's Dhalion as it acts on a query of
  several operators: "Dhalion only scales a single operator in each scaling action" (4.6.5).
  In Spark the stages of a micro-batch share the executors, so a stage's parallelism is its
  share of the pool's busy time (its useful time over all stages', times the workers: the sum
  over stages is the pool, the thesis's "sum of the operators' parallelism"); a scale-up
  multiplies the parallelism of one stage, the root of the backpressure (the one with the
  most useful time), by equation 4.2's factor, so the pool grows by that stage's share only.
  The scale-down is the same as :class:`Dhalion`'s (every operator whose input is almost
  empty, by the factor). On a query of one stage (Spark fuses a narrow chain such as Map's
  source, map and sink into one) the two are the same policy.
- :class:`DS2` (4.4.2): equation 4.3 over the query's stages in topological order: the target
  input rate of a source stage is the rate the source offers; each stage's optimal parallelism
  is its target input rate over its true processing rate, and its target output rate (target
  input times its selectivity) feeds the stages downstream. Workers = the sum of the stages'
  optimal parallelisms (the thesis counts workers as the sum of the operators' parallelisms;
  in Spark the stages of a micro-batch share the executors one after another, so the core
  seconds per second they need add up the same way) times ``1 + overprovisioning`` (0.2).
- :class:`HPACPU` (4.4.3): equation 4.4 on the average CPU utilisation, target 70%, with
  Kubernetes' tolerance (0.1: no change while the ratio is within 10% of 1) and a 5-minute
  stabilisation window that keeps the highest recommendation when scaling down.
- :class:`HPAVarga` (4.4.4): HPA on two metrics, utilisation (equation 4.5, target 70%) and
  relative lag change rate (equation 4.6, target 1.0), taking the larger proposal; the lag
  metric is ignored while the lag is under ``lag_threshold`` so it can scale down.
- Baselines a Spark user has today: :class:`BatchInterval`, the rule of Spark's DStreams
  allocator that SPARK-24815 proposed for Structured Streaming (batch duration over trigger
  interval >= 0.9: add ``max(round(ratio), 1)`` executors; <= 0.3: remove one), and
  :class:`SparkDynamicAllocation`, which decides nothing: Spark's own dynamic allocation does
  (configured with :func:`driftjoin.control.autoscale.dynamic_allocation_conf`).

"Almost no lag" in a micro-batch engine: the source always holds the records that arrived
while the current batch runs, about one batch duration's worth, so a queue counts as almost
empty when its lag in seconds of input is at most ``max(lag_threshold, batch duration +
trigger interval)``.

Sizing (:class:`Scaler`, ``sizing``): the thesis's policies count workers as if every worker
ran one operator instance all the time (Flink's slots). A Spark stage of ``P`` tasks (the state
partitions) on ``k`` executors of one core runs in ``ceil(P / k)`` *waves*, so ``k`` executors
do the work of ``P / ceil(P / k)``: 51 executors over 70 partitions run two waves, the
throughput of 35. Every policy's estimate is blind to this (DS2's equation 4.3 divides a rate
by a rate per busy task; HPA scales the count it has), so a policy asks for 51, gets 35's
throughput and, since its own numbers say 51 suffice, never asks again. ``sizing="thesis"``
acts on the policy's count as the thesis does; ``sizing="waves"`` acts on the fewest executors
that give at least that count's throughput (:func:`wave_efficient`), which is always one of the
counts ``ceil(P / w)`` (every wave full but the last).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

from driftjoin.control.autoscale.metrics import StageMetrics, WindowMetrics


def _unit_interval(name: str, value: float, *, closed_low: bool = False) -> None:
    ok = (0.0 <= value <= 1.0) if closed_low else (0.0 < value <= 1.0)
    if not ok or math.isnan(value):
        raise ValueError(f"{name}={value!r} must be in {'[0, 1]' if closed_low else '(0, 1]'}")


def _non_negative(name: str, value: float) -> None:
    if not (value >= 0) or math.isinf(value):
        raise ValueError(f"{name}={value!r} must be a finite number >= 0")


def queue_almost_empty(m: WindowMetrics, lag_threshold: float) -> bool:
    """At most about one micro-batch of input is waiting (see the module docstring)."""
    allowed = max(lag_threshold, (0.0 if math.isnan(m.batch_duration) else m.batch_duration) + m.trigger_interval)
    return m.lag_seconds <= allowed


def effective_workers(workers: int, partitions: int) -> float:
    """The task slots' worth of throughput ``workers`` executors of one core give a stage of
    ``partitions`` equal tasks: ``partitions / ceil(partitions / workers)`` (its waves).

    >>> effective_workers(51, 70), effective_workers(35, 70), effective_workers(70, 70)
    (35.0, 35.0, 70.0)
    """
    if workers < 1 or partitions < 1:
        raise ValueError(f"workers={workers!r} and partitions={partitions!r} must be >= 1")
    return partitions / math.ceil(partitions / workers)


def wave_efficient(workers: int, partitions: int) -> int:
    """The fewest executors whose :func:`effective_workers` over ``partitions`` tasks is at least
    ``workers`` (at most ``partitions``: more executors than tasks add nothing).

    With ``w = floor(P / workers)`` waves the answer is ``ceil(P / w)``: fewer executors need a
    wave more and give ``P / (w + 1) < workers``.

    >>> [wave_efficient(n, 70) for n in (1, 17, 18, 23, 24, 35, 36, 51, 80)]
    [1, 18, 24, 24, 35, 35, 70, 70, 70]
    >>> [wave_efficient(n, 10) for n in range(1, 11)]
    [1, 2, 4, 5, 5, 10, 10, 10, 10, 10]
    """
    if partitions < 1:
        raise ValueError(f"partitions={partitions!r} must be >= 1")
    if workers >= partitions:
        return partitions
    if workers <= 1:
        return 1
    return math.ceil(partitions / (partitions // workers))


SIZINGS = ("thesis", "waves")


class Policy:
    """A policy: metrics of a monitoring window and the current workers in, workers wanted out.

    ``recommend`` returns ``None`` when the window gives it nothing to go on (no input, a
    missing metric); the :class:`Scaler` then keeps the current count. ``external`` policies
    are carried out by Spark itself and recommend nothing.
    """

    name: ClassVar[str] = ""
    external: ClassVar[bool] = False

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        raise NotImplementedError


@dataclass
class Dhalion(Policy):
    """Dhalion's scaling policy with the thesis's source adaptation (section 4.4.1)."""

    scale_down_factor: float = 0.2
    lag_rate_threshold: float = 0.05
    lag_threshold: float = 1.0
    max_scale_up: float = 10.0
    name: ClassVar[str] = "dhalion"

    def __post_init__(self) -> None:
        if not 0 < self.scale_down_factor < 1:
            raise ValueError(f"scale_down_factor={self.scale_down_factor!r} must be in (0, 1) (the thesis: 0.2)")
        _non_negative("lag_rate_threshold", self.lag_rate_threshold)
        _non_negative("lag_threshold", self.lag_threshold)
        if self.max_scale_up < 1:
            raise ValueError(f"max_scale_up={self.max_scale_up!r} must be >= 1")

    def backpressured(self, m: WindowMetrics) -> bool:
        """The source's lag grows by more than ``lag_rate_threshold`` of what is consumed."""
        consumed = max(m.processed_rate, 1e-9)
        return m.lag_change_rate / consumed > self.lag_rate_threshold

    def scale_up_factor(self, m: WindowMetrics) -> float:
        """Equation 4.2 as a multiplier: ``1 + pendingRecordsRate / consumedRecordsRate``."""
        if m.processed_rate <= 0:
            return self.max_scale_up
        return min(self.max_scale_up, max(1.0, 1.0 + m.lag_change_rate / m.processed_rate))

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        if self.backpressured(m):
            return math.ceil(current * self.scale_up_factor(m))
        if queue_almost_empty(m, self.lag_threshold):
            return max(1, math.floor(current * (1.0 - self.scale_down_factor)))
        return current


@dataclass
class DhalionStage(Dhalion):
    """The thesis's Dhalion: a scale-up changes one stage (operator) only (see the module docstring).

    >>> from driftjoin.control.autoscale.metrics import StageMetrics, WindowMetrics
    >>> st = (StageMetrics("scan", (), 10, 1e5, 1e5, 10.0), StageMetrics("state", ("scan",), 10, 1e5, 0, 30.0))
    >>> m = WindowMetrics(time=30, duration=30, workers=20, input_rate=4000, processed_rate=2000, lag=6e4,
    ...                   lag_change_rate=2000, stages=st)
    >>> Dhalion().recommend(m, 20), DhalionStage().recommend(m, 20)     # 20 x 2; 20 + 15 x (2 - 1)
    (40, 35)
    """

    name: ClassVar[str] = "dhalion-stage"

    @staticmethod
    def root_share(m: WindowMetrics) -> float:
        """The root of the backpressure's share of the pool: the busiest stage's useful time over
        every stage's (1 without stage metrics: the query is one operator)."""
        useful = [s.useful_time for s in m.stages if s.useful_time > 0]
        return max(useful) / sum(useful) if useful else 1.0

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        if self.backpressured(m):
            grow = current * self.root_share(m) * (self.scale_up_factor(m) - 1.0)
            return current + max(1, math.ceil(grow - 1e-9))
        return super().recommend(m, current)


@dataclass
class DS2(Policy):
    """DS2 (section 4.4.2): equation 4.3 over the stages, with over-provisioning."""

    overprovisioning: float = 0.2
    name: ClassVar[str] = "ds2"

    def __post_init__(self) -> None:
        _non_negative("overprovisioning", self.overprovisioning)

    @staticmethod
    def optimal_parallelism(stages: tuple[StageMetrics, ...], source_rate: float) -> dict[str, float]:
        """Equation 4.3 per stage, propagating target rates downstream (stages in topological
        order; a stage without upstream stages reads the source at ``source_rate``)."""
        target_out: dict[str, float] = {}
        optimal: dict[str, float] = {}
        for s in stages:
            target_in = source_rate if not s.upstream else sum(target_out.get(u, 0.0) for u in s.upstream)
            tpr = s.true_processing_rate
            op = 0.0 if target_in <= 0 or math.isinf(tpr) or tpr <= 0 else target_in / tpr  # no records: no estimate
            optimal[s.name] = min(op, float(s.tasks)) if s.tasks > 0 else op
            target_out[s.name] = target_in * s.selectivity
        return optimal

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        if not m.stages or m.processed_rate <= 0:
            return None
        total = sum(self.optimal_parallelism(m.stages, m.input_rate).values())
        return max(1, math.ceil(total * (1.0 + self.overprovisioning) - 1e-9))


@dataclass
class _HPA(Policy):
    """Shared by the two HPA variants: tolerance and the scale-down stabilisation window."""

    stabilisation_window: float = 300.0
    tolerance: float = 0.1
    _history: deque = field(default_factory=deque, repr=False)

    def __post_init__(self) -> None:
        _non_negative("stabilisation_window", self.stabilisation_window)
        _non_negative("tolerance", self.tolerance)

    def proposal(self, current: int, value: float, target: float) -> int:
        """Equation 4.4: ``ceil(current * value / target)``, unchanged within the tolerance."""
        ratio = min(max(value / target, 0.0), 1e6)  # a vanishing input rate must not overflow; Scaler clamps
        if abs(ratio - 1.0) <= self.tolerance:
            return current
        return max(1, math.ceil(current * ratio - 1e-9))

    def stabilised(self, now: float, current: int, recommendation: int) -> int:
        """Scale up at once; scale down only to the highest recommendation of the window."""
        self._history.append((now, recommendation))
        while self._history and self._history[0][0] < now - self.stabilisation_window:
            self._history.popleft()
        if recommendation >= current:
            return recommendation
        return min(current, max(r for _, r in self._history))


@dataclass
class HPACPU(_HPA):
    """HPA on the average CPU utilisation (section 4.4.3)."""

    target: float = 0.7
    name: ClassVar[str] = "hpa-cpu"

    def __post_init__(self) -> None:
        super().__post_init__()
        _unit_interval("target", self.target)

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        if math.isnan(m.cpu_utilisation):
            return None
        return self.stabilised(m.time, current, self.proposal(current, m.cpu_utilisation, self.target))


@dataclass
class HPAVarga(_HPA):
    """HPA on utilisation and relative lag change rate (section 4.4.4)."""

    target: float = 0.7
    lag_target: float = 1.0
    lag_threshold: float = 1.0
    name: ClassVar[str] = "hpa-varga"

    def __post_init__(self) -> None:
        super().__post_init__()
        _unit_interval("target", self.target)
        if not self.lag_target > 0:
            raise ValueError(f"lag_target={self.lag_target!r} must be > 0 (Varga: 1.0)")
        _non_negative("lag_threshold", self.lag_threshold)

    @staticmethod
    def relative_lag_change_rate(m: WindowMetrics) -> float:
        """Equation 4.6: ``1 + deriv(total lag) / input throughput``."""
        return 1.0 + m.lag_change_rate / m.input_rate if m.input_rate > 0 else 1.0

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        if math.isnan(m.idle_per_second):
            return None
        proposals = [self.proposal(current, m.utilisation, self.target)]
        if not queue_almost_empty(m, self.lag_threshold):
            proposals.append(self.proposal(current, self.relative_lag_change_rate(m), self.lag_target))
        return self.stabilised(m.time, current, max(proposals))


@dataclass
class BatchInterval(Policy):
    """The DStreams allocator's rule, proposed for Structured Streaming in SPARK-24815."""

    scaling_up_ratio: float = 0.9
    scaling_down_ratio: float = 0.3
    name: ClassVar[str] = "batch-interval"

    def __post_init__(self) -> None:
        if not 0 < self.scaling_down_ratio < self.scaling_up_ratio:
            raise ValueError(f"need 0 < scaling_down_ratio ({self.scaling_down_ratio}) < scaling_up_ratio "
                             f"({self.scaling_up_ratio}); Spark's defaults are 0.3 and 0.9")

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        if m.trigger_interval <= 0 or math.isnan(m.batch_duration) or m.batches == 0:
            return None
        ratio = m.batch_duration / m.trigger_interval
        if ratio >= self.scaling_up_ratio:
            return current + max(math.floor(ratio + 0.5), 1)  # Scala's math.round
        if ratio <= self.scaling_down_ratio:
            return current - 1
        return current


@dataclass
class SparkDynamicAllocation(Policy):
    """Spark's own dynamic allocation: Spark decides; the controller only measures."""

    name: ClassVar[str] = "spark-dynamic-allocation"
    external: ClassVar[bool] = True

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        return None


POLICIES: dict[str, type[Policy]] = {p.name: p for p in (Dhalion, DhalionStage, DS2, HPACPU, HPAVarga, BatchInterval,
                                                         SparkDynamicAllocation)}


def make_policy(name: str, **options: float) -> Policy:
    """The policy called ``name`` with ``options`` (its keyword settings); a typo fails here."""
    if isinstance(name, Policy):
        return name
    cls = POLICIES.get(name)
    if cls is None:
        raise ValueError(f"autoscaling policy {name!r} does not exist: choose one of {', '.join(POLICIES)}")
    known = {f for f in getattr(cls, "__dataclass_fields__", {}) if not f.startswith("_")}
    unknown = set(options) - known
    if unknown:
        raise ValueError(f"policy {name!r} has no setting {', '.join(sorted(unknown))}; its settings: {', '.join(sorted(known)) or 'none'}")
    return cls(**options)


@dataclass(frozen=True)
class Action:
    """A scaling action: at ``time``, from ``before`` to ``after`` workers, and why."""

    time: float
    before: int
    after: int
    policy: str
    recommendation: int


@dataclass
class Scaler:
    """A policy inside the ``[min_workers, max_workers]`` range with a cooldown after each action.

    ``decide`` asks the policy every window (so windowed policies keep their history), sizes
    its recommendation (``sizing``, see the module docstring: ``"thesis"`` as the policy says,
    ``"waves"`` the fewest executors giving that throughput over ``partitions`` tasks), clamps
    it to the range and acts only when the count changes and the last action is at least
    ``cooldown`` seconds old. It returns the new worker count, or ``None``.

    >>> s = Scaler(DS2(), 1, 70, cooldown=0, sizing="waves", partitions=70)
    >>> s.size(51), Scaler(DS2(), 1, 70, cooldown=0).size(51)
    (70, 51)
    """

    policy: Policy
    min_workers: int = 1
    max_workers: int = 70
    cooldown: float = 300.0
    sizing: str = "thesis"
    partitions: int | None = None
    actions: list[Action] = field(default_factory=list)
    _last_action: float = -math.inf

    def __post_init__(self) -> None:
        for name in ("min_workers", "max_workers"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name}={v!r} must be an int >= 1")
        if self.min_workers > self.max_workers:
            raise ValueError(f"min_workers={self.min_workers} is above max_workers={self.max_workers}: lower min_workers or raise max_workers")
        _non_negative("cooldown", self.cooldown)
        if self.sizing not in SIZINGS:
            raise ValueError(f"sizing={self.sizing!r}: choose 'thesis' (the policy's count) or 'waves' (the fewest executors "
                             "giving that count's throughput over the state partitions)")
        if self.sizing == "waves" and (isinstance(self.partitions, bool) or not isinstance(self.partitions, int)
                                       or self.partitions < 1):
            raise ValueError(f"sizing='waves' needs partitions= (the state partitions, an int >= 1), got {self.partitions!r}")

    def clamp(self, workers: int) -> int:
        return min(self.max_workers, max(self.min_workers, workers))

    def size(self, recommendation: int) -> int:
        """The worker count to act on for a policy's ``recommendation`` (before the range)."""
        if self.sizing == "waves":
            return wave_efficient(recommendation, self.partitions)
        return recommendation

    def in_cooldown(self, now: float) -> bool:
        return now - self._last_action < self.cooldown

    def decide(self, m: WindowMetrics, current: int) -> int | None:
        recommendation = self.policy.recommend(m, current)
        if recommendation is None or self.in_cooldown(m.time):
            return None
        target = self.clamp(self.size(recommendation))
        if target == current:
            return None
        self._last_action = m.time
        self.actions.append(Action(m.time, current, target, self.policy.name, recommendation))
        return target
