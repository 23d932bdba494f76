"""Autoscaling Structured Streaming queries: the policies of the thesis's chapter 4 on Spark.

- :mod:`.metrics`: what a policy sees (one monitoring window).
- :mod:`.policies`: Dhalion (pool-wide and one stage per action), DS2, HPA-CPU, HPA-Varga and two
  Spark baselines, as pure
  deciders, and :class:`Scaler` (range and cooldown).
- :mod:`.collector`: the metrics of any query, from its progress and Spark's status store.
- :mod:`.actuator`: executors added and removed under a running query, or stop and restart.
- :mod:`.controller`: :func:`autoscale`, the loop that ties them together on the driver.
"""

from driftjoin.control.autoscale.controller import AutoscaleController, WindowRecord, autoscale, dynamic_allocation_conf
from driftjoin.control.autoscale.metrics import StageMetrics, WindowMetrics
from driftjoin.control.autoscale.policies import (
    DS2, POLICIES, Action, BatchInterval, Dhalion, DhalionStage, HPACPU, HPAVarga, Policy, Scaler, SparkDynamicAllocation,
    make_policy,
)

__all__ = ["DS2", "HPACPU", "POLICIES", "Action", "AutoscaleController", "BatchInterval", "Dhalion", "DhalionStage", "HPAVarga",
           "Policy",
           "Scaler", "SparkDynamicAllocation", "StageMetrics", "WindowMetrics", "WindowRecord", "autoscale",
           "dynamic_allocation_conf", "make_policy"]
