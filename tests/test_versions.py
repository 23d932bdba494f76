"""The declared dependency ranges, the lock, and what CI's version runs install.

pyproject.toml declares ranges whose lower bounds are what CI tests at (scripts/versions.sh
lowest installs exactly them); constraints.txt pins the versions of a development install and
of CI's main run, which must lie inside the ranges.
"""

from __future__ import annotations

import os
import tomllib
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXTRAS = PROJECT["optional-dependencies"]


def _declared(extras: tuple[str, ...] = ()) -> list[Requirement]:
    names = [*PROJECT["dependencies"], *(r for e in extras for r in EXTRAS[e])]
    return [req for req in map(Requirement, names) if req.name != "driftjoin"]


def _lock() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return pins


def _lower_bound(req: Requirement) -> str:
    bounds = [s.version for s in req.specifier if s.operator == ">="]
    assert len(bounds) == 1, f"{req}: one lower bound (>=) expected"
    return bounds[0]


def test_every_dependency_has_a_lower_bound_and_no_exact_pin():
    for req in _declared(tuple(EXTRAS)):
        _lower_bound(req)
        assert not [s for s in req.specifier if s.operator in ("==", "===", "~=")], f"{req}: a range, not a pin"


def test_the_lock_pins_every_declared_dependency_inside_its_range():
    lock = _lock()
    for req in _declared(tuple(EXTRAS)):
        key = req.name.lower().replace("_", "-")
        assert key in lock, f"{req.name} is declared but not in constraints.txt"
        assert req.specifier.contains(lock[key], prereleases=True), f"constraints.txt has {req.name}=={lock[key]}, outside {req}"


def test_the_executor_runtime_has_no_spark_and_no_command_line_libraries():
    runtime = {req.name.lower() for req in _declared()}
    assert not runtime & {"pyspark", "matplotlib", "rich", "typer", "simpy"}, runtime


@pytest.mark.versions
@pytest.mark.skipif(os.environ.get("DRIFTJOIN_VERSIONS") != "lowest", reason="only in scripts/versions.sh lowest")
def test_the_lowest_run_installs_exactly_the_lower_bounds():
    for req in _declared(("spark",)):
        assert metadata.version(req.name) == _lower_bound(req), f"{req.name} {metadata.version(req.name)} installed, {req} declared"


@pytest.mark.versions
@pytest.mark.skipif(os.environ.get("DRIFTJOIN_VERSIONS") != "newest", reason="only in scripts/versions.sh newest")
def test_the_newest_run_is_newer_than_the_lock():
    lock = _lock()
    newer = [p for p in ("pandas", "numpy") if Version(metadata.version(p)) > Version(lock[p])]
    assert newer, f"pandas {metadata.version('pandas')} and numpy {metadata.version('numpy')}: the lock's, nothing newer tested"

