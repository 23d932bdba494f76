"""driftjoin: exact, adaptive, distributed stream joins on Apache Spark.

The package, from the bottom up (docs/architecture.md has the rules):

- the shared vocabulary: ``driftjoin.distance`` (vector metrics), ``driftjoin.metric_names`` (the
  one registry of ``metric=`` names), ``driftjoin.windows``, ``driftjoin.clock``,
  ``driftjoin.durations``, ``driftjoin.blockjoin``, ``driftjoin.bits`` (bit counts in compiled
  kernels), ``driftjoin.runs`` (positions within runs, strings as code points), ``driftjoin.deferred`` (pandas
  and pyarrow imported when first used, for the modules a stateful processor imports);
- the algorithm cores, plain Python/numpy that never import Spark: ``driftjoin.s3j``,
  ``driftjoin.grid``, ``driftjoin.metric`` (metric-space joins), ``driftjoin.swoop``,
  ``driftjoin.schemafree``, ``driftjoin.hypercube``, ``driftjoin.generators``,
  ``driftjoin.checkpointing``;
- ``driftjoin.spark``: the runtime and one package per operator; ``driftjoin.control``: elastic
  control of whole queries; ``driftjoin.app``: the command line and what it runs.

The names below are the public API; the Spark ones are imported lazily, so ``import driftjoin``
stays cheap for core users.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "similarity_join": "driftjoin.spark.similarity.api",
    "invalid_records": "driftjoin.spark.similarity.api",
    "choose_threshold": "driftjoin.spark.similarity.threshold",
    "local_session": "driftjoin.spark.runtime.session",
    "topk_set_join": "driftjoin.spark.topk.api",
    "current_topk": "driftjoin.spark.topk.api",
    "invalid_sets": "driftjoin.spark.topk.api",
    "natural_join": "driftjoin.spark.natural.api",
    "invalid_documents": "driftjoin.spark.natural.api",
    "equi_join": "driftjoin.spark.equi.api",
    "invalid_equi_records": "driftjoin.spark.equi.api",
    "link": "driftjoin.spark.link.api",
    "invalid_links": "driftjoin.spark.link.api",
    "entities": "driftjoin.spark.entities.api",
    "invalid_entity_links": "driftjoin.spark.entities.api",
    "current_entities": "driftjoin.spark.entities.api",
    "user_metric": "driftjoin.metric.spaces",
    "explain_error": "driftjoin.spark.runtime.errors",
    "SettingError": "driftjoin.spark.runtime.settings",
    "PlanChangedError": "driftjoin.spark.runtime.plan_guard",
    "relocate_checkpoint": "driftjoin.spark.runtime.relocate",
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'driftjoin' has no attribute {name!r}")
    return getattr(import_module(module), name)
