"""One session-scoped local SparkSession with small settings, shared by every Spark test."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    from driftjoin.spark.runtime.session import local_session

    session = local_session(parallelism=2, app_name="driftjoin-tests", cores=2)
    yield session
    session.stop()
