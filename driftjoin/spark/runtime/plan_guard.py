"""The plan of a stateful operator, stored with its checkpoint, so a restart cannot change it silently.

A streaming query restarted from a checkpoint keeps its state, but the settings it is rebuilt
with are whatever the new code passes. Some settings decide where state lives and what it means
(the number of workers, the threshold, the centroids, the window, the metric): if they changed,
the old state would be read under the new meaning and pairs would be lost with no error (a
restart with parallelism 5 instead of 2 found about two thirds of the pairs). Spark itself
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

A batch runs only when input arrives, so the same plans are also kept beside the checkpoint and
compared when the query starts (:mod:`driftjoin.spark.runtime.plan_store`, with :func:`compare`
and :func:`refusal` from here); the check in the tasks stays for sessions without a driver-side
listener (Spark Connect). Changed settings are named in the user's terms (:func:`describe`):
``window`` rather than ``window_seconds``, "centroids differ" rather than two fingerprints.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from pyspark.sql.types import BinaryType, StructField, StructType

from driftjoin.spark.runtime.keys import SlotPlan
from driftjoin.windows import TICKS_PER_SECOND

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


def _seconds(value: Any) -> str:
    if value is None:
        return "none"
    return f"{value:g} s" if isinstance(value, (int, float)) else repr(value)


def _ticks(value: Any) -> str:
    return _seconds(value / TICKS_PER_SECOND if isinstance(value, (int, float)) else value)


_TIME_BASIS = {"event": "event time (time_col=)", "ingest": "ingestion time (ingest_col=)",
               "batch": "the micro-batch time (no time_col= or ingest_col=)"}
_TRANSPORT = {"flat": "'pairs'", "lean": "'pairs-lean'", "grouped": "'grouped' or 'pairs-grouped'"}

#: Stored settings whose names or values are internal, said in the user's terms: a function of
#: (checkpoint's value, this query's value) to the text after the name.
_PLAIN: dict[str, tuple[str, Any]] = {
    "centroids": ("centroids", lambda old, new: "differ (drawn from seed= and bounds= for parallelism and dim, "
                                                "or given as centroids=)"),
    "grid": ("the grid layout", lambda old, new: "differs (it follows parallelism and whether it is a self-join)"),
    "window_seconds": ("window", lambda old, new: f"checkpoint has {_seconds(old)}, this query has {_seconds(new)}"),
    "window_kind": ("the kind of window", lambda old, new: f"checkpoint has {old!r}, this query has {new!r} "
                                                           "('tumbling': window=, 'sliding': window= and slide=, "
                                                           "'interval': within=, 'unbounded': window=None)"),
    "window_ticks": ("window", lambda old, new: f"checkpoint has {_ticks(old)}, this query has {_ticks(new)}"),
    "slide_ticks": ("slide", lambda old, new: f"checkpoint has {_ticks(old)}, this query has {_ticks(new)}"),
    "within_ticks": ("within", lambda old, new: f"checkpoint has {_ticks(old)}, this query has {_ticks(new)}"),
    "window_offset_ticks": ("the windows' start offset", lambda old, new: f"checkpoint has {_ticks(old)}, "
                                                                          f"this query has {_ticks(new)}"),
    "within_seconds": ("within", lambda old, new: f"checkpoint has {_seconds(old)}, this query has {_seconds(new)}"),
    "design": ("design", lambda old, new: f"checkpoint has {old or 'owner'!r}, this query has {new or 'owner'!r}"),
    "parallelism": ("parallelism", lambda old, new: f"checkpoint has {old or 1}, this query has {new or 1}"),
    "lateness": ("watermark", lambda old, new: f"checkpoint has {_seconds(old)}, this query has {_seconds(new)}"),
    "time_basis": ("what decides a record's window", lambda old, new: f"checkpoint has {_TIME_BASIS.get(old, old)}, "
                                                                      f"this query has {_TIME_BASIS.get(new, new)}"),
    "stages": ("balance=", lambda old, new: "the checkpoint was written " + ("with" if old == 2 else "without")
               + " a balancer, this query runs " + ("with" if new == 2 else "without") + " one"),
    "transport": ("output=", lambda old, new: f"checkpoint has {_TRANSPORT.get(old, old)}, this query has "
                                              f"{_TRANSPORT.get(new, new)}"),
    "self_join": ("right=", lambda old, new: "checkpoint has " + ("a self-join (right=None)" if old else "two inputs")
                  + ", this query has " + ("a self-join" if new else "two inputs")),
    "two_stream": ("right=", lambda old, new: "checkpoint has " + ("two inputs" if old else "a self-join (right=None)")
                   + ", this query has " + ("two inputs" if new else "a self-join")),
    "two_streams": ("other=", lambda old, new: "checkpoint has " + ("two inputs" if old else "one input (other=None)")
                    + ", this query has " + ("two inputs" if new else "one input")),
    "float32": ("the vector type", lambda old, new: "checkpoint has " + ("array<float>" if old else "array<double>")
                + ", this query has " + ("array<float>" if new else "array<double>")),
    "state_format": ("state_format", lambda old, new: f"checkpoint has {old!r}, this query has {new!r} (the "
                                                      "checkpoint was written by another driftjoin version)"),
    "columns": ("the input columns", lambda old, new: "differ from the checkpoint's"),
}


def describe(name: str, old: Any, new: Any) -> str:
    """One changed setting in the user's terms: ``threshold: checkpoint has 0.001, this query has 0.002``."""
    if name in _PLAIN:
        label, say = _PLAIN[name]
        return f"{label}: {say(old, new)}"
    return f"{name}: checkpoint has {old!r}, this query has {new!r}"


