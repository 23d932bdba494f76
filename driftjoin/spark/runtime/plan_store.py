"""The plans of a streaming query's operators, kept beside its checkpoint and checked when it starts.

The plan guard (:mod:`driftjoin.spark.runtime.plan_guard`) checks a restarted query's settings in
its stateful tasks, so only when a micro-batch runs: a query restarted with another threshold on
a source with no new input would idle with the wrong settings and refuse them only when data
comes, maybe days later. This module checks them when the query starts, before any batch:

* :func:`remember` is called by every operator on the streaming DataFrame it returns. It keeps
  the operator's plan (name, settings, the settings a restart may change) in this driver process
  under a random token, and tags the DataFrame with it (a ``SubqueryAlias`` named
  ``driftjoin_plan_<token>``, which costs nothing: the optimizer drops it). Whatever the user
  builds on top, the token stays in the query's logical plan.
* When a query starts, Spark calls the session's listener in the query's own thread before its
  first batch (:mod:`driftjoin.spark.runtime.hub`). The listener finds the tokens in the query's
  plan, in plan order, and reads ``<checkpoint>/driftjoin-plans.json``:

  - no committed batch in the checkpoint: the state is empty, the running plans are written;
  - committed batches and a plans file: each operator's settings are compared with the stored
    ones (:func:`~driftjoin.spark.runtime.plan_guard.compare`); a refused change makes the
    query fail at once with ``PlanChangedError`` naming each setting in the user's terms, as
    ``awaitTermination()`` and ``exception()`` report it; adoptable changes are written;
  - committed batches and no plans file (a checkpoint of an older driftjoin): the plans are
    written after the run's first batch has passed the in-task guard;
  - in every case with a checkpoint, a checkpoint that was moved or copied from another folder
    first names its own state schema files again
    (:func:`~driftjoin.spark.runtime.relocate.relocate_checkpoint`).

Failing a query from its listener uses Spark's own failure path: the query's death cause is set
to a ``StreamingQueryException`` (``STREAM_FAILED``) and the query is stopped from another
thread once its own thread has left the start callbacks (an interrupt inside a Python callback
would break the session's listener), so ``awaitTermination()`` raises it. Spark Connect sessions have no listener in the driver
process; there the in-task guard alone refuses a change, at the first batch.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any

from driftjoin.spark.runtime import hub, jvm
from driftjoin.spark.runtime.connect import is_connect, session_key
from driftjoin.spark.runtime.files import (
    filesystem,
    plain_path,
    read_whole,
    write_whole,
)
from driftjoin.spark.runtime.plan_guard import OperatorPlan, compare, refusal
from driftjoin.spark.runtime.queries import last_commit
from driftjoin.spark.runtime.relocate import relocate_checkpoint
from driftjoin.spark.runtime.static import MemoryHandle

log = logging.getLogger("driftjoin")

#: The file beside a checkpoint's ``offsets`` and ``commits`` that holds its operators' plans.
PLAN_FILE = "driftjoin-plans.json"
#: Prefix of the alias that tags an operator's output with its plan's token.
TAG = "driftjoin_plan_"
_TOKEN = re.compile(TAG + r"([0-9a-f]{16})")


@dataclass(frozen=True)
class Planned:
    """One operator's plan as the start check needs it."""

    operator: str
    settings: dict[str, Any]
    adoptable: frozenset[str]
    defaults: dict[str, Any]

    def stored(self) -> dict[str, Any]:
        return {"operator": self.operator, "settings": self.settings}


_PLANS: dict[str, Planned] = {}
_ATTACHED: set[str] = set()
#: Query id -> (checkpoint, plans) to write once the run's first batch has passed the guard.
_PENDING: dict[str, tuple[str, list[Planned]]] = {}
_LOCK = threading.Lock()


def remember(df: Any, plan: OperatorPlan) -> Any:
    """Keep ``plan`` (an :class:`~driftjoin.spark.runtime.plan_guard.OperatorPlan`, or any plan
    with ``guard(handle)``) for the start check of the query that will run ``df``, and return
    ``df`` tagged with it; a static DataFrame is returned as it is."""
    spark = df.sparkSession
    if not df.isStreaming or is_connect(spark):
        return df
    guard = plan.guard(MemoryHandle())
    token = uuid.uuid4().hex[:16]
    with _LOCK:
        _PLANS[token] = Planned(guard.operator, guard.settings, guard.adoptable, guard.defaults)
        key = session_key(spark)
        if key not in _ATTACHED:
            _ATTACHED.add(key)
            hub.register(spark, "driftjoin-plans", _written_after_batch,
                         on_started=lambda query_id: _check_at_start(spark, query_id))
    return df.alias(f"{TAG}{token}")


