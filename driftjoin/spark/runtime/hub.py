"""One query listener per Spark session, through which every driver-side controller hears its queries.

The controllers of the control plane (S3J's workset balancer, SWOOP's shared bound,
``natural_join``'s partitioner, ``equi_join``'s routing) decide after committed micro-batches, so
they need Spark's query events. :func:`register` puts a controller under a key (its kind and
directory); one ``StreamingQueryListener`` per session, added on the first registration, hands
each start, progress and termination event to every controller registered through that session.

Why one listener and why keys:

- PySpark calls each Python listener through Py4J for every event of every query of the session.
  With a listener per join, a session that had built many joins (a test session builds dozens)
  made every event cost as many round trips, the listener bus fell minutes behind, and decisions
  came late.
- A controller leaves when a newer one takes its key (a join rebuilt on the same directory, as a
  query restarted in the same driver does), never on a termination event. Events reach listeners
  late, and a query keeps its id across restarts, so a controller that removed itself when "its"
  query terminated could be the restarted run's controller hearing its predecessor's end: the
  restarted run's routing then stopped adapting (the output stayed exact). A controller whose
  query has ended stays registered and ignores other queries' events cheaply.

The events reach the controllers in the bus's order, on the bus's thread; an exception in a
controller is logged and never reaches the query (every join stays exact without decisions).
On Spark Connect the listener leaves when the session stops (:func:`_leave_before_stop`) and the
client's thread that reads the events is a daemon (:func:`_add_on_connect`), so a script ends as
it would without driftjoin: ``spark.stop()`` prints nothing, and a script that does not call it
still exits.

On a Spark Connect session the listener is a client-side one (PySpark 4's Connect client keeps a
listener bus fed by the server's query events), so the controllers run in this process on
Connect as well: they need only the events and the metrics directory, which this process, the
driver and the executors must all reach (:func:`driftjoin.spark.runtime.connect.shares_files`,
or a ``pyarrow.fs`` URI).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from driftjoin.spark.runtime.connect import is_connect, session_key

log = logging.getLogger("driftjoin")


@dataclass(frozen=True)
class Progress:
    """A finished micro-batch of some query: its query and run ids, batch id and input rows."""

    query: str
    run: str
    batch: int
    rows: int


@dataclass(frozen=True)
class _Entry:
    on_progress: Callable[[Progress], Any]
    on_terminated: Callable[[str], Any] | None
    on_started: Callable[[str], Any] | None = None
    on_ended: Callable[[str, str], Any] | None = None


class _Hub:
    """The controllers registered through one session, by key."""

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {}
        self.lock = threading.Lock()

    def progress(self, event: Progress) -> None:
        for key, entry in self._snapshot():
            self._call(key, entry.on_progress, event)

    def terminated(self, query: str, run: str) -> None:
        for key, entry in self._snapshot():
            if entry.on_terminated is not None:
                self._call(key, entry.on_terminated, query)
            if entry.on_ended is not None:
                self._call(key, lambda q, ended=entry.on_ended: ended(q, run), query)

    def started(self, query: str) -> None:
        for key, entry in self._snapshot():
            if entry.on_started is not None:
                self._call(key, entry.on_started, query)

    def _snapshot(self) -> list[tuple[str, _Entry]]:
        with self.lock:
            return list(self.entries.items())

    @staticmethod
    def _call(key: str, fn: Callable[[Any], Any], arg: Any) -> None:
        try:
            fn(arg)
        except Exception:  # the query must not die of its control plane: it stays exact
            log.exception("driftjoin control plane: %s failed a round; its decisions stay as they are", key)


_HUBS: dict[str, _Hub] = {}
_HUBS_LOCK = threading.Lock()


def register(spark: Any, key: str, on_progress: Callable[[Progress], Any],
             on_terminated: Callable[[str], Any] | None = None, on_started: Callable[[str], Any] | None = None,
             on_ended: Callable[[str, str], Any] | None = None) -> None:
    """Call ``on_progress`` after every finished micro-batch of every query of ``spark``'s session
    (``on_terminated`` with the query id when one terminates, ``on_ended`` with its query and run
    ids, ``on_started`` with the query id when one starts), replacing whatever was registered under
    ``key`` before.

    On a classic session ``on_started`` runs synchronously in the query's thread before its first
    micro-batch; on Spark Connect the events come from the server through the client's listener
    bus, after the fact, and ``on_started`` is called only for queries started by this client."""
    hub = _hub(spark)
    with hub.lock:
        hub.entries[key] = _Entry(on_progress, on_terminated, on_started, on_ended)


def registered(spark: Any) -> list[str]:
    """The keys registered through ``spark``'s session."""
    return list(_hub(spark).entries)


def _hub(spark: Any) -> _Hub:
    key = session_key(spark)
    with _HUBS_LOCK:
        hub = _HUBS.get(key)
        if hub is None:
            hub = _HUBS[key] = _Hub()
            listener = _listener(hub)
            if is_connect(spark):
                _add_on_connect(spark, listener)
                _leave_before_stop(spark, key, listener)
            else:
                spark.streams.addListener(listener)
        return hub


def _add_on_connect(spark: Any, listener: Any) -> None:
    """Add ``listener`` to a Connect session from a daemon thread.

    The Connect client reads the server's query events in a thread it starts with the session's
    first listener, and that thread inherits the daemon flag of the thread that adds the listener.
    Added from the user's (main) thread it is not a daemon, and it waits on the server's event
    stream until the listener is removed: a script that ends without ``spark.stop()`` (a failed
    query's traceback) would never exit. Added from a daemon thread, it ends with the script."""
    failed: list[BaseException] = []

    def add() -> None:
        try:
            spark.streams.addListener(listener)
        except BaseException as e:  # handed to the caller's thread
            failed.append(e)

    adder = threading.Thread(target=add, name="driftjoin-listener", daemon=True)
    adder.start()
    adder.join()
    if failed:
        raise failed[0]


def _leave_before_stop(spark: Any, key: str, listener: Any) -> None:
    """Make ``spark.stop()`` of a Connect session remove the hub's listener before it releases the session.

    PySpark's Connect ``stop()`` releases the session on the server but leaves the client's
    listeners in place; when the session object is collected later (at the latest when Python
    exits) the client removes them, asks the released session to drop its listener bus, and warns
    ``Failed to remove the listener ... NO_ACTIVE_SESSION``, although the user only called
    ``stop()``. So this session's ``stop`` first removes the listener driftjoin added (while the
    session still answers; it waits for the events already sent) and forgets the hub, then stops as
    before. A listener the user added is left to PySpark, as without driftjoin."""
    stop = spark.stop

    def stop_after_the_control_plane() -> None:
        with _HUBS_LOCK:
            _HUBS.pop(key, None)
        try:
            spark.streams.removeListener(listener)
        except Exception:  # the server is gone already: nothing to remove there
            log.debug("driftjoin control plane: the listener of %s was not removed before stop", key, exc_info=True)
        stop()

    spark.stop = stop_after_the_control_plane


def _listener(hub: _Hub) -> Any:
    from pyspark.sql.streaming import StreamingQueryListener

    class _ControlPlaneListener(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
            hub.started(str(event.id))

        def onQueryProgress(self, event) -> None:  # noqa: N802
            p = event.progress
            hub.progress(Progress(str(p.id), str(p.runId), int(p.batchId), int(p.numInputRows)))

        def onQueryIdle(self, event) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event) -> None:  # noqa: N802
            hub.terminated(str(event.id), str(event.runId))

    return _ControlPlaneListener()
