"""pandas and pyarrow for the modules a stateful processor imports, imported when first used.

When a streaming query starts, Spark runs a fresh Python process on the driver for each of its
stateful stages (``transformWithStateInPandas``'s pre-init): the process unpickles the stage's
processor to learn which state it opens, which imports the processor's module and everything
that module imports, and ends. It calls nothing that needs pandas or pyarrow, yet importing them
is about 0.24 s of that process (measured on this project's 2-core machine, against about 0.1 s
for PySpark's own imports): every query start waited for it once per stateful stage.

The modules on a processor's import path therefore bind ``pd``, ``pa``, ``pc`` and ``pafs`` to
:class:`Deferred` stand-ins that import the real module when one of its attributes is first read
(in the Python workers, where the data is, that is the first batch's first frame), and to the
modules themselves for type checkers (``if TYPE_CHECKING``). ``tests/architecture`` checks that
importing every processor module leaves pandas and pyarrow unimported.

The standard library's :class:`importlib.util.LazyLoader` is not used: it puts its lazy module in
``sys.modules``, so every other importer (PySpark too) would get it, and reading its attributes
from two threads at once is unsafe before Python 3.11.9 (CPython issue 114763). A
:class:`Deferred` only imports through :func:`importlib.import_module`, under the import lock.

Example::

    >>> from driftjoin.deferred import pandas as pd
    >>> pd.DataFrame({"a": [1, 2]}).shape
    (2, 1)
"""

from __future__ import annotations

import importlib
from typing import Any


class Deferred:
    """A stand-in for the module ``name``, imported on the first read of one of its attributes.

    Parameters
    ----------
    name : the module's full name (``"pyarrow.compute"``).

    Each attribute read is kept on the stand-in, so later reads cost what a module's do. A
    stand-in pickles as a stand-in of the same module (functions that Spark ships by value carry
    their module's globals), so unpickling imports nothing.

    Example::

        >>> Deferred("fractions").Fraction(1, 3)
        Fraction(1, 3)
    """

    def __init__(self, name: str) -> None:
        self.__dict__["_module_name"] = name

    def __getattr__(self, attr: str) -> Any:
        if attr == "_module_name":  # not set yet: an instance being unpickled
            raise AttributeError(attr)
        value = getattr(importlib.import_module(self._module_name), attr)
        self.__dict__[attr] = value
        return value

    def __reduce__(self) -> tuple[type[Deferred], tuple[str]]:
        return Deferred, (self._module_name,)

    def __repr__(self) -> str:
        return f"<deferred module {self._module_name!r}>"


pandas = Deferred("pandas")
pyarrow = Deferred("pyarrow")
pyarrow_compute = Deferred("pyarrow.compute")
pyarrow_fs = Deferred("pyarrow.fs")
