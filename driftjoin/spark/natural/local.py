"""``natural_join``'s parallel routing played in one process, micro-batch by micro-batch.

The routers (:class:`~driftjoin.spark.natural.routers.Router`), the joiners
(:class:`~driftjoin.spark.natural.joiners.Joiner`) and the control plane
(:class:`~driftjoin.spark.natural.control.NaturalPartitionController`) of a stream, with Spark's
part done by hand: the batch's rows cut into router tasks, each task reading one published
decision, the routed rows shuffled and grouped by joiner key, each joiner run on a copy of its
state and writing its statistics, then the batch committed. What Spark leaves to chance is
chosen by the caller: which decision each task reads and when the controller publishes. The
property tests use it to check exactness under any such timing, replays and restarts
(``tests/spark/natural/test_natural_routing.py``); ``bench/schemafree_spark.py`` uses it for the work
per worker at parallelisms this machine cannot run.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
import pyarrow as pa

from driftjoin.spark.natural.control import NaturalPartitionController
from driftjoin.spark.natural.joiners import Joiner, JoinerState
from driftjoin.spark.natural.plan import JOINER_OP, NaturalPlan, routed_frame
from driftjoin.spark.natural.routers import Router
from driftjoin.spark.natural.table import bind_decision, load_view, mark_start, write_record
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.stats import write_stats


def input_batch(rows: Sequence[dict[str, Any]]) -> pa.RecordBatch:
    """Input rows (``id``, ``doc`` JSON text, optional time ``t``, optional ``side``) as a router reads them."""
    return pa.RecordBatch.from_pydict({
        "side": pa.array([r.get("side", 0) for r in rows], pa.int8()), "id": pa.array([r["id"] for r in rows], pa.int64()),
        "doc": pa.array([r["doc"] for r in rows], pa.string()),
        "time": pa.array([r.get("t") for r in rows], pa.float64()),
    })


class LocalRun:
    """One streaming natural join with parallel routing (module docstring). ``plan.control``
    must be a directory: decisions, fits and statistics go there."""

    def __init__(self, plan: NaturalPlan) -> None:
        self.plan = plan
        self.controller = NaturalPartitionController(plan)
        self.states: dict[int, bytes] = {}
        self.batch = 0

    def restart(self, plan: NaturalPlan) -> None:
        """The query rebuilt from its checkpoint: a new lineage and controller, the same joiner state."""
        self.controller.terminated = True
        self.plan = plan
        self.controller = NaturalPartitionController(plan)

    def decide(self) -> None:
        """The controller takes every committed batch it has not taken and publishes."""
        if self.batch > 0:
            self.controller.step(self.batch - 1)

    def attempt(self, tasks: Sequence[Sequence[dict[str, Any]]], version: Callable[[int], int | None] | None = None,
                before: Callable[[int], None] | None = None, shuffle_seed: int = 0
                ) -> tuple[list[tuple[Any, Any, int]], dict[int, bytes], list[dict[str, Any]]]:
        """One attempt at the current batch, state not committed: each task ``t`` routes its rows
        by decision ``version(t)`` (None: the one bound to the batch, as on Spark), after
        ``before(t)`` ran; the plan key binds the newest decision to the next batch after every
        task routed. Returns the pairs, the joiners' new states and their statistics."""
        plan = self.plan
        routed = []
        for t, rows in enumerate(tasks):
            if before is not None:
                before(t)
            view = load_view(plan.control, plan.lineage, plan.partitions, plan.initial, self.batch,
                             None if version is None else version(t))
            router = Router(plan, view, False)
            for part in (rows[:len(rows) // 2], rows[len(rows) // 2:]):  # two Arrow batches per task
                out = router.add(input_batch(part)) if part else None
                if out is not None:
                    routed.append(routed_frame(out, False))
            routed.append(routed_frame(router.heartbeats(), False))
        frame = pd.concat(routed, ignore_index=True).sample(frac=1, random_state=shuffle_seed)
        pairs, states, stats = [], {}, []
        for key, rows in frame.groupby("jkey"):
            if key == PLAN_KEY:  # as JoinerProcessor's plan key does
                bind_decision(plan.control, plan.lineage, self.batch + 1)  # type: ignore[arg-type]
                continue
            state = pickle.loads(self.states[key]) if key in self.states else JoinerState()
            joiner = Joiner(plan, plan.slot_of(key), state)
            result = joiner.run(rows, self.batch, self.batch, "local")
            write_stats(plan.control, JOINER_OP, joiner.joiner, self.batch, result.stats)  # type: ignore[arg-type]
            write_record(plan.control, joiner.joiner, self.batch, result.stats)  # type: ignore[arg-type]
            if joiner.joiner == 0 and result.stats["new_lineage"]:  # as JoinerProcessor does
                mark_start(plan.control, plan.lineage, self.batch)  # type: ignore[arg-type]
            pairs += list(zip(result.out["left_id"], result.out["right_id"], result.out["window"]))
            states[int(key)] = pickle.dumps(joiner.windows)
            stats.append(result.stats)
        return pairs, states, stats

    def commit(self, states: dict[int, bytes]) -> None:
        """The batch is done: its state becomes the joiners' state."""
        self.states = states
        self.batch += 1
