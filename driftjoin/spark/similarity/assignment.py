"""The workset assignment the balancer publishes and the formulation operators adopt.

Version ``v`` maps workset (or split site) ids to workers and lists the split worksets; it is a
decision of the control plane (:mod:`driftjoin.spark.runtime.decisions`) named ``assignment``.
The holder-probe routing of :mod:`driftjoin.s3j.routing` is exact for any sequence of versions,
so a batch may adopt whichever version is newest when it starts.
"""

from __future__ import annotations

from driftjoin.spark.runtime.decisions import newest, publish

NAME = "assignment"


def write_assignment(root: str, version: int, assignment: dict[int, int], splits: dict[int, int]) -> None:
    """Publish assignment ``version`` (workset or site id -> worker, and splits) to the operators."""
    publish(root, NAME, version, {"assignment": {str(k): v for k, v in assignment.items()},
                                  "splits": {str(k): v for k, v in splits.items()}})


def read_assignment(root: str, newer_than: int = -1) -> tuple[int, dict[int, int], dict[int, int]] | None:
    """The newest published assignment if its version is above ``newer_than``, else None."""
    doc = newest(root, NAME, newer_than)
    if doc is None:
        return None
    return (int(doc["version"]), {int(k): int(v) for k, v in doc["assignment"].items()},
            {int(k): int(v) for k, v in doc["splits"].items()})
