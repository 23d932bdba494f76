"""The examples in the docstrings of the link core run."""

from __future__ import annotations

import doctest
from importlib import import_module

import pytest

MODULES = ["rules", "drivers", "plan", "worker", "split", "choose", "engine"]


@pytest.mark.parametrize("name", MODULES)
def test_examples_run(name):
    module = import_module(f"driftjoin.linkage.{name}")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
