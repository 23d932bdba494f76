"""Versioned decisions of the control plane, published to the operators through files.

A driver-side controller (the workset balancer, the shared top-k bound, natural_join's
partitionings, equi_join's routing tables) decides between micro-batches and *publishes*: version
``v`` of decision ``name`` is ``<dir>/control/<name>/<v>.json``, written whole
(:func:`~driftjoin.spark.runtime.files.write_whole`) and never changed afterwards, so a task sees a
whole decision or none. Larger values that are not versions of one name (natural_join's fitted
partitionings, a joiner's record for the controller) are *blobs* under ``<dir>/control/``, written
the same way.

**Binding a version to a batch.** A controller publishes whenever it gets to it, also while a
batch runs. Tasks that route must not then simply read the newest version: when Spark loses an
executor it runs again the map tasks whose shuffle output was there, but not the reducers that
had already read that output, so a second attempt that routes by a newer version than its first
sends rows to reducers that finished without them (seen on a standalone cluster: one batch's S3J
memberships lost). So the routing version of batch ``b`` is *bound* before ``b`` starts:
:func:`bind`, run by one task of batch ``b - 1`` (the plan key's, which every batch with data
visits: :mod:`driftjoin.spark.runtime.processor`), writes ``<name>.bound/<b>.json`` naming the
newest version; :func:`bound` gives batch ``b`` the binding with the largest batch not above
``b``. Batch ``b`` starts only after batch ``b - 1`` committed, so every attempt of its tasks, and
its replay after a restart, reads the same version; a re-run of the binding task before then
may bind a newer one, which nothing has read yet. Bound versions never go down, and a decision
takes effect one batch after it is published at the earliest.

A routing task reads the binding of its batch once per process: the bindings that serve batch
``b`` are written by batches before it, so once ``b`` runs its bound version is fixed:
:func:`version_at` keeps which binding serves ``b`` and :func:`document` the files read, by
metrics directory, decision, streaming query id and batch or version (a new checkpoint is a new
query id; a re-run of ``b`` after a restart reads the same binding). That takes a listing and a
read of the control folder off every key and task of every batch, which on an object store is a
round trip each. equi_join's routing bindings, versioned by the batch they start serving, are
read the same way.

``dir`` is a metrics directory (:func:`~driftjoin.spark.runtime.queries.metrics_filesystem`): a
local path, a ``pyarrow.fs`` URI, or a default one inside the query's checkpoint.
"""

from __future__ import annotations

import json
from collections import OrderedDict
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


def _bindings(name: str) -> str:
    return f"{name}.bound"


def bind(root: str, name: str, batch: int) -> int | None:
    """Bind the newest published version of decision ``name`` to the batches from ``batch`` on.

    Run by one task of batch ``batch - 1`` (module docstring); writes only when the version
    changes, and drops the bindings no batch from ``batch - 1`` on can read.

    Parameters
    ----------
    root:
        The metrics directory the decisions are published under.
    name:
        The decision's name.
    batch:
        The first batch the binding serves: one after the batch running the caller.

    Returns the bound version (None: nothing published yet, nothing bound).

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> publish(root, "plan", 1, {"workers": 2})
    >>> bind(root, "plan", 4), bound(root, "plan", 3), bound(root, "plan", 4)
    (1, None, 1)
    """
    found = versions(root, name)
    if not found:
        return None
    fs, folder = _folder(root, _bindings(name))
    starts = _versions(fs, folder)
    current = [s for s in starts if s <= batch]
    if not current or _bound_version(_read(fs, folder, current[-1]), root, name, current[-1]) != found[-1]:
        write_whole(fs, f"{folder}/{batch:012d}.json", json.dumps({"version": found[-1]}).encode())
    serving = [s for s in starts if s <= batch - 1]
    for start in starts:
        if serving and start < serving[-1]:
            fs.delete_file(f"{folder}/{start:012d}.json")
    return found[-1]


#: the largest version not above a running batch, read in this process: (root, name, query, batch) -> version
_AT: OrderedDict[tuple[str, str, str, int], int | None] = OrderedDict()
_AT_KEEP = 256
#: published documents read in this process: (root, name, query, version) -> document
_DOCS: OrderedDict[tuple[str, str, str, int], dict[str, Any]] = OrderedDict()
_DOCS_KEEP = 32


