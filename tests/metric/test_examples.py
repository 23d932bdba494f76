"""The runnable examples in the docstrings of the metric cores and the window vocabulary."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["driftjoin.windows", "driftjoin.metric.tokens", "driftjoin.metric.exact", "driftjoin.metric.spaces", "driftjoin.metric.s3j",
           "driftjoin.metric.passjoin", "driftjoin.metric.pivots", "driftjoin.metric.prefix", "driftjoin.metric.engine",
           "driftjoin.metric.choose", "driftjoin.metric.bounds",
           "driftjoin.metric.validate", "driftjoin.runs"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
