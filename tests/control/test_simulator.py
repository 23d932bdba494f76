"""The simulator runs the live policies on a model of the micro-batch engine."""

from __future__ import annotations

from driftjoin.control.autoscale import Scaler, make_policy
from driftjoin.control.autoscale.simulator import SimConfig, list_schedule_makespan, simulate


def test_list_schedule_makespan_is_spark_task_order():
    assert list_schedule_makespan([3, 1, 1, 1], 2) == 3
    assert list_schedule_makespan([1, 1, 1, 3], 2) == 4


def test_ds2_settles_near_equation_4_3_on_a_constant_load():
    cfg = SimConfig(capacity=1000, partitions=40, task_overhead=0.0, batch_overhead=0.2, monitoring_window=30)
    r = simulate("constant:high=10000,duration=1200", Scaler(make_policy("ds2"), 1, 40, cooldown=60), 1200, cfg)
    assert 10 <= r.workers[-1][1] <= 14          # 10 workers of 1000/s, plus 20% over-provisioning
    assert r.throughput() > 9000


def test_spark_dynamic_allocation_grows_to_the_task_count():
    cfg = SimConfig(capacity=1000, partitions=12, monitoring_window=30)
    r = simulate("constant:high=3000,duration=900", Scaler(make_policy("spark-dynamic-allocation"), 1, 30, cooldown=60), 900, cfg)
    assert r.workers[-1][1] == 12 and r.actions == 0


def test_a_shared_machine_caps_what_more_executors_give():
    """Two executors on a machine that gives them one core's worth process what one does."""
    sched = "constant:high=1800,duration=600"
    run = {}
    for cores in (float("inf"), 1.0):
        cfg = SimConfig(capacity=1000, partitions=2, task_overhead=0.0, batch_overhead=0.0, machine_cores=cores)
        run[cores] = simulate(sched, Scaler(make_policy("ds2"), 2, 2, cooldown=60), 600, cfg, initial_workers=2)
    assert run[float("inf")].throughput() > 1700           # 2 x 1000/s keep up with 1800/s
    assert run[1.0].throughput() < 1050                    # one core's worth: 1000/s