def refusal(operator: str, diff: Mapping[str, tuple[Any, Any]]) -> str:
    """The message of :class:`PlanChangedError`: every changed setting and what to do."""
    lines = "; ".join(describe(name, old, new) for name, (old, new) in diff.items())
    return (f"{operator}: this query was restarted from a checkpoint written with other settings ({lines}). "
            "Its state cannot be read under the new settings without losing results. Restart it with the "
            "settings of the checkpoint, or start it from a new checkpoint location (a new query).")


def compare(stored: Mapping[str, Any], settings: Mapping[str, Any], adoptable: frozenset[str],
            defaults: Mapping[str, Any]) -> tuple[dict[str, tuple[Any, Any]], bool]:
    """The refused changes of ``settings`` against a ``stored`` plan (a setting the stored plan
    lacks is compared as its ``defaults`` value) and whether anything differs at all (adoptable
    changes are then stored)."""
    stored = {**defaults, **stored}
    if stored == settings:
        return {}, False
    diff = changes(stored, settings)
    return {n: d for n, d in diff.items() if n not in adoptable}, True


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
        refused, differs = compare(json.loads(self.value.get()[0]), self.settings, self.adoptable, self.defaults)
        if refused:
            raise PlanChangedError(refusal(self.operator, refused))
        if differs:
            self.value.update((encoded,))


class OperatorPlan(SlotPlan):
    """Base of every operator's plan (a frozen dataclass shipped to the tasks by pickling): its
    workers' keys (:class:`~driftjoin.spark.runtime.keys.SlotPlan`) and its guard.

    A plan names its :attr:`operator` and says what is stored with the checkpoint
    (:meth:`settings`); :meth:`adoptable` (default :attr:`ADOPTABLE`) and :meth:`defaults` say
    which changes a restart may make and what a setting missing from an older checkpoint meant.
    :meth:`guard` is the one guard every stateful processor opens (:mod:`driftjoin.spark.runtime.processor`),
    and :func:`driftjoin.spark.runtime.plan_store.remember` keeps the same three for the start check.
    """

    #: the operator's name (``"similarity_join"``, ...), in the stored plan and in messages
    operator: ClassVar[str] = ""
    #: settings a restarted query may change: by default where statistics go (it touches no state)
    ADOPTABLE: ClassVar[frozenset[str]] = frozenset({"metrics_dir"})

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint: a flat dict of JSON values."""
        raise NotImplementedError

    def adoptable(self) -> frozenset[str]:
        """Settings a restart may change (:data:`ADOPTABLE` unless the plan says otherwise)."""
        return self.ADOPTABLE

    def defaults(self) -> dict[str, Any]:
        """What a setting missing from a checkpoint of an earlier driftjoin meant (none by default)."""
        return {}

    def guard(self, handle: Any) -> PlanGuard:
        """The guard of a stateful key: stores the plan on its first batch, refuses a changed one later."""
        return PlanGuard(handle, self.operator, self.settings(), self.adoptable(), self.defaults())
