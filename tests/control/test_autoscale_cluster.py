"""Scaling never loses or duplicates a result: the similarity join against the oracle while the
autoscaler removes and adds executors under the running query (live) and stops and restarts it
with fewer (restart), on the standalone cluster `.ci/run` starts (scripts/cluster.sh) and names
in DRIFTJOIN_CLUSTER; without it the test is skipped. The job runs in its own process: a
process has one SparkContext, and the suite's is local."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

MASTER = os.environ.get("DRIFTJOIN_CLUSTER")


@pytest.mark.skipif(not MASTER, reason="no standalone cluster: run scripts/cluster.sh start and set DRIFTJOIN_CLUSTER")
def test_similarity_join_is_exact_while_executors_come_and_go(tmp_path):
    job = Path(__file__).resolve().parents[1] / "autoscale_cluster_job.py"
    run = subprocess.run([sys.executable, str(job), MASTER, str(tmp_path)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ok = [line for line in run.stdout.splitlines() if line.startswith("OK")]
    assert ok, run.stdout[-3000:]
    assert "live 2->1" in ok[0] and "live 1->2" in ok[0] and "restart 2->1" in ok[0], ok[0]
