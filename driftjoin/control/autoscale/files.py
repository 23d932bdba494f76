"""The lag of a file source: files in its directory that the query has not taken yet.

Spark's file source counts batches of its own log, not records, in its offsets, and reports no
latest offset, so its lag is not in the query progress. What it has taken is in its log in the
checkpoint (``<checkpoint>/sources/<i>/``: one JSON line per file, ``N.compact`` files holding
every entry up to batch ``N``); what it is offered is what its directory holds now (files
whose names start with ``.`` or ``_`` are not data, as Spark skips them). The lag in records is
the files not yet taken times the records per file the source has read so far.

Files are matched by name within the directory (the source reads one flat directory; files in
subdirectories, e.g. partitions, and glob paths are not counted: their lag stays unknown).
Listing a directory and reading the log once per monitoring window is cheap for the thousands
of files a stream keeps.
"""

from __future__ import annotations

import json
import posixpath
import re
from urllib.parse import urlparse

from pyarrow import fs as pafs

_DESCRIPTION = re.compile(r"^FileStreamSource\[(.+)\]$")
_GLOB = re.compile(r"[*?\[{]")


def file_source_path(description: str) -> str | None:
    """The directory of a file source from its progress description, or ``None`` (another
    source, or a glob)."""
    m = _DESCRIPTION.match(description or "")
    if not m or _GLOB.search(m.group(1)):
        return None
    return m.group(1)


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    """``file:/x``, ``file:///x`` and ``/x`` are local; other schemes (hdfs, s3, gs) as pyarrow knows them."""
    u = urlparse(uri)
    if u.scheme in ("", "file"):
        return pafs.LocalFileSystem(), u.path
    return pafs.FileSystem.from_uri(uri)


def _files(uri: str) -> list[pafs.FileInfo]:
    fs, base = _filesystem(uri)
    return [i for i in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)) if i.type == pafs.FileType.File]


def taken_files(log_dir: str, upto: int | None = None) -> set[str]:
    """Names of the files the file source's log says it has taken, in batches up to ``upto``.

    The log gets a batch's files when the batch is planned, before it runs: counting only the
    batches whose progress has been seen keeps the files taken in step with the records read
    (else records per file came out low while a batch ran: a lag of 466.7 for files of 50)."""
    fs, _ = _filesystem(log_dir)
    entries = {}
    for info in _files(log_dir):
        stem, _, ext = info.base_name.partition(".")
        if stem.isdigit() and ext in ("", "compact"):
            entries[int(stem)] = (ext == "compact", info.path)
    done = {b: e for b, e in entries.items() if upto is None or b <= upto}
    entries = done or entries       # the log compacted past ``upto`` and deleted the older files
    compacts = [b for b, (compact, _) in entries.items() if compact]
    first = max(compacts) if compacts else -1
    taken = set()
    for batch in sorted(b for b in entries if b >= first):
        with fs.open_input_stream(entries[batch][1]) as f:
            for line in f.read().decode().splitlines()[1:]:     # the first line is the log's version
                if line.strip():
                    taken.add(posixpath.basename(urlparse(json.loads(line)["path"]).path))
    return taken


def pending_files(directory: str, log_dir: str, upto: int | None = None) -> tuple[int, int]:
    """``(files offered and not taken, files taken)`` of a file source (taken: in batches up to
    ``upto``, see :func:`taken_files`)."""
    offered = {i.base_name for i in _files(directory) if not i.base_name.startswith((".", "_"))}
    taken = taken_files(log_dir, upto)
    return len(offered - taken), len(taken)
