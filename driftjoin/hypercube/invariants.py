"""A check of SHC's placement invariant over live task states (for tests and engine adapters).

Invariant (I) (see :mod:`driftjoin.hypercube.shc`): between batches, every stored tuple of a join
value b is held by exactly the tasks of its row (R) or column (S) in b's current grid, once each.
Exactly-once output follows from it, so an engine adapter can call this after a batch to validate
the states it restored or migrated.
"""

from __future__ import annotations

from collections.abc import Mapping

from driftjoin.hypercube.model import Key, Side
from driftjoin.hypercube.shc import StreamingHyperCube
from driftjoin.hypercube.task import Task


def placement_violations(dispatcher: StreamingHyperCube, tasks: Mapping[int, Task]) -> list[str]:
    """Every stored tuple whose holders differ from invariant (I); empty when the state is sound."""
    holders: dict[tuple[Side, int], set[int]] = {}
    keys: dict[tuple[Side, int], Key] = {}
    problems = []
    for task_id, task in tasks.items():
        stored = list(task.stored_tuples())
        if len(stored) != task.stored:
            problems.append(f"task {task_id} counts {task.stored} stored tuples but holds {len(stored)}")
        for t in stored:
            holders.setdefault((t.side, t.tid), set()).add(task_id)
            keys[(t.side, t.tid)] = t.key
    for (side, tid), found in holders.items():
        key = keys[(side, tid)]
        expected = set(dispatcher.placement(key).holders(side, tid))
        if found != expected:
            problems.append(f"{side.name} tuple {tid} of {key!r} is at {sorted(found)}, expected {sorted(expected)}")
    return problems
