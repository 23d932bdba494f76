"""The joint control plane's two rules (balance before scaling up; rebalance over the executors
that are there after a scaling action), live hooks and simulator model, and the measurement
docs/autoscaling.md reports: on a skewed, moving workload the joint plane beats the autoscaler
alone (simulated)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from driftjoin.control.autoscale import Scaler, make_policy
from driftjoin.control.autoscale.metrics import WindowMetrics
from driftjoin.control.autoscale.simulator import SimConfig, Simulation
from driftjoin.spark.similarity.control import BalanceController
from driftjoin.control.joint import WorksetBalancerModel, attach_joint, bin_loads, moving_hotspot, relative_di
from driftjoin.generators.rates import RateSchedule


def _window(t: float = 100.0, **kw) -> WindowMetrics:
    base = dict(time=t, duration=10.0, workers=1, input_rate=1000.0, processed_rate=500.0, lag=5000.0,
                lag_change_rate=500.0, stages=(), cpu_utilisation=1.0, idle_per_second=0.0, batch_duration=4.0,
                trigger_interval=1.0, batches=2)
    return WindowMetrics(**(base | kw))


def test_live_hooks_balance_before_scaling_up_and_rebalance_after(tmp_path):
    balancer = BalanceController(str(tmp_path), parallelism=4, dim=2)
    autoscaler = SimpleNamespace(before_scale=None, after_scale=None)
    attach_joint(autoscaler, balancer)
    # partitions 0 and 2 run on the first of 2 executors: all the load is there
    balancer.last_loads = [5.0, 0.0, 5.0, 0.0]
    assert autoscaler.before_scale(_window(), 2, 3) is False        # vetoed: balance first
    assert balancer.bins == 2 and balancer.force_next
    balancer.force_next = False
    assert autoscaler.before_scale(_window(), 2, 1) is True         # a scale-down is never vetoed
    balancer.last_loads = [5.0, 5.0, 5.0, 5.0]
    assert autoscaler.before_scale(_window(), 2, 3) is True         # balanced: scale up
    autoscaler.after_scale(3)
    assert balancer.bins == 3 and balancer.force_next                # next round over 3 executors
    autoscaler.after_scale(9)
    assert balancer.bins == 4                                        # never more bins than partitions


def test_model_rebalances_on_a_new_executor_count_and_spreads_the_bins():
    loads = moving_hotspot(worksets=32, hot=4, hot_share=0.5, period=1e9, seed=3)
    model = WorksetBalancerModel(loads, partitions=8, mode="joint")
    before = model.imbalance(0.0, 2)
    model.observe(_window(0.0), model.shares(0.0, np.full(8, 1 / 8), 2), 2)
    assert model.actions == 1
    after = model.imbalance(0.0, 2)
    assert after < before and after <= 0.1
    # joint placement: every workset on a partition below the executor count (those start first)
    assert set(model.assignment) <= {0, 1}
    shares = model.shares(0.0, np.full(8, 1 / 8), 2)
    assert relative_di(bin_loads(shares, 2)) == after


def test_model_vetoes_a_scale_up_only_when_imbalanced_and_out_of_cooldown():
    skewed = WorksetBalancerModel(moving_hotspot(32, 4, 0.6, period=1e9, seed=1), partitions=8, mode="joint")
    scaler = Scaler(make_policy("dhalion"), 1, 8, cooldown=60)
    lagging = _window(100.0, workers=2)
    assert skewed.wants_balance_instead(lagging, 2, scaler)                     # imbalanced: balances
    assert skewed.actions == 1
    assert not skewed.wants_balance_instead(lagging, 2, scaler)                 # balanced now: scale up
    scaler._last_action = 90.0
    skewed.assignment = None
    assert not skewed.wants_balance_instead(lagging, 2, scaler)                 # inside the cooldown
    alone = WorksetBalancerModel(moving_hotspot(32, 4, 0.6, period=1e9, seed=1), partitions=8, mode="none")
    assert not alone.wants_balance_instead(lagging, 2, Scaler(make_policy("dhalion"), 1, 8, cooldown=60))


def test_joint_plane_beats_the_autoscaler_alone_on_a_moving_hot_spot():
    """The docs' claim at a small scale: p95 queue latency and workers, DS2, 8 partitions."""
    parts, seconds = 8, 1800.0
    cfg = SimConfig(partitions=parts, capacity=2000.0)
    sched = RateSchedule("cosine", low=0.05 * cfg.capacity * parts, high=0.6 * cfg.capacity * parts, duration=seconds)
    loads = moving_hotspot(worksets=8 * parts, hot=3, hot_share=0.4, period=600, seed=1)
    out = {}
    for mode in ("none", "joint"):
        bal = WorksetBalancerModel(loads, parts, mode=mode)
        r = Simulation(sched, Scaler(make_policy("ds2"), 1, parts, cooldown=120), cfg, initial_workers=2,
                       balancer=bal).run(seconds)
        out[mode] = (r.latency(0.95), r.mean_workers(seconds), r.balance_actions)
    assert out["none"][2] == 0 and out["joint"][2] > 0
    assert out["joint"][0] < out["none"][0], out
    assert out["joint"][1] <= out["none"][1] * 1.1, out


