"""Importing a stateful processor's module imports neither pandas nor pyarrow
(:mod:`driftjoin.deferred`: Spark's pre-init process imports it at every query start), and a
:class:`~driftjoin.deferred.Deferred` module is imported on its first attribute read only and
pickles without importing."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys
import pickle
import threading

from pyspark.sql.streaming.stateful_processor import StatefulProcessor

import driftjoin.spark
from driftjoin.deferred import Deferred


def _processor_modules() -> list[str]:
    for info in pkgutil.walk_packages(driftjoin.spark.__path__, "driftjoin.spark."):
        importlib.import_module(info.name)
    found, todo = set(), [StatefulProcessor]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub.__module__.startswith("driftjoin."):
                found.add(sub.__module__)
    return sorted(found)


def test_processor_modules_import_neither_pandas_nor_pyarrow():
    modules = _processor_modules()
    assert {"driftjoin.spark.runtime.processor", "driftjoin.spark.equi.operators",
            "driftjoin.spark.similarity.s3j", "driftjoin.spark.link.processor"} <= set(modules)
    code = ("import importlib, json, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(json.dumps([m for m in ('pandas', 'pyarrow') if m in sys.modules]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == [], (
        "a module on a stateful processor's import path imports pandas or pyarrow when it is imported: "
        "bind them through driftjoin.deferred (or build module-level constants lazily)")


def test_a_deferred_module_is_imported_on_its_first_attribute_read(tmp_path, monkeypatch):
    (tmp_path / "deferred_probe.py").write_text("import builtins\nbuiltins.deferred_probe_imports += 1\nVALUE = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr("builtins.deferred_probe_imports", 0, raising=False)
    import builtins

    probe = Deferred("deferred_probe")
    assert builtins.deferred_probe_imports == 0 and "deferred_probe" not in sys.modules
    values = []
    threads = [threading.Thread(target=lambda: values.append(probe.VALUE)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert values == [42] * 8 and builtins.deferred_probe_imports == 1
    assert probe.VALUE == 42 and "VALUE" in vars(probe)
    copy = pickle.loads(pickle.dumps(Deferred("deferred_probe_not_there")))
    assert isinstance(copy, Deferred) and repr(copy) == "<deferred module 'deferred_probe_not_there'>"
    monkeypatch.delitem(sys.modules, "deferred_probe")
