"""driftjoin shipped with `driftjoin pack` to a standalone cluster whose executors never had it:
a venv of the runtime dependencies alone and driftjoin's zip (--py-files), running every
operator's fuzz case (tests/fuzz/specs.py: the four operators, similarity_join on vectors and on
strings or token sets) from a clean working directory, checked against the oracles (tests/deploy_cluster_job.py;
the packed environment, the costlier path, runs there with the argument ``archive``, and
tests/app/test_pack.py builds and unpacks one). `.ci/run` starts the cluster and sets
DRIFTJOIN_CLUSTER; without it the test is skipped."""

from __future__ import annotations

import pytest

from driftjoin import __version__

from tests.fuzz.specs import SPECS
from ..helpers import needs_cluster, run_cluster_job

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@needs_cluster
def test_the_shipped_zip_runs_every_operator_on_executors_that_never_had_driftjoin(tmp_path):
    line = run_cluster_job("deploy_cluster_job.py", tmp_path)
    shipped = f"executors imported driftjoin from ['/driftjoin-{__version__}.zip/driftjoin/__init__.py']"
    assert line.startswith(f"OK zip: OK {len(SPECS)} operators exact; {shipped}"), line
