"""SWOOP core: continuous top-k set similarity joins over sliding windows.

Engine-agnostic (no Spark): numba kernels on numpy arrays for the built-in similarity
functions, plain Python (numpy, sortedcontainers) for any other well-behaved similarity and as
the tests' reference (``Swoop(..., engine=...)``, :mod:`driftjoin.swoop.join`). Implements Mann,
Augsten and Jensen, "SWOOP: Top-k Similarity Joins over Set Streams":

* :class:`Swoop` -- the SWOOP algorithm (inverted index with expiry-ordered lists, positional
  upper bound, skyband lower bound, minimal stock with end time index);
* :class:`BaseTopK` -- the baseline of section 3, the oracle of the tests;
* :class:`PartitionedTopK` -- the same top-k computed by ``p`` workers that each find a share
  of the pairs, merged exactly (:mod:`driftjoin.swoop.partitioned`: two designs, and a shared
  lower bound, :mod:`driftjoin.swoop.bound`);
* the well-behaved similarity functions of Table 2 (:mod:`driftjoin.swoop.similarity`);
* a set stream generator (:mod:`driftjoin.swoop.generator`).

API (both classes)::

    join = Swoop(k=10, similarity="jaccard", window=60.0)          # self-join
    changes = join.insert("tweet-1", ["a", "b", "c"], ts=12.5)      # -> list[TopKChange]
    changes += join.advance(80.0)                                   # expiries only
    result = join.topk()                                            # -> list[SimilarPair]

    rs = Swoop(k=10, similarity="cosine", window=60.0, two_stream=True)
    rs.insert(1, [3, 4], ts=0.0, side="R"); rs.insert(1, [4, 5], ts=1.0, side="S")

The tie-break, the change stream, the two-stream semantics and the bad-input policy are
documented in :mod:`~driftjoin.swoop.pairs`, :mod:`~driftjoin.swoop.framework` and
:mod:`~driftjoin.swoop.records`.
"""

from driftjoin.swoop.base import BaseTopK
from driftjoin.swoop.join import Swoop
from driftjoin.swoop.partitioned import PartitionedTopK
from driftjoin.swoop.pairs import SimilarPair, TopKChange
from driftjoin.swoop.records import DuplicateSetError, InvalidSetError, LateSetError
from driftjoin.swoop.similarity import (
    COSINE,
    DICE,
    HAMMING,
    JACCARD,
    OVERLAP,
    SIMILARITIES,
    Cosine,
    Dice,
    Hamming,
    Jaccard,
    Overlap,
    WellBehavedSimilarity,
    get_similarity,
)

__all__ = [
    "BaseTopK",
    "COSINE",
    "Cosine",
    "DICE",
    "Dice",
    "HAMMING",
    "Hamming",
    "DuplicateSetError",
    "InvalidSetError",
    "JACCARD",
    "LateSetError",
    "Jaccard",
    "OVERLAP",
    "Overlap",
    "PartitionedTopK",
    "SIMILARITIES",
    "SimilarPair",
    "Swoop",
    "TopKChange",
    "WellBehavedSimilarity",
    "get_similarity",
]
