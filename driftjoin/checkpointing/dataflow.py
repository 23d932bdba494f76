"""Logical dataflows: stages (operators), edges (partitioning), and their parallel expansion.

A :class:`Dataflow` names its stages and the edges between them; every stage runs with the
same parallelism, one instance per worker (the thesis's deployment: each worker runs one
parallel instance of every operator on one CPU, section 3.7.1). An edge is ``forward``
(instance i to instance i, no shuffle), ``hash`` (by a key of the record) or ``broadcast``;
``accepts`` selects which records of the upstream stage travel on it (a source of persons and
auctions feeds two filters). Expanding a dataflow gives one FIFO *channel* per pair of
instances an edge connects; a channel's id, sender and receiver are what the protocols, the
checkpoint metadata and the recovery line speak of.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

from driftjoin.checkpointing.operators import Operator

PARTITIONINGS = ("forward", "hash", "broadcast")


def hash_partition(key: Any, n: int) -> int:
    """A process-independent hash (Python's str hash is salted per process)."""
    if isinstance(key, int):
        return key % n
    return zlib.crc32(repr(key).encode()) % n


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    port: int = 0
    partition: str = "forward"
    key: Callable[[tuple], Any] | None = None
    accepts: Callable[[tuple], bool] | None = None

    def __post_init__(self) -> None:
        if self.partition not in PARTITIONINGS:
            raise ValueError(f"edge {self.src}->{self.dst}: partition must be one of {PARTITIONINGS}, got {self.partition!r}")
        if self.partition == "hash" and self.key is None:
            raise ValueError(f"edge {self.src}->{self.dst}: a hash edge needs a key function")


@dataclass(frozen=True)
class Stage:
    name: str
    make: Callable[[int, int], Operator]  # (number of input channels, instance index) -> operator
    source: bool = False
    sink: bool = False


@dataclass
class Dataflow:
    name: str
    stages: list[Stage]
    edges: list[Edge]
    #: per source partition (= source instance), its input log: (arrival time, record) in time order
    inputs: list[list[tuple[float, tuple]]] = field(default_factory=list)

    def stage(self, name: str) -> Stage:
        for s in self.stages:
            if s.name == name:
                return s
        raise KeyError(name)

    def is_cyclic(self) -> bool:
        succ: dict[str, list[str]] = {s.name: [] for s in self.stages}
        for e in self.edges:
            succ[e.src].append(e.dst)
        state: dict[str, int] = {}

        def visit(n: str) -> bool:
            state[n] = 1
            for m in succ[n]:
                if state.get(m) == 1 or (m not in state and visit(m)):
                    return True
            state[n] = 2
            return False

        return any(visit(s.name) for s in self.stages if s.name not in state)

    def validate(self) -> None:
        names = [s.name for s in self.stages]
        if len(set(names)) != len(names):
            raise ValueError(f"dataflow {self.name}: stage names repeat: {names}")
        for e in self.edges:
            for n in (e.src, e.dst):
                if n not in names:
                    raise ValueError(f"dataflow {self.name}: edge {e.src}->{e.dst} names an unknown stage {n!r}")
            if self.stage(e.dst).source:
                raise ValueError(f"dataflow {self.name}: edge {e.src}->{e.dst} leads into a source")
        if not any(s.source for s in self.stages) or not any(s.sink for s in self.stages):
            raise ValueError(f"dataflow {self.name}: needs at least one source and one sink stage")


@dataclass(frozen=True)
class Channel:
    """A FIFO channel between two instances, for one edge."""

    id: int
    src: int  # instance id
    dst: int
    edge: int
    port: int
    pos: int  # position among the receiver's input channels


@dataclass
class Plan:
    """The parallel expansion: instance ids, channels, and per instance and edge its channels."""

    parallelism: int
    instances: list[tuple[str, int]]  # id -> (stage, index)
    channels: list[Channel]
    out: dict[int, list[tuple[Edge, list[Channel]]]]
    inputs: dict[int, list[Channel]]


def expand(flow: Dataflow, parallelism: int) -> Plan:
    instances = [(s.name, i) for s in flow.stages for i in range(parallelism)]
    ids = {inst: k for k, inst in enumerate(instances)}
    channels: list[Channel] = []
    out: dict[int, list[tuple[Edge, list[Channel]]]] = {k: [] for k in range(len(instances))}
    inputs: dict[int, list[Channel]] = {k: [] for k in range(len(instances))}
    for e_id, e in enumerate(flow.edges):
        for i in range(parallelism):
            src = ids[(e.src, i)]
            targets = [i] if e.partition == "forward" else list(range(parallelism))
            chans = []
            for j in targets:
                dst = ids[(e.dst, j)]
                ch = Channel(len(channels), src, dst, e_id, e.port, len(inputs[dst]))
                channels.append(ch)
                inputs[dst].append(ch)
                chans.append(ch)
            out[src].append((e, chans))
    return Plan(parallelism, instances, channels, out, inputs)
