"""The driver-side control plane: statistics in, decisions out.

:class:`BalanceController` runs on the driver after every micro-batch (:func:`attach`) and reads the per-batch statistics the operators write to
``metrics_dir`` over a monitoring window, computes per workset its load and state size and per
worker its load and latency, decides with the trigger rules whether to rebalance (relative
degree of imbalance, or one worker's p99 latency more than ``latency_spread`` away from the
others), at most once per monitoring window, and publishes a new assignment that the formulation
operators adopt at their next micro-batch (:mod:`driftjoin.s3j.routing` keeps that exact).

Policies: ``"s3j"`` (Algorithm 1 of the paper, :func:`driftjoin.s3j.balancer.s3j_rebalance`),
``"greedy"`` (longest-processing-time first, a second opinion that ignores migration cost) and
``"none"``. ``split=True`` additionally splits irremovable worksets heavier than the average
worker load into part-pair sites (beyond the paper) and lets the next rounds balance the sites.
``at="window"`` rebalances only when a new window starts (the paper's experiment), ``at="any"``
whenever the trigger fires.

Load of a workset (Definition 5): the number of similarity comparisons it performed in the
monitoring window (``load="comparisons"``), or the section 7.7 cost model from its member counts
(``load="cost_model"``: inner x (outlier + outer) + outlier x (outlier + outer)). Size: its
members times the bytes of a member (the vector plus about 40 bytes of id, time and flags).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pyarrow import fs as pafs

from driftjoin.s3j.balancer import (
    BalancerStats,
    Move,
    Rebalance,
    greedy_rebalance,
    plan_splits,
    s3j_rebalance,
    should_rebalance,
)
from driftjoin.s3j.ids import WORKSET_BITS
from driftjoin.s3j.routing import MAX_PARTS, base_gid, site_gid
from driftjoin.spark.runtime.decisions import publish_blob
from driftjoin.spark.runtime.files import filesystem
from driftjoin.spark.runtime.hub import register
from driftjoin.spark.runtime.queries import AUTO, METRICS_IN_CHECKPOINT, STARTED
from driftjoin.spark.runtime.settings import SettingError, choice
from driftjoin.spark.runtime.stats import histogram_quantile, read_stats
from driftjoin.spark.similarity.assignment import read_assignment, write_assignment
from driftjoin.spark.similarity.settings import BALANCE, BALANCE_OPTIONS

#: The controller of each running balanced join, by its ``metrics_dir`` (a default directory:
#: by the value ``similarity_join`` chose, and once known by its place inside the checkpoint).
CONTROLLERS: dict[str, "BalanceController"] = {}


@dataclass
class Decision:
    """One balancing round, as recorded in ``<metrics_dir>/control/decisions.jsonl``."""

    time: float
    version: int
    policy: str
    di_before: float
    di_after: float
    loads_before: list[float]
    loads_after: list[float]
    moves: int
    bytes_moved: float
    splits: dict[int, int]
    #: executors balanced over (``parallelism`` when the balancer spreads over all partitions)
    bins: int = 0
    #: asked for by the joint plane (a scaling action, or a scale-up it vetoed), not by the DI
    forced: bool = False


@dataclass
class BalanceController:
    metrics_dir: str
    parallelism: int
    dim: int
    policy: str = "s3j"
    monitoring_window: float = 10.0
    di_threshold: float = 0.1
    latency_spread: float = 0.5
    migration_factor: float = 0.0
    split: bool = False
    at: str = "any"
    load: str = "comparisons"
    decisions: list[Decision] = field(default_factory=list)
    #: set by the joint control plane (:mod:`driftjoin.control.joint`): balance over this many
    #: executors (bins of partitions ``i mod bins``, each bin's worksets on partition ``bin``)
    bins: int | None = None
    force_next: bool = False
    last_loads: list[float] = field(default_factory=list)
    _last: float = 0.0
    _last_window: int | None = None

    def __post_init__(self) -> None:
        # the settings' own checks (similarity_join has run them already: here for direct use)
        choice("balance", self.policy, BALANCE, what="the workset balancer's policy")
        for name, check in BALANCE_OPTIONS.items():
            check(name, getattr(self, name))
        self.version, self.assignment, self.splits = 0, {}, {}
        if not self.metrics_dir.startswith(AUTO):
            self._load_assignment()

    def _load_assignment(self) -> None:
        """Continue from the newest published assignment (a restarted query keeps its versions)."""
        current = read_assignment(self.metrics_dir)
        if current:
            self.version, self.assignment, self.splits = current

    def bound(self) -> bool:
        """Whether the metrics directory is known; a default one (inside the checkpoint) is found
        once the query's tasks have marked it, after its first micro-batch."""
        if not self.metrics_dir.startswith(AUTO):
            return True
        token = self.metrics_dir[len(AUTO):]
        for checkpoint in list(STARTED.values()):
            candidate = f"{checkpoint.rstrip('/')}/{METRICS_IN_CHECKPOINT}"
            fs, base = filesystem(candidate)
            if fs.get_file_info(f"{base}/_plans/{token}").type == pafs.FileType.File:
                CONTROLLERS[candidate] = self
                self.metrics_dir = candidate
                self._load_assignment()
                return True
        return False

    def owner(self, gid: int) -> int:
        if gid in self.assignment:
            return self.assignment[gid]
        base = int(base_gid(gid))
        return self.assignment.get(base, base >> WORKSET_BITS)

    def _window_stats(self, since: float) -> tuple[dict[int, list[float]], list[float], list[float], int | None]:
        """Per workset [load, members]; per worker load and p99 latency; the newest window."""
        worksets: dict[int, list[float]] = {}
        hists: list[np.ndarray | None] = [None] * self.parallelism
        newest = None
        for s in read_stats(self.metrics_dir, "computation"):
            if s["windows"]:
                newest = max(newest or s["windows"][-1], s["windows"][-1])
            if s["time"] <= since:
                continue
            h = np.asarray(s["latency_hist"])
            w = s["worker"]
            hists[w] = h if hists[w] is None else hists[w] + h
            for g, (inner, outlier, outer, cmp_, _pairs) in s["worksets"].items():
                acc = worksets.setdefault(int(g), [0.0, 0.0, 0.0, 0.0, 0.0])
                for i, v in enumerate((cmp_, inner, outlier, outer)):
                    acc[i] += v
        stats = {g: self.workset_load(cmp_, inner, outlier, outer) for g, (cmp_, inner, outlier, outer, _) in worksets.items()}
        lat = [histogram_quantile(h, 0.99) if h is not None else math.nan for h in hists]
        return stats, self.worker_loads(stats), lat, newest

    def workset_load(self, comparisons: float, inner: float, outlier: float, outer: float) -> list[float]:
        """``[load, members]`` of a workset over a monitoring window."""
        load = comparisons if self.load == "comparisons" else inner * (outlier + outer) + outlier * (outlier + outer)
        return [float(load), float(inner + outlier + outer)]

    def worker_loads(self, stats: dict[int, list[float]]) -> list[float]:
        loads = [0.0] * self.parallelism
        for g, (load, _) in stats.items():
            loads[self.owner(g)] += load
        return loads

    def step(self, now: float | None = None) -> Decision | None:
        """Run one control round if a monitoring window has passed; returns what it did."""
        now = time.time() if now is None else now
        if self.policy == "none" or (now - self._last < self.monitoring_window and not self.force_next) or not self.bound():
            return None
        stats, loads, lat, newest = self._window_stats(self._last)
        return self.decide(stats, loads, lat, newest, now)

    def decide(self, stats: dict[int, list[float]], loads: list[float], lat: list[float], newest: int | None,
               now: float) -> Decision | None:
        """One balancing round from a monitoring window's statistics (also used without Spark).

        ``stats``: per workset ``[load, members]``; ``loads``/``lat``: per worker load and p99
        latency; ``newest``: the newest window seen (for ``at="window"``).
        """
        if not stats or self.policy == "none":
            return None
        self.last_loads = list(loads)
        forced, self.force_next = self.force_next, False
        bins = self.bins if self.bins and self.bins < self.parallelism else self.parallelism
        if self.bins == 1:
            # the joint plane's one executor runs every partition: any placement costs the same, a
            # move only costs (a one-worker join without the plane keeps its rounds as before)
            self._last = now
            return None
        if self.at == "window" and not forced:
            if newest == self._last_window:
                return None
            self._last_window = newest
        self._last = now
        finite = [x if not math.isnan(x) else 0.0 for x in lat]
        if bins < self.parallelism:
            loads, finite = self.bin_loads(loads), []
        if not forced and not should_rebalance(loads, finite, self.di_threshold, self.latency_spread):
            return None
        member_bytes = 8 * self.dim + 40
        rows = [(g, load, members * member_bytes, self.owner(g) % bins) for g, (load, members) in stats.items()]
        snapshot = BalancerStats.of(bins, rows)
        new_splits: dict[int, int] = {}
        if self.split:
            for plan in plan_splits(snapshot):
                g = int(plan.workset)
                if int(base_gid(g)) == g and g not in self.splits:
                    new_splits[g] = int(min(MAX_PARTS, max(2, plan.parts)))
        result: Rebalance = s3j_rebalance(snapshot, self.migration_factor) if self.policy == "s3j" else greedy_rebalance(snapshot)
        moves = list(result.moves)
        if bins < self.parallelism:
            # every bin's worksets go to partition ``bin`` (scheduled first), also those the round left in their bin
            moves += [Move(g, self.owner(g), self.owner(g) % bins, stats[g][0], 0.0)
                      for g in stats if self.owner(g) >= bins and result.assignment[g] == self.owner(g) % bins]
        for mv in moves:
            self.assignment[int(mv.workset)] = int(mv.target)
        for g, k in new_splits.items():
            self.splits[g] = k
            owner = self.owner(g)
            # spread the new sites over the workers, starting after the workset's owner
            for n, (i, j) in enumerate((i, j) for i in range(k) for j in range(i, k)):
                self.assignment[site_gid(g, i, j)] = (owner + n) % self.parallelism
        if not moves and not new_splits:
            return None
        self.version += 1
        write_assignment(self.metrics_dir, self.version, self.assignment, self.splits)
        decision = Decision(now, self.version, self.policy, result.di_before, result.di_after, list(result.loads_before),
                            list(result.loads_after), len(moves), float(result.migrated_bytes), new_splits, bins, forced)
        self.decisions.append(decision)
        self._log(decision)
        return decision

    def bin_loads(self, loads: list[float]) -> list[float]:
        """Worker loads folded onto ``bins`` executors (partition ``i`` on bin ``i mod bins``)."""
        out = [0.0] * self.bins
        for i, x in enumerate(loads):
            out[i % self.bins] += x
        return out

    def imbalanced(self) -> bool:
        """Whether the last window's loads, over the bins, exceed the DI threshold."""
        loads = self.bin_loads(self.last_loads) if self.bins and self.bins < self.parallelism else self.last_loads
        total = math.fsum(loads)
        return total > 0 and should_rebalance(loads, [], self.di_threshold, math.inf)

    def _log(self, d: Decision) -> None:
        publish_blob(self.metrics_dir, f"decisions/{d.version:012d}.json", json.dumps(d.__dict__, default=str).encode())


def attach_balancer(join: Any, plan: Any) -> None:
    """Attach the workset balancer of a join whose settings ask for one (``balance=``): it moves
    S3J worksets, on a stream (:class:`~driftjoin.spark.similarity.inputs.JoinInputs` refuses it on
    static inputs); its settings are the checked ``balance_options``."""
    s = join.settings
    if s.balance == "none":
        return
    if plan.algorithm != "s3j":
        raise SettingError("balance", "moves S3J worksets: it needs algorithm='s3j'", show_value=False)
    controller = BalanceController(plan.metrics_dir, plan.parallelism, plan.dim, policy=s.balance, **s.balance_options)
    CONTROLLERS[plan.metrics_dir] = controller
    attach(join.left.sparkSession, controller)


def attach(spark, controller: BalanceController) -> None:
    """Run ``controller.step()`` on the driver after every micro-batch of any query of the
    session (it reads its own directory's statistics); it replaces the controller of an earlier
    join on the same directory."""
    register(spark, f"{type(controller).__name__}:{controller.metrics_dir}", lambda _: controller.step())
