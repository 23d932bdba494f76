"""The driver-side control plane: statistics in, decisions out, published while queries run.

- :mod:`driftjoin.control.balance`: the similarity join's workset balancer controller
  (:class:`BalanceController`, S3J Algorithm 1 / LPT), the partitioned top-k join's shared
  lower bound (:class:`SharedBoundController`) and :func:`attach`;
- :mod:`driftjoin.control.natural`: ``natural_join``'s partitionings (association groups, delta
  keys, theta refits) for its stateless routers (:class:`NaturalPartitionController`);
- :mod:`driftjoin.control.equi`: ``equi_join``'s SHC routing tables (heavy hitters and grid
  assignment) from the workers' counts (:class:`~driftjoin.control.equi.EquiRoutingController`);
- :mod:`driftjoin.control.autoscale`: autoscaling policies, metrics and actuation (thesis
  chapter 4); :mod:`driftjoin.control.joint`: balancing and scaling together.
"""

from driftjoin.control.balance import (
    CONTROLLERS,
    POLICIES,
    SHARED_BOUND,
    BalanceController,
    Decision,
    SharedBoundController,
    attach,
)

__all__ = ["CONTROLLERS", "POLICIES", "SHARED_BOUND", "BalanceController", "Decision", "SharedBoundController", "attach"]