def test_a_balancing_round_records_its_bins_and_whether_the_joint_plane_forced_it(tmp_path):
    """Rule 2 (rebalance after a scaling action) is visible in the balancer's decisions: the
    round after ``after_scale`` is forced and balances over the executors that are there."""
    balancer = BalanceController(str(tmp_path), parallelism=4, dim=2)
    autoscaler = SimpleNamespace(before_scale=None, after_scale=None)
    attach_joint(autoscaler, balancer)
    stats = {g: [1.0, 10.0] for g in range(8)}          # worksets 0..7 on partitions g % 4: balanced over 4
    assert balancer.decide(stats, [2.0, 2.0, 2.0, 2.0], [], None, 100.0) is None
    autoscaler.after_scale(2)
    d = balancer.decide(stats, [2.0, 2.0, 2.0, 2.0], [], None, 110.0)
    assert d is not None and d.forced and d.bins == 2
    assert {balancer.owner(g) for g in stats} == {0, 1}                # each executor's bin on partition 0 or 1
    assert not balancer.force_next


def test_the_joint_plane_balances_over_the_executors_there_from_the_start(tmp_path):
    """One executor runs every state partition: a round over the partitions would only move
    worksets, so the joint plane starts with one bin and moves nothing until a scaling action."""
    balancer = BalanceController(str(tmp_path), parallelism=4, dim=2)
    autoscaler = SimpleNamespace(before_scale=None, after_scale=None, workers=lambda: 1)
    attach_joint(autoscaler, balancer)
    assert balancer.bins == 1
    skewed = {g: [10.0 if g % 4 == 0 else 1.0, 10.0] for g in range(8)}    # partition 0 carries most
    assert balancer.decide(skewed, [20.0, 2.0, 2.0, 2.0], [], None, 100.0) is None
    alone = BalanceController(str(tmp_path / "alone"), parallelism=4, dim=2)  # the balancer without the plane
    assert alone.decide(skewed, [20.0, 2.0, 2.0, 2.0], [], None, 100.0) is not None
    autoscaler.after_scale(2)
    d = balancer.decide(skewed, [20.0, 2.0, 2.0, 2.0], [], None, 110.0)
    assert d is not None and d.bins == 2 and {balancer.owner(g) for g in skewed} == {0, 1}


def test_one_executor_is_one_bin_and_no_round_moves_anything(tmp_path):
    """After a scale-down to one executor the forced round has nothing to gain: it moves nothing
    (measured live before: a forced round over 1 bin moved 3,737 worksets)."""
    balancer = BalanceController(str(tmp_path), parallelism=4, dim=2)
    autoscaler = SimpleNamespace(before_scale=None, after_scale=None, workers=lambda: 2)
    attach_joint(autoscaler, balancer)
    stats = {g: [1.0, 10.0] for g in range(8)}
    autoscaler.after_scale(2)
    assert balancer.decide(stats, [2.0, 2.0, 2.0, 2.0], [], None, 100.0) is not None     # over 2 bins: moves
    placed, version = dict(balancer.assignment), balancer.version
    autoscaler.after_scale(1)
    assert balancer.decide(stats, [2.0, 2.0, 2.0, 2.0], [], None, 110.0) is None
    assert balancer.assignment == placed and balancer.version == version and not balancer.force_next
    model = WorksetBalancerModel(moving_hotspot(32, 4, 0.6, period=1e9, seed=1), partitions=8, mode="joint")
    model.rebalance(0.0, 1)
    assert model.actions == 0 and model.assignment is None
