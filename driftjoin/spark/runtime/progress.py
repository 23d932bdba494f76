"""Every progress report of a streaming query, not only the last 100 that Spark keeps.

``StreamingQuery.recentProgress`` holds the newest ``spark.sql.streaming.numRecentProgressUpdates``
reports (100): a loop that sums ``numInputRows`` over it stops growing after 100 micro-batches,
and a run waiting for all its records then waits until its time limit (a 5-minute benchmark of
155 batches did). :class:`ProgressLog` keeps each batch's report once; polled at least once per
100 batches, it has them all.
"""

from __future__ import annotations

from typing import Any


class ProgressLog:
    """The progress reports of one query by batch id, gathered by :meth:`poll`."""

    def __init__(self, query: Any) -> None:
        self.query = query
        self.reports: dict[int, dict[str, Any]] = {}

    def poll(self) -> int:
        """Take the query's recent reports; returns the records read so far.

        An idle trigger reports the id of the batch still to come with no input: it never
        replaces the report of a batch that read records."""
        for p in self.query.recentProgress:
            if p["numInputRows"] or p["batchId"] not in self.reports:
                self.reports[p["batchId"]] = p
        return self.records

    @property
    def records(self) -> int:
        return sum(p["numInputRows"] for p in self.reports.values())

    @property
    def progress(self) -> list[dict[str, Any]]:
        """The reports in batch order."""
        return [self.reports[b] for b in sorted(self.reports)]

    @property
    def with_input(self) -> list[dict[str, Any]]:
        """The reports of batches that read records, in batch order."""
        return [p for p in self.progress if p["numInputRows"]]
