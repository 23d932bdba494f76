"""Global workset ids: the space partition in the high 32 bits, the local id below."""

from __future__ import annotations

import numpy as np

WORKSET_BITS = 32


def global_workset(partition: int | np.ndarray, local: int | np.ndarray) -> np.ndarray | int:
    """A workset's global id: its space partition in the high bits, its local id below."""
    return (np.asarray(partition, dtype=np.int64) << WORKSET_BITS) | np.asarray(local, dtype=np.int64)

