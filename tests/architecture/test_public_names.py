"""Every public name of ``driftjoin`` is the function or class it documents, whatever was imported before.

A package ``driftjoin/<name>/`` shadows the lazy export ``driftjoin.<name>`` once anything imports
``driftjoin.<name>.x`` (Python binds the submodule as an attribute of the package, and the
package's ``__getattr__`` is then never asked), so ``from driftjoin import link`` would return a
module. The check runs in a fresh interpreter after importing every module of the package.
"""

from __future__ import annotations

import subprocess
import sys

SCRIPT = r"""
import importlib, inspect, pkgutil
import driftjoin
for info in pkgutil.walk_packages(driftjoin.__path__, "driftjoin."):
    if info.name.startswith("driftjoin.app.__main__"):
        continue
    importlib.import_module(info.name)
bad = [n for n in driftjoin.__all__ if n != "__version__" and inspect.ismodule(getattr(driftjoin, n))]
assert not bad, f"public names shadowed by modules: {bad}"
from driftjoin import link, invalid_links
assert inspect.isfunction(link) and link.__module__ == "driftjoin.spark.link.api", link
assert inspect.isfunction(invalid_links), invalid_links
print("ok")
"""


def test_public_names_are_not_shadowed_by_modules():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
