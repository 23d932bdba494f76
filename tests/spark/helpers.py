"""Shared helpers of the Spark tests: input files in micro-batch order, streaming runs."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable

#: Modification time of the first input file: the file source takes files in mtime order, and
#: files written within one clock tick would come in any order.
FIRST_MTIME = 1_700_000_000


def write_batches(folder: Path, batches: Iterable[Iterable[Any]], *, start: int = 0, first_mtime: int = FIRST_MTIME) -> None:
    """One JSON-lines file per micro-batch (``b{start + i}.json``) with increasing mtimes.

    A row is a dict (written as JSON) or a str (written as it is: a malformed line).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches, start=start):
        path = folder / f"b{i:04d}.json"
        with open(path, "w") as f:
            for row in rows:
                f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
        os.utime(path, (first_mtime + i, first_mtime + i))


def run_available_now(df, out: Path, checkpoint: Path, fmt: str = "parquet"):
    """Run a streaming DataFrame to the end of its input; returns the finished query."""
    q = (df.writeStream.format(fmt).option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return q
