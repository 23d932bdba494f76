"""The package maps stay true: every module of a Spark package is named in its package's
docstring (as ``:mod:`.name```) and in docs/architecture.md, and the docs name no module that is gone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SPARK = ROOT / "driftjoin" / "spark"
PACKAGES = sorted(p.parent for p in SPARK.glob("*/__init__.py"))
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()


def _modules(package: Path) -> list[str]:
    return sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_the_package_docstring_names_every_module(package):
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    missing = [m for m in _modules(package) if f":mod:`.{m}`" not in doc]
    assert not missing, f"{package.name}/__init__.py does not name {missing}"


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.name)
def test_the_architecture_doc_names_every_module(package):
    missing = [m for m in _modules(package) if not re.search(rf"\b{m}\b", ARCHITECTURE)]
    assert not missing, f"docs/architecture.md does not name {package.name}'s {missing}"


def test_the_architecture_doc_names_no_module_that_is_gone():
    paths = set(re.findall(r"(?<!tests/)(?<![\w/])(?:driftjoin/)?spark/(\w+)/(\w+)\.py", ARCHITECTURE))
    gone = [f"spark/{p}/{m}.py" for p, m in sorted(paths) if not (SPARK / p / f"{m}.py").exists()]
    assert not gone
