"""Vectorised helpers for values laid end to end in runs, shared by the cores that build their
entries without a Python loop (a record's copies to its windows, PassJoin's segments and
substrings, prefix filtering's prefixes, the interval store's ranges, the grid's and the heavy-key
split's fan-outs, the columnar equi-join's pairs).

:func:`run_positions` expands run lengths into each element's position within its run (the
``range(c)`` of a loop, for every run at once); :func:`code_points` lays strings end to end as
their Unicode code points, one per character as Python's ``len`` counts them, which is the index
space of every string comparison made on arrays.

Example::

    >>> run_positions(np.array([2, 0, 3])).tolist()
    [0, 1, 0, 1, 2]
    >>> code_points(["ab", "", "é"]).tolist()
    [97, 98, 233]
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def run_positions(counts: np.ndarray) -> np.ndarray:
    """Each element's position within its run, for runs of ``counts`` elements laid end to end.

    Parameters
    ----------
    counts : non-negative run lengths (integers).

    Returns
    -------
    ``int64`` array of length ``counts.sum()``: ``0 .. counts[0]-1, 0 .. counts[1]-1, ...``

    Example::

        >>> run_positions(np.array([3, 1])).tolist()
        [0, 1, 2, 0]
    """
    counts = np.asarray(counts, dtype=np.int64)
    return np.arange(int(counts.sum()), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)


def code_points(strings: Iterable[str]) -> np.ndarray:
    """The code points of ``strings`` joined end to end, one ``uint32`` per character (a lone
    surrogate kept as itself, so positions agree with Python's ``len`` and indexing).

    Parameters
    ----------
    strings : the strings, in order.

    Example::

        >>> code_points(["a", "\\ud800"]).tolist()
        [97, 55296]
    """
    return np.frombuffer("".join(strings).encode("utf-32-le", "surrogatepass"), dtype=np.uint32)
