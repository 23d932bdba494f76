"""The README's Spark Connect server, started and stopped by its two shell blocks as written, from
a fresh shell in the checkout (only the port is replaced, and the server's pid and log files go to
this test's folder), runs a user's driftjoin script: exact pairs, the cluster's cores as the
default workers although the server leaves ``spark.sql.shuffle.partitions`` at 200, and a
``spark.stop()`` that prints nothing. (tests/app/test_readme.py checks every block without
running it.)"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from tests.app.readme_blocks import fresh_env, readme_blocks

from ..helpers import write_batches
from .conftest import ROOT, free_port

pytestmark = [pytest.mark.spark, pytest.mark.slow]

CLIENT = """
import json, sys, tempfile
from pyspark.sql import SparkSession
from driftjoin import similarity_join

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
unset = "spark.sql.shuffle.partitions" not in spark.conf.getAll  # as the server started: Spark's 200
stream = spark.readStream.schema("id long, vector array<double>").json(sys.argv[2])
pairs = similarity_join(stream, threshold=0.15, metric="euclidean", dim=2, window=None, algorithm="s3j",
                        metrics_dir=tempfile.mkdtemp())
q = pairs.writeStream.format("memory").queryName("pairs").trigger(availableNow=True).start()
q.awaitTermination()
rows = spark.sql("SELECT left_id, right_id, worker FROM pairs").collect()
print(json.dumps({"pairs": sorted([r.left_id, r.right_id] for r in rows), "workers": sorted({r.worker for r in rows}),
                  "shuffle_partitions_unset": unset}))
spark.stop()
"""


def _answers(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
        return True
    except OSError:
        return False


def test_the_readme_connect_server_runs_a_driftjoin_script_as_written(connect_url, tmp_path):
    # connect_url: this folder's own server started, so Java and the Connect client work here
    (start,) = [b for b in readme_blocks("bash") if "start-connect-server.sh" in b]
    (stop,) = [b for b in readme_blocks("bash") if "stop-connect-server.sh" in b]
    assert "15002" in start
    port = free_port()
    env = fresh_env(SPARK_PID_DIR=str(tmp_path), SPARK_LOG_DIR=str(tmp_path), SPARK_IDENT_STRING=f"readme-{port}")
    started = subprocess.run(["bash", "-e", "-c", start.replace("15002", str(port))], cwd=ROOT, env=env,
                             capture_output=True, text=True, timeout=180)
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        deadline = time.time() + 180
        while not _answers(port) and time.time() < deadline:
            time.sleep(1)
        logs = "".join(p.read_text()[-2000:] for p in tmp_path.glob("*.out"))
        assert _answers(port), f"the README's server did not answer on port {port}: {started.stdout}{logs}"
        write_batches(tmp_path / "in", [[{"id": i, "vector": [i / 10, 0.0]} for i in range(a, a + 15)] for a in (0, 15)])
        client = subprocess.run([sys.executable, "-c", textwrap.dedent(CLIENT), f"sc://localhost:{port}",
                                 str(tmp_path / "in")], cwd=tmp_path, env=fresh_env(), capture_output=True, text=True,
                                timeout=600)
        assert client.returncode == 0, client.stderr[-3000:]
        out = json.loads(client.stdout.strip().splitlines()[-1])
        assert out["pairs"] == [[i, i + 1] for i in range(29)]
        assert out["shuffle_partitions_unset"] and set(out["workers"]) <= {0, 1}  # local[2]: 2 workers, not 200
        # spark.stop() after a driftjoin query is quiet: Python's exit printed "Failed to remove the listener
        # ... NO_ACTIVE_SESSION" (test_connect.py runs the script that ends without stop())
        assert client.stderr == ""
    finally:
        stopped = subprocess.run(["bash", "-e", "-c", stop], cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=120)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    deadline = time.time() + 60
    while _answers(port) and time.time() < deadline:
        time.sleep(1)
    assert not _answers(port)
