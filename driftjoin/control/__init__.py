"""The driver-side control plane: statistics in, decisions out, published while queries run.

- :mod:`driftjoin.control.balance`: the similarity join's workset balancer controller
  (:class:`BalanceController`, S3J Algorithm 1 / LPT) and :func:`attach`.
"""

from driftjoin.control.balance import CONTROLLERS, POLICIES, BalanceController, Decision, attach

__all__ = ["CONTROLLERS", "POLICIES", "BalanceController", "Decision", "attach"]
