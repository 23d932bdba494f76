"""Task-to-worker assignment (end of section 3.2): a new task goes to the worker with the fewest.

Tasks are logical units of join state; several may share a worker. The pool hands out task ids
(never reused, so a released task's state can never be confused with a new one) and keeps the
number of live tasks per worker. Ties go to the lowest worker id, which keeps runs deterministic.
"""

from __future__ import annotations


class WorkerPool:
    """``p`` workers, a live-task count per worker, and the worker of every live task."""

    def __init__(self, p: int) -> None:
        if p < 1:
            raise ValueError("p must be >= 1")
        self.p = p
        self.task_counts = [0] * p
        self._worker: dict[int, int] = {}
        self._next = 0

    def allocate(self) -> int:
        """Create a task on the worker with the fewest tasks and return its id."""
        counts = self.task_counts
        w = min(range(self.p), key=counts.__getitem__)
        task = self._next
        self._next += 1
        self._worker[task] = w
        counts[w] += 1
        return task

    def release(self, task: int) -> None:
        self.task_counts[self._worker.pop(task)] -= 1

    def worker_of(self, task: int) -> int:
        return self._worker[task]
