"""The package layout's rules, read from the imports (ast) of every module of driftjoin.

- the operator packages (``driftjoin.spark.{similarity,topk,natural,equi,link,entities}``) never import each other;
- nothing under ``driftjoin.spark.runtime`` or ``driftjoin.spark.sources`` imports an operator package
  or the applications;
- no core (``s3j, grid, swoop, schemafree, hypercube, checkpointing, generators, distance, clock,
  durations, blockjoin, metric, windows, linkage, entitygraph``) imports ``pyspark`` or ``driftjoin.spark``, nor the applications;
- ``driftjoin.control`` does not import an operator package; nothing but ``driftjoin.app`` imports
  ``driftjoin.app``;
- no module imports a private name (``_x``) of another module;
- there are no import circles between modules (function-local imports count too).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "driftjoin"
OPERATORS = ("similarity", "topk", "natural", "equi", "link", "entities")
CORES = ("s3j", "grid", "swoop", "schemafree", "hypercube", "checkpointing", "generators", "distance", "clock",
         "durations", "blockjoin", "metric", "windows", "linkage", "entitygraph")


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
           if n is not None and n.startswith("_") and not n.startswith("__") and t != m]
    assert not bad


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
