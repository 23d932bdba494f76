"""Arrow-level validation and transport of vectors between the driftjoin operators.

Input vectors arrive as Arrow list arrays; rows that cannot be joined get a reason (the
dead-letter output). Between operators a vector travels as one binary value (its float64
bytes), which Arrow and the JVM move without per-element work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from driftjoin.distance import MAX_MAGNITUDE

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from driftjoin.deferred import pyarrow as pa, pyarrow_compute as pc

REASON_MISSING_ID = "missing id"
REASON_MISSING_VECTOR = "missing vector"
REASON_EMPTY = "empty vector"
REASON_NON_FINITE = "NaN, infinite or null element in vector"
REASON_ZERO = "zero vector has no direction (angular/cosine)"
REASON_TOO_LARGE = f"element magnitude above {MAX_MAGNITUDE:g}: distances would overflow; scale the vectors"


def reason_wrong_dim(dim: int) -> str:
    return f"wrong dimension (expected {dim})"


def validate(ids: pa.Array, vectors: pa.Array, dim: int, needs_nonzero: bool,
             bounded: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Check a batch; returns (valid mask, reasons (None where valid), matrix of valid rows).

    ``needs_nonzero``: a zero vector has no direction (angular, cosine). ``bounded``: elements
    above :data:`MAX_MAGNITUDE` are refused (metrics on raw coordinates; angular and cosine
    scale each vector before normalising it, so any finite vector has a direction).
    """
    n = len(vectors)
    reason = np.full(n, None, dtype=object)
    if isinstance(vectors, pa.ChunkedArray):
        vectors = vectors.combine_chunks()
    missing_id = ids.is_null().to_numpy(zero_copy_only=False)
    reason[missing_id] = REASON_MISSING_ID
    missing_vec = vectors.is_null().to_numpy(zero_copy_only=False)
    reason[missing_vec & (reason == None)] = REASON_MISSING_VECTOR  # noqa: E711
    lengths = pc.list_value_length(vectors).fill_null(-1).to_numpy(zero_copy_only=False)
    reason[(lengths == 0) & (reason == None)] = REASON_EMPTY  # noqa: E711
    reason[(lengths != dim) & (reason == None)] = reason_wrong_dim(dim)  # noqa: E711
    shaped = np.nonzero(reason == None)[0]  # noqa: E711
    mat = np.zeros((0, dim))
    if len(shaped):
        sub = vectors.take(pa.array(shaped))
        flat = pc.list_flatten(sub).cast(pa.float64())
        mat = flat.to_numpy(zero_copy_only=False).reshape(len(shaped), dim)
        bad = ~np.isfinite(mat).all(axis=1)
        if bounded:
            huge = ~bad & (np.abs(mat).max(axis=1, initial=0.0) > MAX_MAGNITUDE)
            reason[shaped[huge]] = REASON_TOO_LARGE
            bad |= huge
        if needs_nonzero:
            zero = ~bad & ~np.any(mat != 0.0, axis=1)
            reason[shaped[zero]] = REASON_ZERO
            bad |= zero
        reason[shaped[bad & ~(reason[shaped] != None)]] = REASON_NON_FINITE  # noqa: E711
        mat = mat[~bad]
    valid = reason == None  # noqa: E711
    return valid, reason, mat


def to_binary(mat: np.ndarray, dtype: np.dtype | type = np.float64) -> pa.BinaryArray:
    """Each row of a matrix as one binary value of ``dtype`` (float64, or float32 for the grid join's float32 inputs)."""
    mat = np.ascontiguousarray(mat, dtype=dtype)
    n, dim = mat.shape if mat.ndim == 2 else (0, 0)
    width = mat.itemsize * dim
    offsets = np.arange(n + 1, dtype=np.int32) * width
    return pa.BinaryArray.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(mat.tobytes())])


def from_binary(values: np.ndarray | list, dim: int, dtype: np.dtype | type = np.float64) -> np.ndarray:
    """Inverse of :func:`to_binary` for a pandas/numpy column of bytes."""
    if len(values) == 0:
        return np.zeros((0, dim), dtype=dtype)
    return np.frombuffer(b"".join(values), dtype=dtype).reshape(len(values), dim)


def binary_rows(mat: np.ndarray) -> list[bytes]:
    """Rows of a float64 matrix as a list of bytes (for pandas output columns)."""
    mat = np.ascontiguousarray(mat, dtype=np.float64)
    if len(mat) == 0:
        return []
    data = mat.tobytes()
    width = mat.shape[1] * 8
    return [data[i : i + width] for i in range(0, len(data), width)]
