"""Streaming HyperCube (Qiu, Papadias, Yi; EDBT 2019): a skew-resilient distributed equi-join
of two streams R(A, B) and S(B, C) on B, with the parallel hash join and Join-Biclique as
baselines. Plain Python and numpy: routing (:class:`Dispatcher`) is kept apart from the join state
of each task (:class:`Task`) so that an engine can run tasks in stateful operator partitions.
"""

from driftjoin.hypercube.baselines import JoinBiclique, ParallelHashJoin
from driftjoin.hypercube.dispatcher import Dispatcher, DispatcherStats, WatermarkClock
from driftjoin.hypercube.generator import ZipfStreamSpec, zipf_stream
from driftjoin.hypercube.grid import Grid, desired_sides, initial_sides, placement_moves, resize_sides
from driftjoin.hypercube.heavy import HeavyHitterTracker, MisraGries
from driftjoin.hypercube.invariants import placement_violations
from driftjoin.hypercube.model import (
    BatchPlan,
    BatchSummary,
    Drop,
    Key,
    LateTupleError,
    Pair,
    Reconfiguration,
    Residue,
    Role,
    Routed,
    Router,
    Side,
    StateMoves,
    StreamTuple,
    Transfer,
)
from driftjoin.hypercube.oracle import oracle_pairs
from driftjoin.hypercube.shc import StreamingHyperCube
from driftjoin.hypercube.simulator import JoinMetrics, JoinResult, Simulator, make_dispatcher, run_join
from driftjoin.hypercube.task import Task, apply_moves

__all__ = [
    "BatchPlan",
    "BatchSummary",
    "Dispatcher",
    "DispatcherStats",
    "Drop",
    "Grid",
    "HeavyHitterTracker",
    "JoinBiclique",
    "JoinMetrics",
    "JoinResult",
    "Key",
    "LateTupleError",
    "MisraGries",
    "Pair",
    "ParallelHashJoin",
    "Reconfiguration",
    "Residue",
    "Role",
    "Routed",
    "Router",
    "Side",
    "Simulator",
    "StateMoves",
    "StreamTuple",
    "StreamingHyperCube",
    "Task",
    "Transfer",
    "WatermarkClock",
    "ZipfStreamSpec",
    "apply_moves",
    "desired_sides",
    "initial_sides",
    "make_dispatcher",
    "oracle_pairs",
    "placement_moves",
    "placement_violations",
    "resize_sides",
    "run_join",
    "zipf_stream",
]
