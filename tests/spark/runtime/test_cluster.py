"""The join on a Spark standalone cluster: master, workers and executors are separate processes,
so nothing may depend on driver-local objects. `.ci/run` starts the cluster (scripts/cluster.sh)
and sets DRIFTJOIN_CLUSTER; without it the test is skipped."""

from __future__ import annotations

import pytest

from ..helpers import needs_cluster, run_cluster_job

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


@needs_cluster
def test_streaming_join_on_standalone_cluster(tmp_path):
    assert "pairs" in run_cluster_job("cluster_job.py", tmp_path, timeout=600)
