"""Grouping keys that pin one worker to one state partition.

A grouping key ``k`` of type int lands in shuffle partition ``pmod(murmur3(k, seed=42), N)``
(Spark's ``hash``). Choosing, for worker i, the smallest non-negative int whose hash falls in
partition i gives exactly one worker per partition: no two workers share a Spark task.
"""

from __future__ import annotations

from functools import lru_cache

_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def spark_hash_int(value: int, seed: int = 42) -> int:
    """Spark's ``Murmur3_x86_32.hashInt`` (what ``hash(int_col)`` computes), as a signed int."""
    k1 = (value & _MASK) * 0xCC9E2D51 & _MASK
    k1 = _rotl(k1, 15) * 0x1B873593 & _MASK
    h1 = seed ^ k1
    h1 = _rotl(h1, 13)
    h1 = (h1 * 5 + 0xE6546B64) & _MASK
    h1 ^= 4
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


@lru_cache(maxsize=64)
def slot_keys(n: int) -> tuple[int, ...]:
    """``keys[i]`` is an int grouping key that Spark places in shuffle partition i of n."""
    keys: dict[int, int] = {}
    k = 0
    while len(keys) < n:
        slot = spark_hash_int(k) % n
        keys.setdefault(slot, k)
        k += 1
    return tuple(keys[i] for i in range(n))
