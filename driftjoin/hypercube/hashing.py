"""Deterministic 64-bit hashing for routing.

Python's ``hash`` of ``str`` changes from process to process (PYTHONHASHSEED) and ``hash`` of
``int`` is the identity, so neither can route tuples the same way on a driver and on executors.
Every hash function of the paper is built here from SplitMix64 with a fixed seed:

* ``h^L : B -> [p]`` for light values is :func:`key_hash` with :data:`LIGHT_SEED`;
* ``h_R(b) : A -> [p_R(b)]`` and ``h_S(b) : C -> [p_S(b)]`` are the low bits of
  :func:`tuple_hash`. Grid sides are powers of two, so the bit just above the current side is the
  paper's ``h'`` used when a side doubles, and halving a side drops that bit again.
"""

from __future__ import annotations

import hashlib

import numpy as np

MASK64 = (1 << 64) - 1
LIGHT_SEED = 0x6C696768745F6842  # h^L of the parallel hash join (and SHC's light values)
GROUP_SEED = 0x62696371756547F1  # Join-Biclique's key -> subgroup hash
_SIDE_SEEDS = (0x525F7475706C6531, 0x535F7475706C6532)  # h_R, h_S


def splitmix64(x: int) -> int:
    """The SplitMix64 finaliser: a bijection of 64-bit integers with good avalanche."""
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def key_hash(key: int | str | bytes, seed: int) -> int:
    """A 64-bit hash of a join value that is the same in every process.

    Integers in the signed or unsigned 64-bit range are mixed directly; strings, bytes and larger
    integers go through an 8-byte BLAKE2b digest first.
    """
    if isinstance(key, int) and -(1 << 63) <= key < (1 << 64):
        base = key & MASK64
    else:
        raw = key.encode() if isinstance(key, str) else key if isinstance(key, bytes) else str(key).encode()
        base = int.from_bytes(hashlib.blake2b(raw, digest_size=8).digest(), "little")
    return splitmix64(base ^ seed)


def tuple_hash(side: int, tid: int) -> int:
    """The hash of one tuple that places it inside a grid (``h_R`` for side 0 = R, ``h_S`` for 1 = S).

    The paper hashes the non-join attribute (A or C); this hashes the tuple id instead, which is
    the same thing under set semantics and keeps duplicates of (a, b) balanced under bag semantics.
    """
    return splitmix64((tid & MASK64) ^ _SIDE_SEEDS[side])


def splitmix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`splitmix64` of every element of a ``uint64`` array (wrapping arithmetic)."""
    x = np.asarray(x, dtype=np.uint64)
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def tuple_hash_array(side: np.ndarray, low: np.ndarray) -> np.ndarray:
    """:func:`tuple_hash` of many tuples: ``side`` (0/1) and the low 64 bits of each tuple id."""
    seeds = np.asarray(_SIDE_SEEDS, dtype=np.uint64)[np.asarray(side, dtype=np.int64)]
    return splitmix64_array(np.asarray(low, dtype=np.uint64) ^ seeds)
