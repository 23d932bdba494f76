"""Versioned decisions of the control plane, published to the operators through files.

A driver-side controller (the workset balancer, the shared top-k bound, natural_join's
partitionings, equi_join's routing tables) decides between micro-batches and *publishes*: version
``v`` of decision ``name`` is ``<dir>/control/<name>/<v>.json``, written whole
(:func:`~driftjoin.spark.runtime.files.write_whole`) and never changed afterwards. An operator
reads the newest version (or the one its batch is bound to) at the start of a batch, so a task
sees a whole decision or none, and a replayed batch may adopt a newer version than its first
attempt did: every operator's routing is exact for any sequence of versions (the argument is in
each operator's module). Larger values that are not versions of one name (natural_join's fitted
partitionings, a joiner's record for the controller) are *blobs* under ``<dir>/control/``, written
the same way.

``dir`` is a metrics directory (:func:`~driftjoin.spark.runtime.queries.metrics_filesystem`): a
local path, a ``pyarrow.fs`` URI, or a default one inside the query's checkpoint.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from driftjoin.spark.runtime.files import read_whole, write_whole
from driftjoin.spark.runtime.queries import metrics_filesystem

if TYPE_CHECKING:
    from pyarrow import fs as pafs
else:
    from driftjoin.deferred import pyarrow_fs as pafs


def _folder(root: str, name: str) -> tuple[pafs.FileSystem, str]:
    fs, base = metrics_filesystem(root)
    return fs, f"{base}/control/{name}"


def publish(root: str, name: str, version: int, doc: dict[str, Any]) -> None:
    """Publish version ``version`` of decision ``name`` (a reader sees a whole file or none)."""
    fs, folder = _folder(root, name)
    write_whole(fs, f"{folder}/{version:012d}.json", json.dumps({"version": version, **doc}).encode())


def _versions(fs: pafs.FileSystem, folder: str) -> list[int]:
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    return sorted(int(i.base_name[:-5]) for i in infos if i.base_name.endswith(".json") and not i.base_name.startswith("."))


def versions(root: str, name: str) -> list[int]:
    """The published versions of decision ``name``, ascending."""
    return _versions(*_folder(root, name))


def _read(fs: pafs.FileSystem, folder: str, version: int) -> dict[str, Any] | None:
    data = read_whole(fs, f"{folder}/{version:012d}.json")
    return None if data is None else json.loads(data)


def read_version(root: str, name: str, version: int) -> dict[str, Any] | None:
    """Version ``version`` of decision ``name`` (None if it is not there, e.g. retired)."""
    return _read(*_folder(root, name), version)


def newest(root: str, name: str, newer_than: int = -1, at_most: int | None = None) -> dict[str, Any] | None:
    """The newest published version of decision ``name`` above ``newer_than`` (and, with
    ``at_most``, not above it), else None."""
    fs, folder = _folder(root, name)
    found = [v for v in _versions(fs, folder) if at_most is None or v <= at_most]
    if not found or found[-1] <= newer_than:
        return None
    return _read(fs, folder, found[-1])


def retire(root: str, name: str, below: int | None = None, keep: int = 0) -> int:
    """Delete the published versions of ``name`` below ``below`` (None: all of them), except
    the newest ``keep`` of them; returns how many went."""
    fs, folder = _folder(root, name)
    old = [v for v in _versions(fs, folder) if below is None or v < below]
    gone = old[:len(old) - keep] if keep else old
    for v in gone:
        fs.delete_file(f"{folder}/{v:012d}.json")
    return len(gone)


def publish_blob(root: str, path: str, data: bytes) -> None:
    """Write ``data`` to ``<root>/control/<path>``, whole or absent."""
    fs, target = _folder(root, path)
    write_whole(fs, target, data)


def read_blob(root: str, path: str) -> bytes | None:
    """The bytes written by :func:`publish_blob` (None if absent)."""
    return read_whole(*_folder(root, path))


def delete_blob(root: str, path: str) -> None:
    """Remove a blob (nothing happens if it is gone already)."""
    fs, target = _folder(root, path)
    try:
        fs.delete_file(target)
    except FileNotFoundError:
        pass
