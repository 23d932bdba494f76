"""What an autoscaling policy sees: the metrics of one monitoring window (thesis section 4.5.1).

Pure data, no Spark: :mod:`driftjoin.control.autoscale.collector` fills it from a running
Structured Streaming query, :mod:`driftjoin.control.autoscale.simulator` from a simulated one,
and the tests craft it by hand.

Vocabulary (thesis 4.2.2 and DS2):

- *workers*: Spark executors of one core each (the thesis's task managers of 1 CPU).
- *lag*: records the source has offered that no micro-batch has taken yet (offered offsets
  minus processed offsets). A micro-batch engine always holds about one batch of input, so
  "no lag" means "at most about one batch" (:attr:`WindowMetrics.lag_seconds`).
- *useful time* of a stage: the time its tasks spent deserialising and processing records
  (task run time minus the time spent waiting for shuffle blocks), summed over its tasks.
- *true processing rate* of a stage: records in per second of useful time, i.e. what one
  task slot (one worker) processes per second when it never waits; *true output rate*:
  records out per second of useful time.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class StageMetrics:
    """One stage of the query's micro-batches (Spark's stage = the thesis's operator)."""

    name: str
    upstream: tuple[str, ...]
    tasks: int
    records_in: float
    records_out: float
    useful_time: float

    @property
    def true_processing_rate(self) -> float:
        """Records per second of useful time (DS2); ``inf`` when the stage did no work."""
        return self.records_in / self.useful_time if self.useful_time > 0 else math.inf

    @property
    def true_output_rate(self) -> float:
        return self.records_out / self.useful_time if self.useful_time > 0 else math.inf

    @property
    def selectivity(self) -> float:
        """Records out per record in (1 when nothing came in)."""
        return self.records_out / self.records_in if self.records_in > 0 else 1.0


@dataclass(frozen=True)
class WindowMetrics:
    """One monitoring window of a query, ending at ``time`` and lasting ``duration`` seconds.

    Rates are records per second over the window. ``cpu_utilisation`` and ``idle_per_second``
    average over the executors (each in [0, 1]); ``lag_change_rate`` is the derivative of the
    lag over the window (records per second, positive when the lag grows). ``latency_p50`` /
    ``latency_p95``: the time records waited in the input queue (thesis 4.5.1), in seconds, over
    the records the window's batches took and those still waiting at its end (their wait so far);
    ``operators``: per stateful operator its update and commit time (ms) and state rows.
    """

    time: float
    duration: float
    workers: int
    input_rate: float
    processed_rate: float
    lag: float
    lag_change_rate: float
    stages: tuple[StageMetrics, ...] = ()
    cpu_utilisation: float = math.nan
    idle_per_second: float = math.nan
    batch_duration: float = math.nan
    trigger_interval: float = 0.0
    batches: int = 0
    per_executor: dict[str, dict[str, float]] = field(default_factory=dict)
    latency_p50: float = math.nan
    latency_p95: float = math.nan
    operators: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def lag_seconds(self) -> float:
        """The lag in seconds of input (lag / input rate): how far the query is behind."""
        if self.lag <= 0:
            return 0.0
        return self.lag / self.input_rate if self.input_rate > 0 else math.inf

    @property
    def utilisation(self) -> float:
        """Varga's utilisation (equation 4.5): ``1 - avg(idle time per second)``."""
        return 1.0 - self.idle_per_second
