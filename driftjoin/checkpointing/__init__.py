"""Checkpointing protocols for streaming dataflows, compared on one simulated testbed.

Chapter 3 of the thesis (CheckMate): COOR, UNC and CIC implemented as written
(:mod:`~driftjoin.checkpointing.protocols`), a discrete-event testbed on simpy that runs real
operators on real records (:mod:`~driftjoin.checkpointing.engine`), the workload of section 3.6
plus S3J (:mod:`~driftjoin.checkpointing.queries`), the metrics of section 3.5
(:mod:`~driftjoin.checkpointing.run`) and the maximum sustainable throughput search
(:mod:`~driftjoin.checkpointing.mst`). No Spark: the cores are plain Python and numpy.
"""

from driftjoin.checkpointing.costs import CostModel
from driftjoin.checkpointing.protocols import PROTOCOLS
from driftjoin.checkpointing.queries import QUERIES
from driftjoin.checkpointing.run import RunConfig, RunResult, run

__all__ = ["CostModel", "PROTOCOLS", "QUERIES", "RunConfig", "RunResult", "run"]
