"""Files the driver and the tasks share: where they are, and one way to write them whole.

Statistics, published decisions, blobs and moved state all live under a directory the driver and
every executor reach: a local path (local mode, a one-machine cluster) or a URI that
``pyarrow.fs`` opens (``s3://``, ``hdfs://``, ``gs://``). A reader must never see half a file, so
every writer goes through :func:`write_whole`: on file systems with an atomic rename (local,
HDFS) the bytes go to a temporary name unique to the writer and are renamed into place; object
stores (S3, GCS) make an object visible only when its upload completes, so there the file is
written directly. Two writers of the same file (a task and its retry) therefore never mix their
bytes, and the last rename wins with a whole file.

A URI's file system is resolved once per process (:func:`filesystem`): for ``s3://`` the
resolution asks the bucket for its region, a round trip the control plane and every task would
otherwise pay on each read of a statistic or a decision. A resolved file system stays valid:
pyarrow's S3 file system without explicit keys takes its credentials from the AWS default chain,
which renews temporary credentials (instance profiles, web identity) when they expire. The
resolved file systems are let go at exit before pyarrow finalizes its S3 support, as pyarrow asks
(an S3 file system still alive then may abort the interpreter's exit).
"""

from __future__ import annotations

import atexit
import uuid
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyarrow import fs as pafs
else:
    from driftjoin.deferred import pyarrow_fs as pafs



def plain_path(uri: str) -> str:
    """A ``file:`` URI as a local path; any other location unchanged."""
    if not uri.startswith("file:"):
        return uri
    path = uri[len("file:"):]
    while path.startswith("//"):
        path = path[1:]
    return path


def filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system and path for a local path or a URI (``file:``, ``s3://``, ``hdfs://``...),
    the same file system object for the same URI in a process (module docstring).

    Parameters
    ----------
    uri:
        A local path, a ``file:`` URI or a URI that ``pyarrow.fs.FileSystem.from_uri`` opens;
        Hadoop's ``s3a://`` and ``s3n://`` are read as ``s3://``.

    >>> fs, path = filesystem("file:///tmp/metrics")
    >>> type(fs).__name__, path
    ('LocalFileSystem', '/tmp/metrics')
    >>> filesystem("mock:///m")[0] is filesystem("mock:///m")[0]
    True
    """
    uri = plain_path(uri)
    if "://" in uri:
        scheme, rest = uri.split("://", 1)
        # Hadoop's S3 connector names (s3a, s3n) are plain s3 to pyarrow
        return _from_uri(("s3://" + rest) if scheme in ("s3a", "s3n") else uri)
    return pafs.LocalFileSystem(), uri


@lru_cache(maxsize=64)
def _from_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """``FileSystem.from_uri``, once per URI and process (a process reaches a few directories)."""
    resolved = pafs.FileSystem.from_uri(uri)
    if _from_uri.cache_info().currsize == 0:
        # registered after pyarrow.fs registered its S3 finalizer (importing it above), so run
        # before it: exit hooks run last registered first
        atexit.register(_from_uri.cache_clear)
    return resolved


def write_whole(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the whole file or the one before (module
    docstring); the parent folder is created."""
    folder, name = path.rsplit("/", 1)
    fs.create_dir(folder, recursive=True)
    if isinstance(fs, (pafs.LocalFileSystem, pafs.HadoopFileSystem)):
        tmp = f"{folder}/.{name}.{uuid.uuid4().hex}.tmp"
        with fs.open_output_stream(tmp) as out:
            out.write(data)
        fs.move(tmp, path)
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)


def read_whole(fs: pafs.FileSystem, path: str) -> bytes | None:
    """The bytes of ``path`` (None if it is not there)."""
    try:
        with fs.open_input_stream(path) as f:
            return f.read()
    except FileNotFoundError:
        return None
