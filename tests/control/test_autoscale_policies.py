"""The autoscaling policies on crafted metric sequences: the action a person would take.

Plus property tests: whatever the metrics, no policy leaves ``[min, max]`` or acts inside its
cooldown.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.control.autoscale import (
    DS2, HPACPU, POLICIES, BatchInterval, Dhalion, HPAVarga, Scaler, StageMetrics, WindowMetrics, make_policy,
)
from driftjoin.control.autoscale.policies import effective_workers, wave_efficient


def window(t: float = 0.0, **kw) -> WindowMetrics:
    base = dict(time=t, duration=30.0, workers=4, input_rate=1000.0, processed_rate=1000.0, lag=500.0,
                lag_change_rate=0.0, cpu_utilisation=0.7, idle_per_second=0.3, batch_duration=1.0,
                trigger_interval=0.0, batches=30)
    base.update(kw)
    return WindowMetrics(**base)


# -- Dhalion -----------------------------------------------------------------------------------

def test_dhalion_scales_up_by_equation_4_2_when_the_lag_grows():
    # lag grows by 500 records/s while 1000/s are consumed: factor 1 + 0.5
    assert Dhalion().recommend(window(lag=20000, lag_change_rate=500, processed_rate=1000), 4) == 6


def test_dhalion_scale_up_is_capped_at_ten_times():
    assert Dhalion().recommend(window(lag=1e6, lag_change_rate=1e6, processed_rate=10), 2) == 20


def test_dhalion_scales_down_by_the_factor_when_the_queue_is_almost_empty():
    # no lag growth, lag of 0.5 s of input < one batch: overprovisioned, floor(5 * 0.8)
    assert Dhalion().recommend(window(lag=500, lag_change_rate=0), 5) == 4
    assert Dhalion().recommend(window(lag=0, lag_change_rate=-100), 2) == 1
    assert Dhalion().recommend(window(lag=0), 1) == 1


def test_dhalion_holds_when_a_lag_exists_but_does_not_grow():
    assert Dhalion().recommend(window(lag=30000, lag_change_rate=0), 4) == 4


# -- DS2 ---------------------------------------------------------------------------------------

def two_stages(rate_per_worker_0: float = 500.0, rate_per_worker_1: float = 250.0) -> tuple[StageMetrics, ...]:
    # stage 0 reads the source and emits 1 record per record; stage 1 consumes them
    return (StageMetrics("s0", (), 8, 10000, 10000, 10000 / rate_per_worker_0),
            StageMetrics("s1", ("s0",), 8, 10000, 100, 10000 / rate_per_worker_1))


def test_ds2_equation_4_3_over_stages_with_overprovisioning():
    m = window(input_rate=1000, stages=two_stages())
    assert DS2.optimal_parallelism(m.stages, 1000) == {"s0": 2.0, "s1": 4.0}
    assert DS2(overprovisioning=0.0).recommend(m, 1) == 6
    assert DS2().recommend(m, 1) == 8            # ceil(6 * 1.2)


def test_ds2_propagates_selectivity_downstream():
    stages = (StageMetrics("s0", (), 8, 1000, 3000, 2.0),    # 500/s per worker, emits 3 per record
              StageMetrics("s1", ("s0",), 8, 3000, 0, 3.0))  # 1000/s per worker
    assert DS2.optimal_parallelism(stages, 1000) == {"s0": 2.0, "s1": 3.0}


def test_ds2_reaches_its_target_in_one_step_whatever_the_current_count():
    m = window(input_rate=1000, stages=two_stages())
    assert {DS2().recommend(m, w) for w in (1, 3, 9, 40)} == {8}


def test_ds2_caps_a_stage_at_its_number_of_tasks():
    stages = (StageMetrics("s0", (), 2, 1000, 1000, 10.0),)  # 100/s per worker: wants 10, has 2 tasks
    assert DS2(overprovisioning=0).recommend(window(input_rate=1000, stages=stages), 1) == 2


def test_ds2_without_stage_metrics_keeps_quiet():
    assert DS2().recommend(window(stages=()), 3) is None


# -- HPA-CPU -----------------------------------------------------------------------------------

def test_hpa_cpu_equation_4_4_and_tolerance():
    assert HPACPU().recommend(window(cpu_utilisation=0.95), 4) == 6   # ceil(4 * 0.95 / 0.7)
    assert HPACPU().recommend(window(cpu_utilisation=0.75), 4) == 4   # within 10%: unchanged
    assert HPACPU(tolerance=0).recommend(window(cpu_utilisation=0.75), 4) == 5


def test_hpa_cpu_scale_down_waits_for_the_stabilisation_window():
    hpa = HPACPU()
    assert hpa.recommend(window(0, cpu_utilisation=0.7), 4) == 4
    # load halves: the window still holds the recommendation of 4 from t=0
    assert hpa.recommend(window(60, cpu_utilisation=0.35), 4) == 4
    assert hpa.recommend(window(240, cpu_utilisation=0.35), 4) == 4
    # five minutes after the last high recommendation only the low ones are left
    assert hpa.recommend(window(301, cpu_utilisation=0.35), 4) == 2


def test_hpa_cpu_scales_up_at_once():
    hpa = HPACPU()
    hpa.recommend(window(0, cpu_utilisation=0.2), 4)
    assert hpa.recommend(window(30, cpu_utilisation=1.0), 4) == 6


# -- HPA-Varga ---------------------------------------------------------------------------------

def test_hpa_varga_takes_the_larger_of_utilisation_and_lag_proposals():
    busy = window(idle_per_second=0.1, lag=100)                         # utilisation 0.9, no lag
    assert HPAVarga().recommend(busy, 4) == 6
    lagging = window(idle_per_second=0.3, lag=60000, lag_change_rate=1000, input_rate=1000)  # rate 2.0
    assert HPAVarga.relative_lag_change_rate(lagging) == 2.0
    assert HPAVarga().recommend(lagging, 4) == 8


def test_hpa_varga_ignores_the_lag_rate_below_the_lag_threshold():
    shrinking = window(idle_per_second=0.65, lag=200, lag_change_rate=-800)   # utilisation 0.35
    hpa = HPAVarga(stabilisation_window=0)
    assert hpa.recommend(shrinking, 4) == 2


# -- SPARK-24815 rule --------------------------------------------------------------------------

def test_batch_interval_rule_of_the_dstreams_allocator():
    rule = BatchInterval()
    assert rule.recommend(window(trigger_interval=10, batch_duration=12), 2) == 3
    assert rule.recommend(window(trigger_interval=10, batch_duration=25), 2) == 5   # round(2.5) = 3, as Scala
    assert rule.recommend(window(trigger_interval=10, batch_duration=5), 2) == 2
    assert rule.recommend(window(trigger_interval=10, batch_duration=2), 2) == 1
    assert rule.recommend(window(trigger_interval=0, batch_duration=2), 2) is None


# -- Scaler: range and cooldown ----------------------------------------------------------------

def test_scaler_clamps_and_respects_cooldown():
    s = Scaler(HPACPU(stabilisation_window=0), min_workers=1, max_workers=5, cooldown=300)
    assert s.decide(window(0, cpu_utilisation=1.0), 4) == 5         # wants 6, capped at 5
    assert s.decide(window(100, cpu_utilisation=0.1), 5) is None    # in cooldown
    assert s.decide(window(300, cpu_utilisation=0.1), 5) == 1
    assert [(a.before, a.after) for a in s.actions] == [(4, 5), (5, 1)]


# -- sizing: Spark's task waves ------------------------------------------------------------------

def waves_brute(tasks: int, executors: int) -> int:
    """Waves of ``tasks`` equal tasks handed one per free core to ``executors`` cores."""
    free, waves = [0] * executors, 0
    for _ in range(tasks):
        i = free.index(min(free))
        free[i] += 1
        waves = max(waves, free[i])
    return waves


@settings(max_examples=300, deadline=None)
@given(partitions=st.integers(1, 150), wanted=st.integers(1, 200))
def test_wave_efficient_is_the_fewest_executors_with_that_throughput(partitions, wanted):
    def throughput(k: int) -> float:
        return partitions / waves_brute(partitions, k)

    assert effective_workers(wanted, partitions) == throughput(wanted)
    k = wave_efficient(wanted, partitions)
    fewest = next((j for j in range(1, partitions + 1) if throughput(j) >= wanted), partitions)
    assert k == fewest


def test_waves_sizing_acts_on_a_wave_efficient_count_and_thesis_sizing_on_the_policys():
    # DS2 wants 51 workers of 70 partitions: 51 run two waves, the throughput of 35
    m = window(input_rate=1000, stages=(StageMetrics("s0", (), 70, 30000, 30000, 30000 * 42.5 / 1000),))
    assert DS2().recommend(m, 1) == 51
    assert Scaler(DS2(), 1, 70, cooldown=0).decide(m, 1) == 51
    assert Scaler(DS2(), 1, 70, cooldown=0, sizing="waves", partitions=70).decide(m, 1) == 70
    # HPA-CPU at 10 workers over 10 partitions wants 8: 8 run two waves, no more than 5 would
    busy = window(cpu_utilisation=0.56)
    assert Scaler(HPACPU(), 1, 10, cooldown=0).decide(busy, 10) == 8
    assert Scaler(HPACPU(), 1, 10, cooldown=0, sizing="waves", partitions=10).decide(busy, 10) is None


@pytest.mark.parametrize("kwargs, message", [
    (dict(min_workers=5, max_workers=2), "above max_workers"),
    (dict(min_workers=0), "must be an int >= 1"),
    (dict(cooldown=-1), "cooldown"),
    (dict(sizing="spark"), "sizing='spark'"),
    (dict(sizing="waves"), "needs partitions="),
    (dict(sizing="waves", partitions=0), "needs partitions="),
])
def test_bad_scaler_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Scaler(DS2(), **kwargs)


@pytest.mark.parametrize("name, options, message", [
    ("hpa-cpu", {"target": 0.0}, r"\(0, 1\]"),
    ("hpa-cpu", {"target": 1.5}, r"\(0, 1\]"),
    ("hpa-varga", {"target": -0.1}, r"\(0, 1\]"),
    ("dhalion", {"scale_down_factor": 1.0}, "scale_down_factor"),
    ("ds2", {"overprovisioning": -0.2}, "overprovisioning"),
    ("ds3", {}, "does not exist"),
    ("ds2", {"over_provisioning": 0.2}, "has no setting over_provisioning"),
    ("batch-interval", {"scaling_up_ratio": 0.2}, "scaling_down_ratio"),
])
def test_bad_policy_settings(name, options, message):
    with pytest.raises(ValueError, match=message):
        make_policy(name, **options)


# -- properties --------------------------------------------------------------------------------

finite = st.floats(min_value=0, max_value=1e6, allow_nan=False)
metric_window = st.fixed_dictionaries({
    "input_rate": finite, "processed_rate": finite, "lag": finite,
    "lag_change_rate": st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    "cpu_utilisation": st.floats(min_value=0, max_value=1), "idle_per_second": st.floats(min_value=0, max_value=1),
    "batch_duration": st.floats(min_value=0, max_value=100), "trigger_interval": st.sampled_from([0.0, 1.0, 10.0]),
    "s0": st.tuples(finite, finite, st.floats(min_value=0, max_value=1e3)),
    "s1": st.tuples(finite, finite, st.floats(min_value=0, max_value=1e3)),
    "gap": st.floats(min_value=1, max_value=400),
})


@settings(max_examples=150, deadline=None)
@given(policy=st.sampled_from(sorted(POLICIES)), lo=st.integers(1, 10), span=st.integers(0, 60),
       cooldown=st.sampled_from([0.0, 30.0, 300.0]), start=st.integers(1, 80), seq=st.lists(metric_window, min_size=1, max_size=25),
       waves=st.none() | st.integers(1, 80))
def test_no_policy_leaves_its_range_or_acts_in_cooldown(policy, lo, span, cooldown, start, seq, waves):
    scaler = Scaler(make_policy(policy), min_workers=lo, max_workers=lo + span, cooldown=cooldown,
                    sizing="thesis" if waves is None else "waves", partitions=waves)
    current, t, last = start, 0.0, -math.inf
    for w in seq:
        t += w["gap"]
        stages = (StageMetrics("s0", (), 4, w["s0"][0], w["s0"][1], w["s0"][2]),
                  StageMetrics("s1", ("s0",), 4, w["s1"][0], w["s1"][1], w["s1"][2]))
        m = WindowMetrics(t, w["gap"], current, w["input_rate"], w["processed_rate"], w["lag"], w["lag_change_rate"],
                          stages, w["cpu_utilisation"], w["idle_per_second"], w["batch_duration"], w["trigger_interval"], 3)
        target = scaler.decide(m, current)
        if target is not None:
            assert lo <= target <= lo + span
            assert target != current
            if waves is not None and lo < target < lo + span and target <= waves:   # not clamped
                # one executor fewer would give less throughput: no executor only fills an idle wave
                assert target == 1 or effective_workers(target - 1, waves) < effective_workers(target, waves)
            assert t - last >= cooldown
            last, current = t, target
    for a, b in zip(scaler.actions, scaler.actions[1:]):
        assert b.before == a.after and b.time - a.time >= cooldown
