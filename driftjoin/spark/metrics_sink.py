"""Per-batch operator statistics written as small JSON files, idempotently.

Each stateful operator key (a space partition or a worker) keeps a batch sequence number in its
state. The statistics of a batch go to ``<dir>/<operator>/<key>/<seq>.json``; a replayed batch
(after a failure) rolls its state back, gets the same sequence number and overwrites the same
file, so the statistics are exactly-once like the state. ``dir`` may be a local path or any URI
``pyarrow.fs`` understands (s3://, hdfs://, gs://), which a real cluster needs.
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterator

import numpy as np
from pyarrow import fs as pafs

#: Latency histogram buckets: upper bounds in seconds, 20 per decade from 1 ms to ~3 hours.
LATENCY_BOUNDS = np.round(10.0 ** np.arange(-3.0, 4.0, 0.05), 6)


def latency_histogram(latency: np.ndarray) -> list[int]:
    """Counts of ``latency`` (seconds) per bucket of :data:`LATENCY_BOUNDS` (+1 overflow)."""
    idx = np.searchsorted(LATENCY_BOUNDS, np.maximum(latency, 0.0), side="left")
    return np.bincount(idx, minlength=len(LATENCY_BOUNDS) + 1).tolist()


def histogram_quantile(hist: np.ndarray, q: float) -> float:
    """The bucket upper bound at quantile ``q`` of a latency histogram (nan if empty)."""
    total = hist.sum()
    if total == 0:
        return math.nan
    i = int(np.searchsorted(np.cumsum(hist), q * total, side="left"))
    return float(LATENCY_BOUNDS[min(i, len(LATENCY_BOUNDS) - 1)])


def _fs(uri: str) -> tuple[pafs.FileSystem, str]:
    return pafs.FileSystem.from_uri(uri) if "://" in uri else (pafs.LocalFileSystem(), uri)


def write_stats(root: str, operator: str, key: int, seq: int, stats: dict[str, Any]) -> None:
    fs, base = _fs(root)
    folder = f"{base.rstrip('/')}/{operator}/{key}"
    fs.create_dir(folder, recursive=True)
    with fs.open_output_stream(f"{folder}/{seq:012d}.json") as out:
        out.write(json.dumps(stats, separators=(",", ":")).encode())


def read_stats(root: str, operator: str) -> Iterator[dict[str, Any]]:
    """Every statistics record of ``operator`` (skipping files cut short by a crash)."""
    fs, base = _fs(root)
    selector = pafs.FileSelector(f"{base.rstrip('/')}/{operator}", recursive=True, allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.path.endswith(".json"):
            continue
        with fs.open_input_stream(info.path) as f:
            try:
                yield json.loads(f.read())
            except ValueError:
                continue


def publish(root: str, name: str, version: int, doc: dict[str, Any]) -> None:
    """Publish version ``version`` of the control plane's decision ``name`` to the operators.

    Written to a temporary name and renamed where the file system allows it, so a reader sees a
    whole file or none.
    """
    fs, base = _fs(root)
    folder = f"{base.rstrip('/')}/control/{name}"
    fs.create_dir(folder, recursive=True)
    final, tmp = f"{folder}/{version:012d}.json", f"{folder}/.{version:012d}.json.tmp"
    with fs.open_output_stream(tmp) as out:
        out.write(json.dumps({"version": version, **doc}).encode())
    fs.move(tmp, final)


def _versions(fs: pafs.FileSystem, folder: str) -> list[int]:
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return sorted(int(i.base_name[:-5]) for i in infos if i.base_name.endswith(".json") and not i.base_name.startswith("."))


def newest(root: str, name: str, newer_than: int = -1, at_most: int | None = None) -> dict[str, Any] | None:
    """The newest published version of decision ``name`` above ``newer_than`` (and, with
    ``at_most``, not above it), else None."""
    fs, base = _fs(root)
    folder = f"{base.rstrip('/')}/control/{name}"
    versions = [v for v in _versions(fs, folder) if at_most is None or v <= at_most]
    if not versions or versions[-1] <= newer_than:
        return None
    with fs.open_input_stream(f"{folder}/{versions[-1]:012d}.json") as f:
        return json.loads(f.read())


def retire(root: str, name: str, below: int, keep: int = 0) -> int:
    """Delete the published versions of ``name`` below ``below``, except the newest ``keep`` of
    them; returns how many went."""
    fs, base = _fs(root)
    folder = f"{base.rstrip('/')}/control/{name}"
    old = [v for v in _versions(fs, folder) if v < below]
    gone = old[:len(old) - keep] if keep else old
    for v in gone:
        fs.delete_file(f"{folder}/{v:012d}.json")
    return len(gone)


def filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """The ``pyarrow`` file system of a statistics root and the root's path in it."""
    fs, base = _fs(root)
    return fs, base.rstrip("/")


def read_newest_stats(root: str, operator: str) -> dict[int, dict[str, Any]]:
    """Per key of ``operator``, its statistics record of the highest sequence number."""
    fs, base = _fs(root)
    selector = pafs.FileSelector(f"{base.rstrip('/')}/{operator}", allow_not_found=True)
    out: dict[int, dict[str, Any]] = {}
    for folder in fs.get_file_info(selector):
        if folder.type != pafs.FileType.Directory:
            continue
        files = sorted(i.path for i in fs.get_file_info(pafs.FileSelector(folder.path)) if i.path.endswith(".json"))
        for path in reversed(files):  # the newest whole file (a crash may cut one short)
            with fs.open_input_stream(path) as f:
                try:
                    out[int(folder.base_name)] = json.loads(f.read())
                    break
                except ValueError:
                    continue
    return out


def write_assignment(root: str, version: int, assignment: dict[int, int], splits: dict[int, int]) -> None:
    """Publish assignment ``version`` (workset or site id -> worker, and splits) to the operators."""
    publish(root, "assignment", version, {"assignment": {str(k): v for k, v in assignment.items()},
                                          "splits": {str(k): v for k, v in splits.items()}})


def read_assignment(root: str, newer_than: int = -1) -> tuple[int, dict[int, int], dict[int, int]] | None:
    """The newest published assignment if its version is above ``newer_than``, else None."""
    doc = newest(root, "assignment", newer_than)
    if doc is None:
        return None
    return int(doc["version"]), {int(k): int(v) for k, v in doc["assignment"].items()}, {int(k): int(v) for k, v in doc["splits"].items()}
