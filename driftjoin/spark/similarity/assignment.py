"""The workset assignment the balancer publishes and the formulation operators adopt.

Version ``v`` maps workset (or split site) ids to workers and lists the split worksets; it is a
decision of the control plane (:mod:`driftjoin.spark.runtime.decisions`) named ``assignment``.
The holder-probe routing of :mod:`driftjoin.s3j.routing` is exact for any sequence of versions a
formulation partition adopts, one version per batch.

What must not happen is two attempts of one batch adopting different versions: Spark runs a
batch's formulation task again when the executor that held its output is lost, and reducers that
finished with the first attempt's output are not run again, so memberships the second attempt
routes elsewhere are lost (seen on the standalone cluster while an executor was removed during a
balancing round). A version therefore names the first batch it may route (``from_batch``: two
batches after the newest batch whose statistics the balancer had read, so after every batch that
may be running when it is published), and a batch adopts the newest version whose ``from_batch``
is not above its own id: every attempt of a batch, and its replay after a restart, sees the same
versions.
"""

from __future__ import annotations

from driftjoin.spark.runtime.decisions import publish, read_version, versions

NAME = "assignment"


def write_assignment(root: str, version: int, assignment: dict[int, int], splits: dict[int, int],
                     from_batch: int | None = None) -> None:
    """Publish assignment ``version`` (workset or site id -> worker, and splits) to the operators,
    for the batches from ``from_batch`` on (None: any batch, for runs outside a streaming query)."""
    publish(root, NAME, version, {"assignment": {str(k): v for k, v in assignment.items()},
                                  "splits": {str(k): v for k, v in splits.items()}, "from_batch": from_batch})


def read_assignment(root: str, newer_than: int = -1, batch: int | None = None,
                    ) -> tuple[int, dict[int, int], dict[int, int]] | None:
    """The newest published assignment above version ``newer_than`` that batch ``batch`` may
    adopt (its ``from_batch`` not above it; None: the newest), else None."""
    doc = None
    for version in reversed(versions(root, NAME)):
        if version <= newer_than:
            break
        found = read_version(root, NAME, version)
        if found is not None and (batch is None or found.get("from_batch") is None or found["from_batch"] <= batch):
            doc = found
            break
    if doc is None:
        return None
    return (int(doc["version"]), {int(k): int(v) for k, v in doc["assignment"].items()},
            {int(k): int(v) for k, v in doc["splits"].items()})
