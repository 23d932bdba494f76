"""The shared directory's file systems (:mod:`driftjoin.spark.runtime.files`): one resolution per
URI and process, so a control plane and its tasks do not ask an object store for its bucket's
region on every read of a statistic or a decision."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

import pyarrow.fs as pafs

from driftjoin.spark.runtime import decisions, files


def test_a_uri_is_resolved_once_per_process_and_keeps_what_was_written(monkeypatch) -> None:
    calls: list[str] = []
    real = pafs.FileSystem.from_uri

    def counting(uri: str):
        calls.append(uri)
        return real(uri)

    monkeypatch.setattr(files, "pafs", SimpleNamespace(FileSystem=SimpleNamespace(from_uri=counting),
                                                       LocalFileSystem=pafs.LocalFileSystem,
                                                       HadoopFileSystem=pafs.HadoopFileSystem))
    # pyarrow's in-memory file system: a new one per resolution, so a second resolution would
    # lose what the first call wrote
    root = f"mock:///metrics-{uuid.uuid4().hex}"
    decisions.publish(root, "plan", 1, {"cut": [3, 7]})
    decisions.publish(root, "plan", 2, {"cut": [5]})
    assert decisions.versions(root, "plan") == [1, 2]
    assert decisions.read_version(root, "plan", 1) == {"version": 1, "cut": [3, 7]}
    assert decisions.newest(root, "plan") == {"version": 2, "cut": [5]}
    assert calls == [root]


def test_local_paths_and_one_file_system_per_uri() -> None:
    fs, path = files.filesystem("file:///tmp/x/y")
    assert isinstance(fs, pafs.LocalFileSystem) and path == "/tmp/x/y"
    fs, path = files.filesystem("/tmp/x")
    assert isinstance(fs, pafs.LocalFileSystem) and path == "/tmp/x"
    other = f"mock:///{uuid.uuid4().hex}/a"
    assert files.filesystem(other)[0] is files.filesystem(other)[0]
    assert files.filesystem(other)[0] is not files.filesystem(f"mock:///{uuid.uuid4().hex}/a")[0]