def read_plans(checkpoint: str) -> list[dict[str, Any]] | None:
    """The plans stored beside ``checkpoint`` (None: no plans file)."""
    fs, base = filesystem(checkpoint)
    data = read_whole(fs, f"{base.rstrip('/')}/{PLAN_FILE}")
    if data is None:
        return None
    try:
        return list(json.loads(data)["operators"])
    except (ValueError, KeyError, TypeError):
        return None


def _write(checkpoint: str, plans: list[Planned]) -> None:
    fs, base = filesystem(checkpoint)
    fs.create_dir(base, recursive=True)
    data = json.dumps({"operators": [p.stored() for p in plans]}, sort_keys=True, indent=1).encode()
    write_whole(fs, f"{base.rstrip('/')}/{PLAN_FILE}", data)


def refused(stored: list[dict[str, Any]], running: list[Planned]) -> tuple[str | None, bool]:
    """Why the running plans cannot continue the stored ones (None if they can), and whether the
    file must be rewritten (adoptable settings changed)."""
    if [s.get("operator") for s in stored] != [p.operator for p in running]:
        return (f"this query's driftjoin operators ({', '.join(p.operator for p in running)}) are not the ones its "
                f"checkpoint was written by ({', '.join(str(s.get('operator')) for s in stored)}): start it from a "
                "new checkpoint location"), False
    reasons, rewrite = [], False
    for s, p in zip(stored, running):
        diff, differs = compare(s.get("settings", {}), p.settings, p.adoptable, p.defaults)
        rewrite |= differs
        if diff:
            reasons.append(refusal(p.operator, diff))
    return (" ".join(reasons) if reasons else None), rewrite


def _check_at_start(spark: Any, query_id: str) -> None:
    query = spark.streams.get(query_id)
    if query is None:
        return
    with _LOCK:
        running = [_PLANS[t] for t in dict.fromkeys(_TOKEN.findall(jvm.query_plan(query))) if t in _PLANS]
    if not running:
        return
    checkpoint = plain_path(jvm.query_checkpoint(query))
    committed = last_commit(checkpoint)
    if committed is None:
        return
    try:  # a moved checkpoint names its schema files again
        relocate_checkpoint(checkpoint)
    except (OSError, ValueError) as e:  # unreadable metadata: Spark's own error will name the file
        log.warning("driftjoin: could not relocate the checkpoint %s: %s", checkpoint, e)
    if committed < 0:
        _write(checkpoint, running)
        return
    stored = read_plans(checkpoint)
    if stored is None:
        with _LOCK:
            _PENDING[query_id] = (checkpoint, running)
        return
    reason, rewrite = refused(stored, running)
    if reason is not None:
        _fail(spark, query, reason)
    elif rewrite:
        _write(checkpoint, running)


def _written_after_batch(progress: hub.Progress) -> None:
    with _LOCK:
        pending = _PENDING.pop(progress.query, None)
    if pending is not None:
        _write(*pending)


def _fail(spark: Any, query: Any, reason: str) -> None:
    """Make a starting query fail with ``PlanChangedError: <reason>`` (module docstring)."""
    message = f"PlanChangedError: {reason}"
    try:
        jvm.fail_query(spark, query, f"driftjoin compared the query's settings with the plans stored in {PLAN_FILE} "
                                     "of its checkpoint", message)
    except Exception as e:  # a Spark without this path: the query still stops, with the reason logged
        log.error("driftjoin: %s (the query was stopped; it could not be failed: %s)", message, e)
    threading.Thread(target=_stop_after_start, args=(query,), name="driftjoin-refuse", daemon=True).start()


#: A query's status until its thread has returned from the listeners' start callbacks.
_STARTING = "Initializing StreamExecution"


def _stop_after_start(query: Any, timeout: float = 10.0) -> None:
    """Stop ``query`` once its thread has left the start callbacks. Stopping interrupts the
    query's thread; interrupted inside a Python listener's callback, it breaks the Py4J
    callback connection and the session's listeners hear no later query start."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if not query.isActive:  # it ended with its death cause: nothing to stop
                return
            if query.status["message"] != _STARTING:
                break
        except Exception:  # its session is gone
            return
        time.sleep(0.05)
    try:
        query.stop()
    except Exception as e:  # the query ended, or its session stopped, meanwhile: nothing left to stop
        log.debug("driftjoin: stopping the refused query: %s", e)
