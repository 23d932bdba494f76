"""Bit counting inside compiled (numba) kernels, shared by the packages that keep bit signatures.

SWOOP's list entries (:mod:`driftjoin.swoop._kernels`) and the count bounds of ``link``
(:mod:`driftjoin.metric.bounds`) compare 64-bit token and character signatures by the number
of bits they differ in. :func:`popcount` is LLVM's ``ctpop`` on the word, one instruction
(``popcnt``) where the CPU has it, instead of a loop over the set bits.

Example::

    >>> import numpy as np
    >>> from numba import njit
    >>> count = njit(lambda x: popcount(x))
    >>> count(np.uint64(0b1011)), count(np.int64(-1))
    (3, 64)
"""

from __future__ import annotations

from numba import types
from numba.extending import intrinsic


@intrinsic
def popcount(typingctx, x):
    """The number of set bits of a 64-bit integer (signed or unsigned), as an ``int64``."""
    if not isinstance(x, types.Integer) or x.bitwidth != 64:
        return None
    sig = types.int64(x)

    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])

    return sig, codegen
