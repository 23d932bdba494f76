"""The partitioned top-k join's shared lower bound, decided on the driver.

``topk_set_join(..., parallelism=p, share_bound=True)``: after every micro-batch (:func:`attach`)
:class:`SharedBoundController` combines the stocks the workers report into one skyband lower
bound and publishes it as a versioned decision that every worker prunes with from its next
micro-batch on.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from driftjoin.spark.runtime.decisions import newest, publish
from driftjoin.spark.runtime.hub import register
from driftjoin.spark.runtime.stats import read_newest_stats
from driftjoin.spark.topk.operators import SHARED_BOUND
from driftjoin.swoop.bound import Staircase


@dataclass
class SharedBoundController:
    """The global skyband lower bound for the workers of a partitioned top-k join.

    Each worker writes the similarities and end times of its stock with its statistics
    (``swoop_worker``); :meth:`step` combines the newest record of every worker into
    :meth:`Staircase.of_pairs <driftjoin.swoop.bound.Staircase.of_pairs>` and publishes it when
    it changed. Pairs of a stock are valid pairs, and a valid pair stays valid until its end, so
    whatever mix of batches the records come from, the staircase is a lower bound of the global
    ``lb(t, k)`` for every later end time ``t`` (:mod:`driftjoin.swoop.bound`): workers may prune
    with it at any later batch, and a replayed batch may adopt a newer version than its first
    attempt did, exactly.
    """

    metrics_dir: str
    k: int
    parallelism: int
    version: int = 0
    _used: dict[int, int] = field(default_factory=dict)  # worker -> seq of the records used
    _last: tuple[list[float], list[float]] | None = None

    def __post_init__(self) -> None:
        current = newest(self.metrics_dir, SHARED_BOUND)
        if current is not None:
            self.version, self._last = int(current["version"]), (current["ends"], current["sims"])

    def step(self) -> int | None:
        """Publish a new bound if every worker reported and something changed; its version."""
        records = read_newest_stats(self.metrics_dir, "swoop_worker")
        if len(records) < self.parallelism or any("stock_sims" not in r for r in records.values()):
            return None
        used = {w: int(r["seq"]) for w, r in records.items()}
        if used == self._used:
            return None
        self._used = used
        bound = Staircase.of_pairs(np.concatenate([r["stock_sims"] for r in records.values()]),
                                   np.concatenate([r["stock_ends"] for r in records.values()]), self.k)
        steps = (bound.ends.tolist(), bound.sims.tolist())
        if not steps[0] or steps == self._last:
            return None
        self._last = steps
        self.version += 1
        publish(self.metrics_dir, SHARED_BOUND, self.version, {"ends": steps[0], "sims": steps[1]})
        return self.version


def attach(spark, controller: SharedBoundController) -> None:
    """Run ``controller.step()`` on the driver after every micro-batch of any query of the
    session; it replaces the controller of an earlier join on the same directory."""
    register(spark, f"{type(controller).__name__}:{controller.metrics_dir}", lambda _: controller.step())
