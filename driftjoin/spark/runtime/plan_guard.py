"""The plan of a stateful operator, stored with its checkpoint, so a restart cannot change it silently.

A streaming query restarted from a checkpoint keeps its state, but the settings it is rebuilt
with are whatever the new code passes. Some settings decide where state lives and what it means
(the number of workers, the threshold, the centroids, the window, the metric): if they changed,
the old state would be read under the new meaning and pairs would be lost with no error (issue
12 found 4,283 of 6,821 pairs after a restart with parallelism 5 instead of 2). Spark itself
even keeps the old number of state partitions whatever the session says.

So each operator describes its plan as a flat dict of JSON values (:meth:`settings` of the
operator's plan class) and every stateful key stores it in a ``ValueState`` named ``plan`` the
first time it runs. On every later batch the stored plan is compared with the running one:

* a setting in ``adoptable`` (e.g. ``metrics_dir``, where statistics go) is adopted: the new
  value is stored and used from this batch on, which is exact because it does not touch state;
* a setting the stored plan lacks (one added to the operator after the checkpoint was written)
  is compared as the value it implied then (``defaults``), so an older checkpoint keeps working
  with the settings it was written with and is refused with its old value named otherwise;
* any other difference fails the batch with :class:`PlanChangedError`, naming each setting with
  its old and new value and what to do. Nothing of that batch is committed (Spark commits a
  batch's state and output together), so the checkpoint stays usable with the old settings.

The check only works if a key holding the old plan is visited. Keys chosen from the settings
(one per worker) change with them, so every operator also routes a heartbeat to one key that
never depends on the settings (:data:`PLAN_KEY`): it is visited on every batch that has data,
whatever the settings, and it holds the plan from the first batch on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

import numpy as np
from pyspark.sql.types import BinaryType, StructField, StructType

#: The grouping key that holds the plan of an operator whose other keys depend on its settings.
#: Worker keys are small non-negative ints (:func:`driftjoin.spark.runtime.keys.slot_keys`).
PLAN_KEY = -1

_PLAN_SCHEMA = StructType([StructField("plan", BinaryType(), False)])


class PlanChangedError(RuntimeError):
    """A query was restarted from a checkpoint with settings its state cannot be read under."""


def digest(array: Any) -> str:
    """A short stable fingerprint of an array's values and shape (for centroids, samples...)."""
    a = np.ascontiguousarray(np.asarray(array, dtype=np.float64))
    return f"{a.shape}:{hashlib.sha256(a.tobytes()).hexdigest()[:16]}"


def _canonical(settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings as JSON values (tuples become lists), so stored and running plans compare."""
    return json.loads(json.dumps(dict(settings), sort_keys=True, default=str))


def changes(stored: Mapping[str, Any], running: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Settings whose values differ: ``{name: (stored, running)}`` (missing values are None)."""
    names = sorted(set(stored) | set(running))
    return {n: (stored.get(n), running.get(n)) for n in names if stored.get(n) != running.get(n)}


def refusal(operator: str, diff: Mapping[str, tuple[Any, Any]]) -> str:
    """The message of :class:`PlanChangedError`: every changed setting and what to do."""
    lines = "; ".join(f"{name}: checkpoint has {old!r}, this query has {new!r}" for name, (old, new) in diff.items())
    return (f"{operator}: this query was restarted from a checkpoint written with other settings ({lines}). "
            "Its state cannot be read under the new settings without losing results. Restart it with the "
            "settings of the checkpoint, or start it from a new checkpoint location (a new query).")


class PlanGuard:
    """Stores an operator's plan in a key's state and refuses a different one (module docstring)."""

    def __init__(self, handle: Any, operator: str, settings: Mapping[str, Any],
                 adoptable: frozenset[str] = frozenset(), defaults: Mapping[str, Any] | None = None) -> None:
        self.value = handle.getValueState("plan", _PLAN_SCHEMA)
        self.operator = operator
        self.settings = _canonical(settings)
        self.adoptable = adoptable
        self.defaults = _canonical(defaults or {})

    def check(self) -> None:
        """Store the plan on a key's first batch; adopt or refuse differences on later ones."""
        encoded = json.dumps(self.settings, sort_keys=True).encode()
        if not self.value.exists():
            self.value.update((encoded,))
            return
        stored = {**self.defaults, **json.loads(self.value.get()[0])}
        if stored == self.settings:
            return
        diff = changes(stored, self.settings)
        refused = {n: d for n, d in diff.items() if n not in self.adoptable}
        if refused:
            raise PlanChangedError(refusal(self.operator, refused))
        self.value.update((encoded,))