def _keep(cache: OrderedDict, key: Any, value: Any, size: int) -> None:
    cache[key] = value
    while len(cache) > size:
        cache.popitem(last=False)


def version_at(root: str, name: str, batch: int, query: str | None = None) -> int | None:
    """The largest published version of ``name`` not above ``batch`` (None: none is).

    For decisions whose versions are the batches they start serving (the bindings of
    :func:`bind`, equi_join's routing bindings): those that serve a batch are written before it
    starts, so once it runs the answer is fixed, and with the task's ``query`` id it is kept for
    the process's later tasks of that batch (module docstring). None lists the folder every time.

    Parameters
    ----------
    root, name:
        The metrics directory and the decision, as for :func:`publish`.
    batch:
        The running batch.
    query:
        The streaming query's id (a new checkpoint is a new id), or None.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> publish(root, "starts", 3, {})
    >>> version_at(root, "starts", 2), version_at(root, "starts", 5, query="q")
    (None, 3)
    """
    key = None if query is None else (root, name, query, batch)
    if key is not None and key in _AT:
        return _AT[key]
    found = [v for v in versions(root, name) if v <= batch]
    version = found[-1] if found else None
    if key is not None:
        _keep(_AT, key, version, _AT_KEEP)
    return version


def document(root: str, name: str, version: int, query: str | None = None) -> dict[str, Any] | None:
    """Version ``version`` of ``name`` (:func:`read_version`); with ``query`` kept for the process's
    later tasks (a published version never changes; callers must not change the document)."""
    key = None if query is None else (root, name, query, version)
    doc = _DOCS.get(key) if key is not None else None
    if doc is None:
        doc = read_version(root, name, version)
        if doc is not None and key is not None:
            _keep(_DOCS, key, doc, _DOCS_KEEP)
    return doc


def bound(root: str, name: str, batch: int | None, query: str | None = None) -> int | None:
    """The version of decision ``name`` bound to batch ``batch``: the one :func:`bind` wrote for
    the largest batch not above it (None: none is bound yet).

    Parameters
    ----------
    root, name:
        The metrics directory and the decision, as for :func:`bind`.
    batch:
        The running batch; None (outside a streaming query, nothing to bind) gives the newest
        published version.
    query:
        The streaming query's id, given by a task of batch ``batch``: the binding found is kept
        for the process's later tasks of that batch (:func:`version_at`). None reads the folder.

    >>> import tempfile
    >>> root = tempfile.mkdtemp()
    >>> publish(root, "plan", 1, {})
    >>> bind(root, "plan", 2), bound(root, "plan", 2, query="q"), bound(root, "plan", None)
    (1, 1, 1)
    """
    if batch is None:
        found = versions(root, name)
        return found[-1] if found else None
    start = version_at(root, _bindings(name), batch, query)
    if start is None:
        return None
    return _bound_version(document(root, _bindings(name), start, query), root, name, start)


def _bound_version(binding: dict[str, Any] | None, root: str, name: str, start: int) -> int:
    """The version ``binding``, the binding of ``name`` written for batch ``start`` (listed, then
    read: None if it went away), names."""
    if binding is None:
        raise RuntimeError(f"the binding {root}/control/{_bindings(name)}/{start:012d}.json went away while it was "
                           "read: two queries share one metrics directory; give each its own metrics_dir")
    return int(binding["version"])


def read_bound(root: str, name: str, batch: int | None, newer_than: int = -1, query: str | None = None,
               ) -> dict[str, Any] | None:
    """The decision bound to batch ``batch`` (:func:`bound`; ``query`` as there, and the document
    is kept too: callers must not change it) if its version is above ``newer_than``, else None. A
    bound version that is gone fails: the directory lost files the query routes by."""
    version = bound(root, name, batch, query)
    if version is None or version <= newer_than:
        return None
    doc = document(root, name, version, query)
    if doc is None:
        raise RuntimeError(f"decision {name} version {version}, bound to batch {batch}, is missing from {root}/control: "
                           "the metrics directory lost files the query routes by")
    return doc


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
