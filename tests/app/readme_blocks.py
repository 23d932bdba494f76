"""The README's fenced code blocks, and the environment of a fresh shell to run them in."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def readme_blocks(language: str) -> list[str]:
    """The README's fenced code blocks of ``language`` (```bash, ```toml...), in order."""
    return re.findall(rf"^```{language}\n(.*?)^```$", (REPO / "README.md").read_text(), flags=re.M | re.S)


def fresh_path() -> str:
    """The PATH of a fresh shell here: this one's without the venv the tests run in."""
    venv = {str(Path(sys.executable).parent), str(REPO / ".venv" / "bin")}
    if os.environ.get("VIRTUAL_ENV"):
        venv.add(str(Path(os.environ["VIRTUAL_ENV"]) / "bin"))
    return os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p not in venv)


def fresh_env(**extra: str) -> dict[str, str]:
    """The environment of a fresh login: no venv, no Spark or Python settings of this process."""
    keep = ("HOME", "USER", "LANG", "LC_ALL", "TERM", "JAVA_HOME", "TMPDIR")
    return {**{k: os.environ[k] for k in keep if k in os.environ}, "PATH": fresh_path(), **extra}
