"""One control plane that balances and scales together (thesis 5.3.4, its future work).

Two rules tie the similarity join's workset balancer to the autoscaler:

1. **Balance before scaling up.** When the autoscaler wants more workers while the load is
   imbalanced over the executors that are there (relative degree of imbalance, Definition 11,
   above ``di_threshold``), the controller rebalances instead and lets the next window show
   whether more workers are still needed. Adding executors does not shorten a micro-batch
   whose time is one overloaded task.
2. **Rebalance when the executor count changes.** Spark hands a stage's tasks to free cores
   in partition order, so with ``k`` executors the state partitions ``0 .. k-1`` start first.
   The balancer then spreads the worksets over ``k`` bins (the load of partitions ``i`` and
   ``i + k`` ... lands on the same core) and moves each bin's worksets to partition ``bin``:
   each executor gets one task that carries about ``1/k`` of the work; the other tasks are
   empty and cost only their ~0.1 s.

:class:`WorksetBalancerModel` is the same plane inside the simulator: worksets with loads that
change over time (skew that moves), the balancer of :mod:`driftjoin.s3j.balancer` deciding on
them. :func:`attach_joint` wires a live :class:`~driftjoin.spark.similarity.control.BalanceController`
to a live :class:`~driftjoin.control.autoscale.AutoscaleController`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from driftjoin.control.autoscale.metrics import WindowMetrics
from driftjoin.control.autoscale.policies import Scaler
from driftjoin.s3j.balancer import BalancerStats, degree_of_imbalance, greedy_rebalance, s3j_rebalance

log = logging.getLogger("driftjoin.joint")


def relative_di(loads: np.ndarray) -> float:
    total = float(np.sum(loads))
    return degree_of_imbalance([float(x) for x in loads]) / total if total > 0 else 0.0


def bin_loads(partition_loads: np.ndarray, bins: int) -> np.ndarray:
    """Load per executor when partition ``i`` runs on core ``i mod bins`` (Spark's order)."""
    out = np.zeros(bins)
    np.add.at(out, np.arange(len(partition_loads)) % bins, partition_loads)
    return out


@dataclass
class WorksetBalancerModel:
    """Balancing inside the simulator: worksets, their placement, and the two joint rules.

    ``workset_loads(t)`` gives every workset's share of the load at time ``t``; a workset starts
    on partition ``id mod partitions``. ``mode``: ``"joint"`` (both rules, bins = executors),
    ``"balance"`` (the balancer alone, over all partitions, as the S3J controller runs today),
    ``"none"`` (placement stays: autoscaling alone).
    """

    workset_loads: Callable[[float], np.ndarray]
    partitions: int
    mode: str = "joint"
    di_threshold: float = 0.1
    algorithm: str = "s3j"
    actions: int = 0
    assignment: np.ndarray | None = None
    _bins: int = 0
    _log: list[tuple[float, int, float]] = field(default_factory=list)

    def _placement(self, n: int) -> np.ndarray:
        if self.assignment is None or len(self.assignment) != n:
            self.assignment = np.arange(n) % self.partitions
        return self.assignment

    def shares(self, t: float, base: np.ndarray, k: int) -> np.ndarray:
        w = self.workset_loads(t)
        out = np.zeros(self.partitions)
        np.add.at(out, self._placement(len(w)), w)
        return out / max(out.sum(), 1e-12)

    def rebalance(self, t: float, k: int) -> None:
        bins = self.partitions if self.mode == "balance" else max(1, min(k, self.partitions))
        if bins == 1:  # one executor runs every partition: a placement changes nothing
            return
        w = self.workset_loads(t)
        place = self._placement(len(w))
        stats = BalancerStats.of(bins, [(j, float(w[j]), 0.0, int(place[j] % bins)) for j in range(len(w))])
        result = s3j_rebalance(stats, 0.0) if self.algorithm == "s3j" else greedy_rebalance(stats)
        new = np.array([result.assignment[j] for j in range(len(w))])
        if self.mode == "joint":
            new = new % bins        # bin b's worksets go to partition b, which starts first
        moved = int(np.sum(new != place))
        if moved:
            self.assignment = new
            self.actions += 1
            self._log.append((t, bins, relative_di(bin_loads(self.shares(t, w, k), bins))))

    def imbalance(self, t: float, k: int) -> float:
        bins = self.partitions if self.mode == "balance" else max(1, min(k, self.partitions))
        return relative_di(bin_loads(self.shares(t, self.workset_loads(t), k), bins))

    def observe(self, m: WindowMetrics, shares: np.ndarray, k: int) -> None:
        """Rule 2 (and the balancer's own trigger): rebalance on a new executor count or DI."""
        if self.mode == "none":
            return
        if self.mode == "joint" and k != self._bins:
            self._bins = k
            self.rebalance(m.time, k)
        elif self.imbalance(m.time, k) > self.di_threshold:
            self.rebalance(m.time, k)

    def wants_balance_instead(self, m: WindowMetrics, k: int, scaler: Scaler) -> bool:
        """Rule 1: a scale-up while imbalanced becomes a balancing round (joint mode only)."""
        if self.mode != "joint" or scaler.in_cooldown(m.time):
            return False
        rec = scaler.policy.recommend(m, k)
        if rec is None or rec <= k or self.imbalance(m.time, k) <= self.di_threshold:
            return False
        self.rebalance(m.time, k)
        return True


def moving_hotspot(worksets: int, hot: int, hot_share: float, period: float, seed: int = 0) -> Callable[[float], np.ndarray]:
    """Workset loads with a skew that moves: ``hot`` worksets carry ``hot_share`` of the load
    and a different, seeded set of worksets becomes hot every ``period`` seconds."""
    cache: dict[int, np.ndarray] = {}

    def loads(t: float) -> np.ndarray:
        epoch = int(t // period)
        if epoch not in cache:
            w = np.full(worksets, (1 - hot_share) / (worksets - hot))
            w[np.random.default_rng([seed, epoch]).choice(worksets, hot, replace=False)] = hot_share / hot
            cache[epoch] = w
        return cache[epoch]

    return loads


def attach_joint(autoscaler, balancer) -> None:
    """Live: tie a running :class:`AutoscaleController` to the join's ``BalanceController``.

    The balancer balances over the executors that are there from the start (as the simulator's
    joint model does: bins = executors; over all state partitions while one executor runs them
    all, its rounds only moved worksets, measured live: 7 rounds of 36-721 moves before the first
    scaling action), learns the executor count after every scaling action (rule 2: it balances
    over that many bins at its next round) and vetoes a scale-up while its workers are imbalanced
    (rule 1: it balances first).
    """
    def balance_over(executors: int) -> None:
        balancer.bins = min(max(1, int(executors)), balancer.parallelism)

    workers = getattr(autoscaler, "workers", None)
    if workers is not None:
        balance_over(workers())

    def before_scale(m: WindowMetrics, current: int, target: int) -> bool:
        balance_over(current)
        if target > current and balancer.imbalanced():
            log.info("joint: load imbalanced over %d executors: balancing before scaling up", current)
            balancer.force_next = True
            return False
        return True

    def after_scale(target: int) -> None:
        balance_over(target)
        balancer.force_next = True

    autoscaler.before_scale = before_scale
    autoscaler.after_scale = after_scale
