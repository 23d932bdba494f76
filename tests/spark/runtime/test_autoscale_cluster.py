"""Scaling never loses or duplicates a result: the similarity join against the oracle while the
autoscaler removes and adds executors under the running query (live) and stops and restarts it
with fewer (restart), on the standalone cluster `.ci/run` starts (scripts/cluster.sh) and names
in DRIFTJOIN_CLUSTER; without it the test is skipped."""

from __future__ import annotations

import pytest

from ..helpers import needs_cluster, run_cluster_job

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@needs_cluster
def test_similarity_join_is_exact_while_executors_come_and_go(tmp_path):
    ok = run_cluster_job("autoscale_cluster_job.py", tmp_path)
    assert "live 2->1" in ok and "live 1->2" in ok and "restart 2->1" in ok, ok
