"""The package layout's rules, read from the imports (ast) of every module of driftjoin.

- the operator packages (``driftjoin.spark.{similarity,topk,natural,equi}``) never import each other;
- nothing under ``driftjoin.spark.runtime`` or ``driftjoin.spark.sources`` imports an operator package
  or the applications;
- no core (``s3j, grid, swoop, schemafree, hypercube, checkpointing, generators, distance, clock,
  durations, blockjoin, metric, metric_names, windows``) imports ``pyspark`` or ``driftjoin.spark``, nor the
  applications;
- ``driftjoin.control`` does not import an operator package; nothing but ``driftjoin.app`` imports
  ``driftjoin.app``;
- no module imports a private name (``_x``) of another module;
- there are no import circles between modules (function-local imports count too);
- no module inside the package imports through the root package's lazy names (``from driftjoin
  import similarity_join`` or ``driftjoin.similarity_join`` after ``import driftjoin`` hides an
  arrow from these rules: import the defining module);
- only ``driftjoin.spark.runtime.jvm`` reaches into PySpark's and Py4J's private names (its
  private modules, ``_x`` names, and the attributes of :data:`PRIVATE_ATTRIBUTES`), in the package
  and in the benchmarks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "driftjoin"
#: The one module that may reach into PySpark's and Py4J's private names.
JVM = "driftjoin.spark.runtime.jvm"
#: PySpark modules outside its public API (PySpark's API reference).
PRIVATE_MODULES = ("pyspark.java_gateway", "pyspark.daemon", "pyspark.sql.pandas.types", "pyspark.sql.utils")
#: Attributes of PySpark objects that are PySpark's or Py4J's internals (with every ``_jxxx`` name:
#: ``_jvm``, ``_jsc``, ``_jsq``, ``_jsparkSession``, ...).
PRIVATE_ATTRIBUTES = {"_gateway", "_ensure_initialized", "_execute_streaming_query_cmd", "_java_obj", "pythonExec",
                      "_parse_datatype_json_string", "_sc"}
OPERATORS = ("similarity", "topk", "natural", "equi")
CORES = ("s3j", "grid", "swoop", "schemafree", "hypercube", "checkpointing", "generators", "distance", "clock",
         "durations", "blockjoin", "metric", "metric_names", "windows")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


MODULES = _modules()


def _imports(name: str, path: Path) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) of every driftjoin or pyspark import."""
    out = []
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(a.name, None, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([module] if module else []))
            for a in node.names:
                submodule = f"{module}.{a.name}"
                if submodule in MODULES:
                    out.append((submodule, None, node.lineno))
                else:
                    out.append((module, a.name, node.lineno))
    return [(m, n, line) for m, n, line in out if m.split(".")[0] in ("driftjoin", "pyspark")]


IMPORTS = {name: _imports(name, path) for name, path in MODULES.items()}


def _owner(module: str) -> str:
    """The rule group of a module: an operator package, runtime, sources, app, control, core, root."""
    parts = module.split(".")
    if parts[0] == "pyspark":
        return "pyspark"
    if len(parts) >= 3 and parts[1] == "spark":
        return parts[2] if parts[2] in (*OPERATORS, "runtime", "sources") else "spark"
    if len(parts) >= 2 and parts[1] in ("app", "control") + CORES:
        return "core" if parts[1] in CORES else parts[1]
    return "root"


def _arrows(source_group, target_group) -> list[str]:
    return [f"{m}:{line} -> {t}" for m, imps in IMPORTS.items() if source_group(_owner(m))
            for t, _, line in imps if target_group(_owner(t))]


def test_operator_packages_do_not_import_each_other():
    bad = [f"{m}:{line} -> {t}" for m, imps in IMPORTS.items() for t, _, line in imps
           if _owner(m) in OPERATORS and _owner(t) in OPERATORS and _owner(m) != _owner(t)]
    assert not bad


def test_runtime_and_sources_import_no_operator_and_no_app():
    assert not _arrows(lambda g: g in ("runtime", "sources"), lambda g: g in (*OPERATORS, "app", "control"))


def test_cores_import_neither_spark_nor_apps():
    assert not _arrows(lambda g: g == "core", lambda g: g in ("pyspark", *OPERATORS, "runtime", "sources", "spark", "app", "control"))


