"""Start the standalone-cluster jobs in the background as soon as the tests are collected."""

from __future__ import annotations

from .helpers import start_cluster_jobs

#: The cluster jobs of the tests marked ``cluster`` (tests/spark/runtime/test_cluster.py,
#: tests/spark/runtime/test_autoscale_cluster.py, tests/spark/runtime/test_deploy_cluster.py), by test file.
CLUSTER_JOBS = {"test_cluster.py": "cluster_job.py", "test_autoscale_cluster.py": "autoscale_cluster_job.py",
                "test_deploy_cluster.py": "deploy_cluster_job.py"}


def pytest_collection_finish(session) -> None:
    files = {item.path.name for item in session.items if item.get_closest_marker("cluster")}
    start_cluster_jobs([job for name, job in CLUSTER_JOBS.items() if name in files])
