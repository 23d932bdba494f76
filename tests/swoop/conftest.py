"""Compile the SWOOP kernels, or load them from numba's on-disk cache, when these tests are
collected, i.e. before any test of the session runs: a cold cache costs about 20 s once per
checkout. This keeps the compilation out of the tests' timings, and out of the Spark tests of
the same session (collected with these, run earlier), whose Python workers run SWOOP."""

from __future__ import annotations

from driftjoin.swoop import fast

fast.warm_up()
