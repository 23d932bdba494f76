"""equi_join's routing bindings as a task reads them (:func:`driftjoin.spark.equi.operators.read_binding`):
the binding of a running batch is read once per process and query, another query's binding is
refused, and a binding that went away fails loudly."""

from __future__ import annotations

from collections import OrderedDict

import pytest

from driftjoin.hypercube.migration import BindingMismatchError
from driftjoin.hypercube.table import Binding, RoutingTable
from driftjoin.spark.equi import operators
from driftjoin.spark.equi.operators import EquiPlan, read_binding, write_binding
from driftjoin.spark.runtime import decisions


def _binding(start: int, version: int) -> Binding:
    table = RoutingTable(4, version=version)
    return Binding(table, table, start)


@pytest.fixture
def listings(monkeypatch) -> list:
    """The control-folder listings read_binding makes, in a process that has read nothing yet."""
    seen: list = []
    monkeypatch.setattr(decisions, "_AT", OrderedDict())
    monkeypatch.setattr(operators, "_BINDINGS", OrderedDict())
    listed = decisions.versions
    monkeypatch.setattr(decisions, "versions", lambda *a: seen.append(a) or listed(*a))
    return seen


def test_a_process_reads_the_binding_of_a_running_batch_once(tmp_path, listings) -> None:
    plan = EquiPlan("shc", 4, "long", 250.0, metrics_dir=str(tmp_path))
    assert read_binding(plan, 0, "q").start == -1  # nothing written: the initial binding
    write_binding(plan, _binding(1, 1), "q")  # by the plan key of batch 0
    for _task in range(4):  # four router and worker tasks of batch 1 in one process
        assert read_binding(plan, 1, "q").start == 1
    assert len(listings) == 2
    write_binding(plan, _binding(3, 2), "q")  # by the plan key of batch 2
    assert [read_binding(plan, b, "q").cur.version for b in (1, 2, 3, 4)] == [1, 1, 2, 2]
    assert len(listings) == 5  # batch 1 kept; batches 2, 3 and 4 listed once each
    with pytest.raises(BindingMismatchError, match="two queries share the directory"):
        read_binding(plan, 4, "another")  # another query (a new checkpoint) on this directory: refused


def test_without_a_query_id_every_read_lists(tmp_path, listings) -> None:
    plan = EquiPlan("shc", 4, "long", 250.0, metrics_dir=str(tmp_path))
    write_binding(plan, _binding(1, 1), None)
    assert [read_binding(plan, 1, None).start for _ in range(3)] == [1, 1, 1]
    assert len(listings) == 3


def test_a_binding_that_went_away_fails_loudly(tmp_path, listings) -> None:
    plan = EquiPlan("shc", 4, "long", 250.0, metrics_dir=str(tmp_path))
    write_binding(plan, _binding(1, 1), "q")
    folder = tmp_path / "control" / operators.BINDINGS
    original = (folder / "000000000001.json").read_bytes()
    (folder / "000000000001.json").unlink()
    (folder / "000000000001.json.bak").write_bytes(original)  # not a binding: ignored
    assert read_binding(plan, 1, "q").start == -1  # no binding listed: the initial one
    write_binding(plan, _binding(2, 2), "q")
    decisions.retire(str(tmp_path), operators.BINDINGS)  # every binding gone after batch 2's read started
    decisions._AT[(str(tmp_path), operators.BINDINGS, "q", 2)] = 2  # batch 2 listed it before it went
    with pytest.raises(BindingMismatchError, match="is missing from"):
        read_binding(plan, 2, "q")