def test_control_imports_no_operator_package():
    assert not _arrows(lambda g: g == "control", lambda g: g in OPERATORS)


def test_only_apps_import_apps():
    assert not _arrows(lambda g: g != "app", lambda g: g == "app")


def test_no_private_names_across_modules():
    bad = [f"{m}:{line} takes {n} from {t}" for m, imps in IMPORTS.items() for t, n, line in imps
           if n is not None and n.startswith("_") and not n.startswith("__") and t != m
           and not (m == JVM and t.startswith("pyspark."))]
    assert not bad


def _lazy_names() -> set[str]:
    """The names the root package loads lazily (its ``_LAZY`` table, read without importing it)."""
    for node in ast.walk(ast.parse((PACKAGE / "__init__.py").read_text())):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "_LAZY" for t in node.targets):
            return {k.value for k in node.value.keys}
    raise AssertionError("driftjoin/__init__.py has no _LAZY table")


def _lazy_attributes(path: Path, lazy: set[str]) -> list[str]:
    """Where a module that imports the root package (``import driftjoin``) reads one of its lazy
    names as an attribute (``driftjoin.similarity_join``)."""
    text = path.read_text()
    if not re.search(r"^\s*import driftjoin\b", text, re.MULTILINE):
        return []
    tree = ast.parse(text)
    aliases = {a.asname or a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
               for a in node.names if a.name == "driftjoin"}
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return [f"{where}:{node.lineno} reads driftjoin.{node.attr}" for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and node.attr in lazy and isinstance(node.value, ast.Name)
            and node.value.id in aliases]


def test_no_imports_through_the_root_packages_lazy_names():
    lazy = _lazy_names()
    assert "similarity_join" in lazy
    bad = [f"{m}:{line} takes {n} from driftjoin" for m, imps in IMPORTS.items() for t, n, line in imps
           if t == "driftjoin" and n in lazy and m != "driftjoin"]
    bad += [hit for m, path in MODULES.items() if m != "driftjoin" for hit in _lazy_attributes(path, lazy)]
    assert not bad


def test_the_lazy_name_rule_reads_both_spellings(tmp_path):
    """The rule above sees ``from driftjoin import x`` (through :data:`IMPORTS`) and ``driftjoin.x``."""
    module = tmp_path / "m.py"
    module.write_text("import driftjoin as dj\n\n\ndef f():\n    return dj.similarity_join, dj.__version__\n")
    lazy = _lazy_names()
    assert [hit.rsplit(" ", 1)[-1] for hit in _lazy_attributes(module, lazy)] == ["driftjoin.similarity_join"]


def _private_reaches(path: Path) -> list[str]:
    """Where a file reaches into PySpark's or Py4J's private names (module docstring)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and (node.attr in PRIVATE_ATTRIBUTES or re.fullmatch(r"_j[a-zA-Z]+", node.attr)):
            if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                out.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            private = [n for n in names if n.startswith(PRIVATE_MODULES)]
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pyspark"):
                private += [a.name for a in node.names if a.name.startswith("_")]
            out += [f"{path.relative_to(ROOT)}:{node.lineno} imports {n}" for n in private]
    return out


def test_only_the_jvm_module_reaches_into_pyspark_internals():
    files = [p for name, p in MODULES.items() if name != JVM] + sorted((ROOT / "bench").rglob("*.py"))
    assert not [reach for path in files for reach in _private_reaches(path)]
    assert _private_reaches(MODULES[JVM]), "the rule reads what the jvm module does"


def test_no_import_circles():
    graph = {m: {t for t, _, _ in imps if t in MODULES and t != m} for m, imps in IMPORTS.items()}
    # a package's __init__ that only re-exports is part of every import of its modules: leave the
    # arrows from a package to its own modules out (Python imports the package first anyway)
    for m in graph:
        graph[m] = {t for t in graph[m] if not t.startswith(m + ".")}
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                circles.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    assert not circles


@pytest.mark.parametrize("package", ["driftjoin.spark.runtime", "driftjoin.spark.sources", *(f"driftjoin.spark.{o}" for o in OPERATORS), "driftjoin.app"])
def test_every_package_exists(package):
    assert package in MODULES
