"""Columnar record batches shared by the S3J operators.

A record is ``(id, side, vector, ingest, window)``: ``side`` is 0 for the left stream and 1
for the right one (a self-join uses side 0 only), ``ingest`` is its ingestion time in epoch
seconds (the latency metric is measured from it) and ``window`` the index of the tumbling
window it belongs to. Vectors are already *prepared* for the metric (unit length for angular
and cosine).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


@dataclass
class Records:
    """A batch of records as parallel numpy arrays."""

    id: np.ndarray
    side: np.ndarray
    vec: np.ndarray
    ingest: np.ndarray
    window: np.ndarray

    def __len__(self) -> int:
        return len(self.side)

    @property
    def dim(self) -> int:
        return self.vec.shape[1]

    def take(self, idx: np.ndarray) -> "Records":
        return Records(**{f.name: getattr(self, f.name)[idx] for f in fields(self)})

    @staticmethod
    def empty(dim: int, id_dtype: np.dtype | type = np.int64) -> "Records":
        return Records(
            id=np.zeros(0, dtype=id_dtype),
            side=np.zeros(0, dtype=np.int8),
            vec=np.zeros((0, dim), dtype=np.float64),
            ingest=np.zeros(0, dtype=np.float64),
            window=np.zeros(0, dtype=np.int64),
        )

    @staticmethod
    def concat(parts: list["Records"]) -> "Records":
        parts = [p for p in parts if len(p)] or parts[:1]
        return Records(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Records)})

    def nbytes(self) -> int:
        id_bytes = self.id.nbytes if self.id.dtype != object else sum(len(str(x)) for x in self.id)
        return int(id_bytes + self.side.nbytes + self.vec.nbytes + self.ingest.nbytes + self.window.nbytes)
