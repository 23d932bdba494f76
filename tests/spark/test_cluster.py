"""The join on a Spark standalone cluster: master, workers and executors are separate processes,
so nothing may depend on driver-local objects. `.ci/run` starts the cluster (scripts/cluster.sh)
and sets DRIFTJOIN_CLUSTER; without it the test is skipped."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

MASTER = os.environ.get("DRIFTJOIN_CLUSTER")


@pytest.mark.skipif(not MASTER, reason="no standalone cluster: run scripts/cluster.sh start and set DRIFTJOIN_CLUSTER")
def test_streaming_join_on_standalone_cluster(tmp_path):
    job = Path(__file__).resolve().parents[1] / "cluster_job.py"
    run = subprocess.run([sys.executable, str(job), MASTER, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "OK" in run.stdout
