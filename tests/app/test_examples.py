"""Every public function documents its parameters (numpy style) and carries a short example that
runs: each example is run here as a doctest, on the shared test session (``local_session``
returns it)."""

from __future__ import annotations

import doctest
import inspect
from importlib import import_module

import pytest

PUBLIC = [
    "driftjoin.spark.similarity.api.similarity_join",
    "driftjoin.spark.similarity.api.invalid_records",
    "driftjoin.spark.topk.api.topk_set_join",
    "driftjoin.spark.topk.api.invalid_sets",
    "driftjoin.spark.topk.api.current_topk",
    "driftjoin.spark.natural.api.natural_join",
    "driftjoin.spark.natural.api.invalid_documents",
    "driftjoin.spark.equi.api.equi_join",
    "driftjoin.spark.equi.api.invalid_equi_records",
    "driftjoin.spark.link.api.link",
    "driftjoin.spark.link.api.invalid_links",
    "driftjoin.spark.entities.api.entities",
    "driftjoin.spark.entities.api.invalid_entity_links",
    "driftjoin.spark.entities.api.current_entities",
    "driftjoin.spark.runtime.session.local_session",
    "driftjoin.spark.similarity.threshold.choose_threshold",
    "driftjoin.control.autoscale.controller.autoscale",
    "driftjoin.app.report.summary",
    "driftjoin.app.report.metrics_table",
    "driftjoin.app.report.workset_table",
    "driftjoin.app.report.plot_latency",
    "driftjoin.app.report.latency_split",
    "driftjoin.spark.runtime.warmup.warm_up",
    "driftjoin.app.report.entities_summary",
    "driftjoin.spark.runtime.errors.explain_error",
    "driftjoin.spark.runtime.relocate.relocate_checkpoint",
    "driftjoin.app.pack.pack",
    "driftjoin.metric.spaces.user_metric",
]


def test_every_public_function_of_the_package_is_here():
    import driftjoin

    exported = {f"{module}.{name}" for name, module in driftjoin._LAZY.items()
                if inspect.isfunction(getattr(driftjoin, name))}
    assert exported - set(PUBLIC) == set()


def _function(name: str):
    module, _, attr = name.rpartition(".")
    return getattr(import_module(module), attr)


@pytest.mark.spark
@pytest.mark.parametrize("name", PUBLIC)
def test_the_public_function_documents_its_parameters_and_its_example_runs(spark, name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    doc = inspect.getdoc(_function(name)) or ""
    assert "\nParameters\n----------\n" in doc and "\nExamples\n--------\n" in doc, f"{name}: no parameter section or example"
    test = doctest.DocTestParser().get_doctest(doc, {}, name, None, 0)
    assert test.examples, f"{name}: the example has no >>> lines"
    failures: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, out=failures.append)
    assert runner.failures == 0, "".join(failures)
