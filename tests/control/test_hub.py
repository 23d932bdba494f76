"""The control plane's one listener per session (driftjoin.spark.runtime.hub), driven with Spark's
event objects replaced by plain ones, in the orders the listener bus can deliver them."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from driftjoin.spark.runtime.hub import Progress, register, registered


class _Streams:
    def __init__(self) -> None:
        self.listeners: list = []

    def addListener(self, listener) -> None:  # noqa: N802 (Spark's name)
        self.listeners.append(listener)


def _session() -> SimpleNamespace:
    key = uuid.uuid4().hex
    return SimpleNamespace(_jsparkSession=SimpleNamespace(sessionUUID=lambda: key), streams=_Streams())


def _progress(query: str, run: str, batch: int, rows: int = 10) -> SimpleNamespace:
    # the fields of Spark's StreamingQueryProgress the listener reads (the batch's start as ISO-8601)
    return SimpleNamespace(progress=SimpleNamespace(id=query, runId=run, batchId=batch, numInputRows=rows,
                                                    timestamp=f"2026-11-28T00:00:{batch:02d}.000Z",
                                                    durationMs={"triggerExecution": 100}))


def test_one_listener_per_session_whatever_the_number_of_controllers() -> None:
    spark = _session()
    for i in range(20):
        register(spark, f"equi:/m{i}", lambda p: None)
    assert len(spark.streams.listeners) == 1
    assert len(registered(spark)) == 20
    other = _session()
    register(other, "equi:/m0", lambda p: None)
    assert len(other.streams.listeners) == 1 and registered(other) == ["equi:/m0"]


def test_a_late_termination_of_the_previous_run_does_not_silence_the_restarted_runs_controller() -> None:
    """The bus delivers run 1's last progress and termination after run 2's join was built (same
    query id, as a restart from the checkpoint keeps it): the new controller hears all of it and
    keeps hearing run 2; the old one hears nothing once replaced."""
    spark = _session()
    first: list[Progress] = []
    second: list[Progress] = []
    ended: list[str] = []
    register(spark, "equi:/m", first.append)
    (listener,) = spark.streams.listeners
    listener.onQueryProgress(_progress("q", "run1", 0))
    register(spark, "equi:/m", second.append, ended.append)  # run 2's join, built before run 1's events arrived
    listener.onQueryProgress(_progress("q", "run1", 1))
    listener.onQueryTerminated(SimpleNamespace(id="q", runId="run1"))
    listener.onQueryProgress(_progress("q", "run2", 2))
    listener.onQueryProgress(_progress("q", "run2", 3, rows=0))
    assert [p.batch for p in first] == [0]
    assert [(p.run, p.batch, p.rows) for p in second] == [("run1", 1, 10), ("run2", 2, 10), ("run2", 3, 0)]
    assert ended == ["q"]
    assert registered(spark) == ["equi:/m"]


def test_a_failing_controller_neither_reaches_the_query_nor_stops_the_others(caplog) -> None:
    spark = _session()
    heard: list[int] = []

    def broken(p: Progress) -> None:
        raise RuntimeError("no such file")

    register(spark, "natural:/a", broken)
    register(spark, "equi:/b", lambda p: heard.append(p.batch))
    spark.streams.listeners[0].onQueryProgress(_progress("q", "r", 7))
    assert heard == [7]
    assert "natural:/a failed a round" in caplog.text


def test_starts_reach_the_controllers_that_ask_for_them() -> None:
    spark = _session()
    started: list[str] = []
    register(spark, "natural:/a", lambda p: None, None, started.append)
    register(spark, "equi:/b", lambda p: None)
    spark.streams.listeners[0].onQueryStarted(SimpleNamespace(id="q", runId="r"))
    assert started == ["q"]
