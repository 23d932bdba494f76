"""Autoscaling Structured Streaming queries: the policies of the thesis's chapter 4 on Spark.

- :mod:`.metrics`: what a policy sees (one monitoring window).
- :mod:`.policies`: Dhalion, DS2, HPA-CPU, HPA-Varga and two Spark baselines, as pure
  deciders, and :class:`Scaler` (range and cooldown).
"""

from driftjoin.control.autoscale.metrics import StageMetrics, WindowMetrics
from driftjoin.control.autoscale.policies import (
    DS2, POLICIES, Action, BatchInterval, Dhalion, HPACPU, HPAVarga, Policy, Scaler, SparkDynamicAllocation, make_policy,
)

__all__ = ["DS2", "HPACPU", "POLICIES", "Action", "BatchInterval", "Dhalion", "HPAVarga", "Policy", "Scaler",
           "SparkDynamicAllocation", "StageMetrics", "WindowMetrics", "make_policy"]
