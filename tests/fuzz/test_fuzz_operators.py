"""Every operator under generated bad input and micro-batch boundaries (:mod:`tests.fuzz.harness`):
the query never fails because of a row; each row is joined, dead-lettered or refused by the join,
exactly one of the three; the output equals the oracle over the rows kept. Streaming and static.

The suite runs the ``ci`` size (a few derandomised examples per operator);
``bench/fuzz_operators.py`` runs many more (``DRIFTJOIN_FUZZ=long``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from .harness import check
from .specs import SPECS

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SIZES = {
    "ci": settings(max_examples=2, derandomize=True, deadline=None, database=None,
                   suppress_health_check=list(HealthCheck)),
    "long": settings(max_examples=int(os.environ.get("DRIFTJOIN_FUZZ_EXAMPLES", "40")), deadline=None,
                     suppress_health_check=list(HealthCheck), print_blob=True),
}
SIZE = SIZES[os.environ.get("DRIFTJOIN_FUZZ", "ci")]


@pytest.mark.parametrize("streaming", [True, False], ids=["streaming", "static"])
@pytest.mark.parametrize("name", sorted(SPECS))
def test_operator_never_fails_and_every_row_is_joined_or_dead_lettered_once(spark, name, streaming):
    spec = SPECS[name]

    @SIZE
    @given(case=spec.case())
    def run(case):
        # a stopped query's driver-side listeners (natural_join's controller) may still write a file
        # into the folder while it is removed: the case is checked by then, the leftover is not its result
        with tempfile.TemporaryDirectory(prefix=f"fuzz-{name}-", ignore_cleanup_errors=True) as tmp:
            check(spark, spec, case, Path(tmp), streaming)

    run()
