"""The one shape of driftjoin's stateful processors (``transformWithStateInPandas``).

Every operator's stateful stage starts a micro-batch the same way: Spark hands a key an
iterator of row frames; a key with no rows does nothing; every key with rows first checks the
plan stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`: a restart with other
settings fails here, before anything is committed); the plan key
(:data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`), which the routers' heartbeats reach
whatever the settings, exists for that check and for binding the operator's routing decisions to
the next batch (:meth:`OperatorProcessor.bind_decisions`, :func:`driftjoin.spark.runtime.decisions.bind`)
unless the operator gives it work. Then the operator's own :meth:`OperatorProcessor.batch` runs
on the key's rows as one frame.

A checkpoint whose keys hold state in a form an earlier driftjoin wrote (before the shared state
layer) is refused the one way (:meth:`OperatorProcessor.refuse_old_state`,
:class:`~driftjoin.spark.runtime.state.OldCheckpointError`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessor,
    StatefulProcessorHandle,
)

from driftjoin.spark.runtime.plan_guard import PLAN_KEY, OperatorPlan
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.state import BLOB, old_checkpoint

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd


class OperatorProcessor(StatefulProcessor):
    """Base of every driftjoin stateful processor (module docstring).

    Subclasses create their state in :meth:`open` and process a key's rows in :meth:`batch`.
    """

    #: whether the keys check the stored plan (False only where another stage checks it for them)
    checks_plan: ClassVar[bool] = True
    #: whether :meth:`batch` also runs for :data:`PLAN_KEY` (else that key only checks the plan)
    runs_plan_key: ClassVar[bool] = False

    def __init__(self, plan: OperatorPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.guard = self.plan.guard(handle) if self.checks_plan else None
        self.old_states: list[Any] = []
        self.open(handle)

    def keep_old_states(self, handle: StatefulProcessorHandle, *names: str) -> None:
        """Open the value states ``names`` in which releases before the shared state layer kept
        this processor's state (one pickled value per key), so :meth:`refuse_old_state` can tell
        such a checkpoint. Called from :meth:`open` where those releases opened them."""
        self.old_states += [handle.getValueState(name, BLOB) for name in names]

    def refuse_old_state(self, new: bool) -> None:
        """Refuse a key whose state is ``new`` to the state layer but held in an old value state."""
        if new and any(state.exists() for state in self.old_states):
            raise old_checkpoint(getattr(self.plan, "operator", "") or type(self).__name__)

    def open(self, handle: StatefulProcessorHandle) -> None:
        """Create the processor's state handles."""
        raise NotImplementedError

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:  # noqa: N802
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        if self.guard is not None:
            self.guard.check(key[0])
        if key[0] == PLAN_KEY:
            batch = task_query().batch_id
            if batch is not None:
                self.bind_decisions(batch + 1)
            if not self.runs_plan_key:
                return
        yield from self.batch(key[0], pd.concat(frames, ignore_index=True))

    def bind_decisions(self, batch: int) -> None:
        """Bind the decisions this operator's routers read to batch ``batch`` (run by the plan key
        once per batch with data, the batch before; :func:`driftjoin.spark.runtime.decisions.bind`).
        Nothing by default: an operator whose routers read a controller's decisions binds them."""

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        """The output frames of one key's rows of one micro-batch."""
        raise NotImplementedError

    def close(self) -> None:
        pass
