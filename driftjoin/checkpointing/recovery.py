"""Recovery lines of uncoordinated checkpoints: the checkpoint graph and rollback propagation.

Thesis section 3.3.2 (after Wang et al.): checkpoints are the nodes of the *checkpoint graph*;
``c_{i,x} -> c_{j,y}`` when a message was sent by operator instance i after ``c_{i,x}`` and
received by j before ``c_{j,y}`` (restoring ``c_{i,x}`` "unsends" it, so ``c_{j,y}`` would hold
an orphan), and ``c_{i,x} -> c_{i,x+1}`` for consecutive checkpoints. The edges are found from
what every checkpoint records per channel: the sequence number of the last message sent and
of the last message received (the thesis's "IDs from channel state logs"). Index 0 of every
instance is its initial state (nothing sent or received), so a recovery line always exists.

Algorithm 2 (rollback propagation) starts from the latest checkpoint of every instance and,
while a member of the root set is strictly reachable from a member of the root set, replaces it
by the instance's previous checkpoint. It ends on the maximum consistent recovery line.

A checkpoint is *invalid* (useless) when no consistent recovery line contains it. Consistent
lines are closed under componentwise minimum, so ``c_{i,x}`` is valid iff rollback propagation
started from the maximum line with i lowered to x keeps i at x; the checkpoints above the
maximum line are invalid when it is computed (the thesis counts those its recovery discards).
"""

from __future__ import annotations

from bisect import bisect_left
from collections import deque
from dataclasses import dataclass
from typing import Mapping, Sequence

Node = tuple[int, int]  # (instance, checkpoint index)


@dataclass(frozen=True)
class CheckpointMeta:
    """What an instance reports to the coordinator for one checkpoint (channel id -> seq)."""

    inst: int
    index: int
    sent: Mapping[int, int]
    recv: Mapping[int, int]


def checkpoint_graph(metas: Mapping[int, Sequence[CheckpointMeta]],
                     channels: Mapping[int, tuple[int, int]]) -> dict[Node, set[Node]]:
    """The checkpoint graph of ``metas`` (per instance, indexed 0..K, 0 = initial state).

    Per channel and receiver checkpoint y, one edge from the sender's interval of the *last*
    message received before ``c_{j,y}``: earlier messages of that interval range come from the
    same or earlier sender intervals, which reach it through the consecutive edges, so the
    reachability (all Algorithm 2 uses) is that of the full graph.
    """
    graph: dict[Node, set[Node]] = {}
    for inst, ms in metas.items():
        for m in ms:
            graph[(inst, m.index)] = set()
        for a, b in zip(ms, ms[1:]):
            graph[(inst, a.index)].add((inst, b.index))
    for ch, (i, j) in channels.items():
        if i not in metas or j not in metas:
            continue
        sent = [m.sent.get(ch, 0) for m in metas[i]]
        prev = 0
        for m in metas[j]:
            r = m.recv.get(ch, 0)
            if r > prev:
                x = bisect_left(sent, r) - 1  # the sender's latest checkpoint before it sent seq r
                if x >= 0:  # (x < 0: sent before the oldest checkpoint kept, which nothing can restore)
                    graph[(i, metas[i][x].index)].add((j, m.index))
            prev = r
    return graph


def _strictly_reachable(graph: Mapping[Node, set[Node]], roots: Sequence[Node]) -> set[Node]:
    seen: set[Node] = set()
    todo = deque(n for r in roots for n in graph.get(r, ()))
    while todo:
        n = todo.popleft()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(graph.get(n, ()))
    return seen


def rollback_propagation(graph: Mapping[Node, set[Node]], start: Mapping[int, int],
                         indices: Mapping[int, Sequence[int]]) -> dict[int, int]:
    """Algorithm 2: the root set starts at ``start`` (instance -> checkpoint index); returns the line.

    ``indices`` lists each instance's checkpoint indices in increasing order (to step back).
    """
    root = dict(start)
    while True:
        reach = _strictly_reachable(graph, [(i, x) for i, x in root.items()])
        marked = [i for i, x in root.items() if (i, x) in reach]
        if not marked:
            return root
        for i in marked:
            pos = bisect_left(indices[i], root[i])
            if pos == 0:
                raise AssertionError(f"instance {i}'s initial checkpoint was marked: the graph is not a checkpoint graph")
            root[i] = indices[i][pos - 1]


@dataclass(frozen=True)
class RecoveryLine:
    line: dict[int, int]
    invalid: frozenset[Node]
    total: int


def recovery_line(metas: Mapping[int, Sequence[CheckpointMeta]], channels: Mapping[int, tuple[int, int]],
                  count_invalid: bool = True) -> RecoveryLine:
    """The maximum consistent recovery line of ``metas`` and, optionally, its invalid checkpoints."""
    graph = checkpoint_graph(metas, channels)
    indices = {i: [m.index for m in ms] for i, ms in metas.items()}
    latest = {i: idx[-1] for i, idx in indices.items()}
    line = rollback_propagation(graph, latest, indices)
    invalid: set[Node] = set()
    if count_invalid:
        for i, idx in indices.items():
            for x in idx:
                if x > line[i]:
                    invalid.add((i, x))
                elif x < line[i]:
                    lowered = dict(line)
                    lowered[i] = x
                    if rollback_propagation(graph, lowered, indices)[i] != x:
                        invalid.add((i, x))
    total = sum(len(idx) - 1 for idx in indices.values())  # the initial states are not checkpoints taken
    return RecoveryLine(line, frozenset(invalid), total)
