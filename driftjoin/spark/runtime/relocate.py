"""A checkpoint folder that was moved or copied, made to name its own files again.

Spark's ``transformWithState`` operators (every driftjoin stateful stage is one) keep, per
operator and committed batch, a metadata file ``state/<op>/_metadata/v2/<batch>`` that records the
*absolute* URI of the operator's state schema file (``stateSchemaFilePaths``:
``file:/old/folder/state/<op>/_stateSchema/<store>/<batch>_<uuid>``). Everything else in a
checkpoint is found relative to its root. So a checkpoint moved to another folder, machine or
bucket restarts only while the old folder still holds the schema files, and fails with ``File
file:/old/folder/state/0/_stateSchema/... does not exist`` once it does; a copy keeps reading the
original's schema files until they are deleted.

:func:`relocate_checkpoint` rewrites those URIs to the folder the checkpoint is in now (the same
relative path under the new root, which must hold the file) and the Hadoop checksum file beside
each rewritten file (``.<name>.crc``: Spark's local file system verifies it on read). Nothing else
changes: the state, offsets and commits are untouched, so the restarted query continues exactly
where it stopped. It is idempotent, and a no-op on a checkpoint that was not moved.

driftjoin calls it when a query that runs a driftjoin operator starts, before its first batch
(:mod:`driftjoin.spark.runtime.plan_store`): a moved checkpoint just works. Call it yourself on
a Spark Connect session (whose client has no start hook) or for a query with no driftjoin operator.
"""

from __future__ import annotations

import json
import logging
import os
import re
import struct
import zlib

from pyarrow import fs as pafs

from driftjoin.spark.runtime.files import filesystem, plain_path, read_whole, write_whole

log = logging.getLogger("driftjoin")

#: ``state/<op>/_metadata/v2/<batch>`` relative to the checkpoint root.
_METADATA = re.compile(r"(?:^|/)state/(\d+)/_metadata/v2/(\d+)$")
#: The part of a schema file's URI that is relative to the checkpoint root.
_SCHEMA = re.compile(r"/(state/\d+/_stateSchema/.+)$")
#: Hadoop's checksum files: ``crc\0``, bytes per checksum, a CRC-32 per chunk (big-endian).
_CRC_MAGIC = b"crc\x00"
_CRC_CHUNK = 512


def relocate_checkpoint(checkpoint: str) -> int:
    """Make a moved or copied checkpoint name its own state schema files (module docstring).

    Parameters
    ----------
    checkpoint:
        The checkpoint folder, where it is now: a local path or a URI (``file:``, ``hdfs://``,
        ``s3a://``...), as given to ``option("checkpointLocation", ...)``.

    Returns
    -------
    int
        How many metadata files were rewritten (0: the checkpoint already names its own files,
        or holds no ``transformWithState`` state).

    Examples
    --------
    >>> import tempfile
    >>> from driftjoin import relocate_checkpoint
    >>> relocate_checkpoint(tempfile.mkdtemp())   # an empty folder: nothing to rewrite
    0
    """
    fs, base = filesystem(checkpoint)
    base = base.rstrip("/")
    root = _root_uri(checkpoint, base)
    rewritten = 0
    for path in _metadata_files(fs, base):
        data = read_whole(fs, path)
        if data is None:
            continue
        moved = _relocated(data, root, fs, base)
        if moved is None:
            continue
        write_whole(fs, path, moved)
        _rewrite_checksum(fs, path, moved)
        rewritten += 1
    if rewritten:
        log.info("driftjoin: checkpoint %s was moved: %d state metadata files now name their schema files "
                 "under it", checkpoint, rewritten)
    return rewritten


def _root_uri(checkpoint: str, base: str) -> str:
    """The checkpoint root as Spark writes it: ``file:/abs/path`` locally, the URI otherwise."""
    local = plain_path(checkpoint)
    if "://" in local:
        return local.rstrip("/")
    return "file:" + os.path.abspath(base)


def _metadata_files(fs: pafs.FileSystem, base: str) -> list[str]:
    state = f"{base}/state"
    if fs.get_file_info(state).type != pafs.FileType.Directory:
        return []
    infos = fs.get_file_info(pafs.FileSelector(state, recursive=True))
    return sorted(i.path for i in infos
                  if i.type == pafs.FileType.File and _METADATA.search(i.path[len(base):]))


def _relocated(data: bytes, root: str, fs: pafs.FileSystem, base: str) -> bytes | None:
    """The metadata file with its schema URIs under ``root`` (None: nothing to change).

    The format is a version line (``v2``) and one JSON object."""
    version, sep, body = data.decode("utf-8").partition("\n")
    if not sep or version.strip() != "v2":
        return None
    meta = json.loads(body)
    changed = False
    for store in meta.get("stateStoreInfo", []):
        paths = store.get("stateSchemaFilePaths") or []
        for i, uri in enumerate(paths):
            match = _SCHEMA.search(uri)
            if match is None:
                continue
            here = f"{root}/{match.group(1)}"
            if here != uri and fs.get_file_info(f"{base}/{match.group(1)}").type == pafs.FileType.File:
                paths[i] = here
                changed = True
    if not changed:
        return None
    return f"{version}\n{json.dumps(meta, separators=(',', ':'))}".encode("utf-8")


def hadoop_checksum(data: bytes) -> bytes:
    """The content of Hadoop's ``.<name>.crc`` file for ``data`` (a CRC-32 per 512 bytes).

    >>> hadoop_checksum(b"v2")[:8]
    b'crc\\x00\\x00\\x00\\x02\\x00'
    """
    sums = b"".join(struct.pack(">I", zlib.crc32(data[i:i + _CRC_CHUNK]))
                    for i in range(0, len(data), _CRC_CHUNK))
    return _CRC_MAGIC + struct.pack(">i", _CRC_CHUNK) + sums


def _rewrite_checksum(fs: pafs.FileSystem, path: str, data: bytes) -> None:
    folder, name = path.rsplit("/", 1)
    crc = f"{folder}/.{name}.crc"
    if fs.get_file_info(crc).type == pafs.FileType.File:
        write_whole(fs, crc, hadoop_checksum(data))
