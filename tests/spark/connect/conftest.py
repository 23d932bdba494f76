"""A Spark Connect server for the tests of this folder, started once (scripts/connect-server.sh)
and stopped at the end, and a Connect session to it.

The server is a separate JVM (local[2]) whose Python workers run this interpreter with this
checkout on their path. It is skipped, saying why, when it cannot start here (no pyspark
Connect client packages, no Java); under CI (``CI`` set) that fails instead, since CI must
run these tests. ``DRIFTJOIN_CONNECT=sc://host:port`` uses a server that is already running.

The Connect session lives only while this folder's tests run: while it exists, PySpark routes
``pyspark.sql.functions`` to Spark Connect in the whole process, so it is stopped (and that
switch undone) before any classic test runs again.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _unavailable(reason: str):
    if os.environ.get("CI"):
        pytest.fail(f"Spark Connect tests cannot run under CI: {reason}")
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def connect_url():
    """Start the server; yields its ``sc://`` URL."""
    try:
        import grpc  # noqa: F401
        import zstandard  # noqa: F401
        from google.rpc import status_pb2  # noqa: F401
    except ImportError as e:
        _unavailable(f"the Spark Connect client packages are missing ({e}): pip install 'pyspark[connect]'")
    given = os.environ.get("DRIFTJOIN_CONNECT")
    if given:  # a server started outside (scripts/connect-server.sh start): used, left running
        yield given
        return
    port = free_port()
    run = tempfile.mkdtemp(prefix="driftjoin-connect-")
    env = {**os.environ, "DRIFTJOIN_CONNECT_RUN": run, "DRIFTJOIN_PYTHON": sys.executable}
    script = [str(ROOT / "scripts" / "connect-server.sh")]
    try:
        started = subprocess.run(["bash", *script, "start", "--port", str(port)], env=env, capture_output=True,
                                 text=True, timeout=240, cwd=ROOT)
    except subprocess.TimeoutExpired:
        started = None
    if started is None or started.returncode != 0:
        subprocess.run(["bash", *script, "stop", "--port", str(port)], env=env, capture_output=True, cwd=ROOT)
        _unavailable("the Spark Connect server did not start: "
                     + ("timed out" if started is None else (started.stderr or started.stdout)[-1500:]))
    yield started.stdout.strip().splitlines()[-1]
    subprocess.run(["bash", *script, "stop", "--port", str(port)], env=env, capture_output=True, cwd=ROOT, timeout=120)
    shutil.rmtree(run, ignore_errors=True)


@pytest.fixture(scope="package")
def connect(connect_url):
    """A Spark Connect session to the test server, as ``SparkSession.builder.remote(url)`` gives
    a user (which refuses while this process's classic test session exists, hence the Connect
    builder itself and the switch PySpark sets); both are undone when this folder's tests end."""
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    had = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    os.environ["SPARK_CONNECT_MODE_ENABLED"] = "1"
    session = ConnectSession.builder.remote(connect_url).getOrCreate()
    try:
        yield session
    finally:
        session.stop()
        if had is None:
            os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
