"""The ``driftjoin`` command as a user runs it: a subprocess with this checkout first on the path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from readme_blocks import readme_blocks

REPO = Path(__file__).resolve().parents[2]


def driftjoin(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``driftjoin ARGS`` (``python -m driftjoin.app.cli``, the console script's module)."""
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "COLUMNS": "160"}
    return subprocess.run([sys.executable, "-m", "driftjoin.app.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def cli():
    return driftjoin


@pytest.fixture
def readme():
    return readme_blocks
