"""The workset assignment the balancer publishes and the formulation operators adopt.

Version ``v`` maps workset (or split site) ids to workers and lists the split worksets; it is a
decision of the control plane (:mod:`driftjoin.spark.runtime.decisions`) named ``assignment``.
The holder-probe routing of :mod:`driftjoin.s3j.routing` is exact for any sequence of versions a
formulation partition adopts, one version per batch; what must not happen is two attempts of one
batch adopting different versions (a formulation task Spark runs again after losing an executor
would route memberships to reducers that finished without them). So a batch adopts the version
*bound* to it (:func:`~driftjoin.spark.runtime.decisions.bound`), which the formulation stage's
plan key binds during the batch before (:meth:`FormulationProcessor.bind_decisions
<driftjoin.spark.similarity.s3j.FormulationProcessor.bind_decisions>`).
"""

from __future__ import annotations

from driftjoin.spark.runtime.decisions import bind, publish, read_bound

NAME = "assignment"


def write_assignment(root: str, version: int, assignment: dict[int, int], splits: dict[int, int]) -> None:
    """Publish assignment ``version`` (workset or site id -> worker, and splits) to the operators."""
    publish(root, NAME, version, {"assignment": {str(k): v for k, v in assignment.items()},
                                  "splits": {str(k): v for k, v in splits.items()}})


def bind_assignment(root: str, batch: int) -> None:
    """Bind the newest published assignment to the batches from ``batch`` on."""
    bind(root, NAME, batch)


def read_assignment(root: str, newer_than: int = -1, batch: int | None = None, query: str | None = None,
                    ) -> tuple[int, dict[int, int], dict[int, int]] | None:
    """The assignment bound to batch ``batch`` (None: the newest published) if its version is above
    ``newer_than``, else None; ``query``, the streaming query's id, keeps the binding read for the
    process's other keys of the batch (:func:`~driftjoin.spark.runtime.decisions.bound`)."""
    doc = read_bound(root, NAME, batch, newer_than, query)
    if doc is None:
        return None
    return (int(doc["version"]), {int(k): int(v) for k, v in doc["assignment"].items()},
            {int(k): int(v) for k, v in doc["splits"].items()})
