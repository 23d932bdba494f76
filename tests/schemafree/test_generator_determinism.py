"""Generators are seedable and the whole pipeline does not depend on hash seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from driftjoin.schemafree.generator import nobench_documents, server_log_documents

SCRIPT = """
import json
from driftjoin.schemafree import natural_join_windows
from driftjoin.schemafree.generator import nobench_documents
for method in ("ag", "sc", "ds"):
    out = natural_join_windows(nobench_documents(300, seed=1, thousandth=8), 100, 5, method, creators=2)
    print(json.dumps([[p.left, p.right] for p in out.pairs]))
    print(json.dumps([[m.loads, m.replication, m.repartitions] for m in out.windows]))
"""


def test_same_seed_same_documents_and_different_seed_different_documents() -> None:
    assert nobench_documents(50, seed=4) == nobench_documents(50, seed=4)
    assert nobench_documents(50, seed=4) != nobench_documents(50, seed=5)
    assert server_log_documents(50, seed=4) == server_log_documents(50, seed=4)
    assert server_log_documents(50, seed=4) != server_log_documents(50, seed=5)


def test_server_log_shape_of_figure_1() -> None:
    docs = server_log_documents(500, seed=2)
    assert all(isinstance(d["Success"], bool) for d in docs)  # ubiquitous Boolean
    assert {d["Event"] for d in docs} == {"login", "file"}
    times = [d["timestamp"] for d in docs]
    assert times == sorted(times)
    assert len({frozenset(d) for d in docs}) > 5  # varying fields
    assert "timestamp" not in server_log_documents(5, seed=2, timestamp=False)[0]


def test_nobench_documents_are_json_objects_with_nesting() -> None:
    docs = nobench_documents(200, seed=0)
    json.dumps(docs)
    assert all("bool" in d and "thousandth" in d for d in docs)
    assert any(isinstance(d.get("nested_obj"), dict) for d in docs)
    assert any(isinstance(d.get("nested_arr"), list) for d in docs)
    assert any(k.startswith("sparse_") for d in docs for k in d)


def test_output_is_identical_under_different_hash_seeds() -> None:
    outputs = set()
    for seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
        outputs.add(run.stdout)
    assert len(outputs) == 1
