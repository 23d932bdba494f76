"""The workload of thesis section 3.6 as testbed dataflows, plus S3J's as a sixth query.

- ``q1``: NexMark Q1, a stateless map over bids (price to euros); no shuffle.
- ``q3``: NexMark Q3, an incremental join of persons (in OR, ID or CA) with auctions (category
  10) on seller = person, behind two filters; shuffles into the join.
- ``q8``: NexMark Q8, a running windowed join of persons and the auctions they open in the same
  tumbling window; shuffles into the join.
- ``q12``: NexMark Q12, a running windowed count of bids per bidder; one shuffle.
- ``reach``: the cyclic reachability query (Figure 3.6): join (links, sources) -> select ->
  project -> back into the join, and to the sink.
- ``s3j``: the S3J similarity join (driftjoin.s3j): space routing -> workset formulation
  (keyed by space partition) -> similarity computation (keyed by worker).

Every query's result can be put in a canonical form (:func:`canonical`) that a failure-free
run and a recovered run must share exactly (exactly-once, record for record).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Callable

from driftjoin.checkpointing import generators
from driftjoin.checkpointing.dataflow import Dataflow, Edge, Stage
from driftjoin.checkpointing.operators import (
    Filter, IncrementalJoin, Map, ReachJoin, ReachProject, ReachSelect, S3JCompute, S3JFormulate, S3JRoute,
    Sink, Source, WindowedCount, WindowedJoin, reachable_view,
)
from driftjoin.s3j.space import SpacePartitioner, random_centroids
from driftjoin.distance import get_metric

#: window length (seconds of event time) of Q8, Q12 and S3J
WINDOW = 1.0
EUR_PER_USD = 0.908


def _src() -> Stage:
    return Stage("source", lambda n, i: Source(n), source=True)


def _sink() -> Stage:
    return Stage("sink", lambda n, i: Sink(n), sink=True)


def q1(parallelism: int, **_: Any) -> Dataflow:
    to_eur = lambda b: ("B", b[1], b[2], round(b[3] * EUR_PER_USD, 2))  # noqa: E731
    return Dataflow("q1", [_src(), Stage("map", lambda n, i: Map(n, to_eur)), _sink()],
                    [Edge("source", "map"), Edge("map", "sink")])


def q3(parallelism: int, **_: Any) -> Dataflow:
    person = lambda r: r[0] == "P"  # noqa: E731
    auction = lambda r: r[0] == "A"  # noqa: E731
    stages = [
        _src(),
        Stage("filter_persons", lambda n, i: Filter(n, lambda p: p[4] in ("OR", "ID", "CA"))),
        Stage("filter_auctions", lambda n, i: Filter(n, lambda a: a[3] == 10)),
        Stage("join", lambda n, i: IncrementalJoin(n, lambda p: p[1], lambda a: a[2],
                                                   lambda p, a: (p[2], p[3], p[4], a[1]))),
        _sink(),
    ]
    edges = [
        Edge("source", "filter_persons", accepts=person),
        Edge("source", "filter_auctions", accepts=auction),
        Edge("filter_persons", "join", port=0, partition="hash", key=lambda p: p[1]),
        Edge("filter_auctions", "join", port=1, partition="hash", key=lambda a: a[2]),
        Edge("join", "sink"),
    ]
    return Dataflow("q3", stages, edges)


def q8(parallelism: int, **_: Any) -> Dataflow:
    stages = [
        _src(),
        Stage("join", lambda n, i: WindowedJoin(n, WINDOW, lambda p: p[1], lambda a: a[2],
                                                lambda p, a, w: (p[1], p[2], a[1], w), time=lambda r: r[-1])),
        _sink(),
    ]
    edges = [
        Edge("source", "join", port=0, partition="hash", key=lambda p: p[1], accepts=lambda r: r[0] == "P"),
        Edge("source", "join", port=1, partition="hash", key=lambda a: a[2], accepts=lambda r: r[0] == "A"),
        Edge("join", "sink"),
    ]
    return Dataflow("q8", stages, edges)


def q12(parallelism: int, **_: Any) -> Dataflow:
    stages = [_src(), Stage("count", lambda n, i: WindowedCount(n, WINDOW, key=lambda b: b[2], time=lambda b: b[4])),
              _sink()]
    return Dataflow("q12", stages, [Edge("source", "count", partition="hash", key=lambda b: b[2]),
                                    Edge("count", "sink")])


def reach(parallelism: int, max_hops: int = 6, **_: Any) -> Dataflow:
    stages = [_src(), Stage("join", lambda n, i: ReachJoin(n)),
              Stage("select", lambda n, i: ReachSelect(n, max_hops)),
              Stage("project", lambda n, i: ReachProject(n)), _sink()]
    edges = [
        Edge("source", "join", port=0, partition="hash", key=lambda r: r[2], accepts=lambda r: r[0] in ("L+", "S+")),
        Edge("source", "join", port=0, partition="broadcast", accepts=lambda r: r[0] in ("L-", "S-")),
        Edge("join", "select"),
        Edge("select", "project"),
        Edge("project", "sink"),
        Edge("project", "join", port=1, partition="hash", key=lambda d: d[2], accepts=lambda r: r[0] == "D"),
    ]
    return Dataflow("reach", stages, edges)


S3J_METRIC = "euclidean"
S3J_THRESHOLD = 0.02
S3J_DIM = 2


def s3j(parallelism: int, seed: int = 0, threshold: float = S3J_THRESHOLD, **_: Any) -> Dataflow:
    centroids = random_centroids(parallelism, S3J_DIM, seed)
    partitioner = SpacePartitioner(centroids, get_metric(S3J_METRIC), threshold)
    stages = [
        _src(),
        Stage("route", lambda n, i: S3JRoute(n, partitioner, S3J_METRIC, WINDOW)),
        Stage("formulate", lambda n, i: S3JFormulate(n, S3J_METRIC, threshold, S3J_DIM)),
        Stage("compute", lambda n, i: S3JCompute(n, S3J_METRIC, threshold)),
        _sink(),
    ]
    edges = [
        Edge("source", "route"),
        Edge("route", "formulate", partition="hash", key=lambda m: m[1]),
        Edge("formulate", "compute", partition="hash", key=lambda w: w[1]),
        Edge("compute", "sink"),
    ]
    return Dataflow("s3j", stages, edges)


@dataclass(frozen=True)
class Query:
    name: str
    build: Callable[..., Dataflow]
    generate: Callable[..., list]
    skewable: bool
    description: str


def _gen_b(rate: float, duration: float, partitions: int, seed: int, hot: float, **_: Any) -> list:
    return generators.nexmark("B", rate, duration, partitions, seed, hot)


def _gen_pa(rate: float, duration: float, partitions: int, seed: int, hot: float, **_: Any) -> list:
    return generators.nexmark("PA", rate, duration, partitions, seed, hot)


def _gen_reach(rate: float, duration: float, partitions: int, seed: int, hot: float, nodes: int | None = None,
               **_: Any) -> list:
    # default: as many nodes as input events, so the live links stay below one per node and the
    # number of paths stays bounded (the thesis's 1M static nodes play the same role)
    return generators.reachability(rate, duration, partitions, seed, nodes or max(100, int(rate * duration)))


def _gen_vec(rate: float, duration: float, partitions: int, seed: int, hot: float, **_: Any) -> list:
    return generators.vectors(rate, duration, partitions, seed, S3J_DIM)


QUERIES: dict[str, Query] = {
    "q1": Query("q1", q1, _gen_b, False, "NexMark Q1: map over bids, no shuffle"),
    "q3": Query("q3", q3, _gen_pa, True, "NexMark Q3: filters + incremental join persons x auctions"),
    "q8": Query("q8", q8, _gen_pa, True, "NexMark Q8: running windowed join persons x auctions"),
    "q12": Query("q12", q12, _gen_b, True, "NexMark Q12: running windowed count of bids per bidder"),
    "reach": Query("reach", reach, _gen_reach, False, "cyclic reachability: join -> select -> project -> join"),
    "s3j": Query("s3j", s3j, _gen_vec, False, "S3J similarity join: route -> formulate -> compute"),
}


def canonical(query: str, outputs: list[tuple]) -> Any:
    """The part of a run's output that must be identical with and without failures.

    A multiset of the records for every query but ``reach``, whose result is the view of
    surviving paths (each must arrive exactly once) and the multiset of deletions.
    """
    if query == "reach":
        return reachable_view(outputs), Counter(r for r in outputs if r[0] in ("L-", "S-"))
    return Counter(outputs)
