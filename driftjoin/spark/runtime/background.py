"""Driver-side work that overlaps a Spark job: the job runs in a second thread while the caller
goes on, and the caller takes its result when it needs it.

Why a :class:`pyspark.InheritableThread`: a job started from a plain thread loses the caller's
local properties (job group, description, scheduler pool), so it would escape a
``cancelJobGroup`` or ``cancelAllJobs`` aimed at the caller's work.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pyspark import InheritableThread

R = TypeVar("R")


def in_background(fn: Callable[[], R]) -> Callable[[], R]:
    """Start ``fn`` in a second thread now; the returned function waits for it and returns its
    result (or raises its error). Call the returned function exactly once (it joins the thread).

    Parameters
    ----------
    fn : the work, typically one that runs a Spark job (``df.count()``).

    Example::

        >>> result = in_background(lambda: sum(range(10)))
        >>> result()
        45
    """
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 -- handed to the caller, raised there
            out["error"] = e

    thread = InheritableThread(target=run, name="driftjoin-background", daemon=True)
    thread.start()

    def result() -> R:
        thread.join()
        if "error" in out:
            raise out["error"]  # type: ignore[misc]
        return out["value"]  # type: ignore[return-value]

    return result
