"""Grouping keys that pin each logical worker to a chosen state partition.

A grouping key ``k`` of type int lands in shuffle partition ``pmod(murmur3(k, seed=42), N)``
(Spark's ``hash``). Choosing, for worker i, the smallest unused non-negative int whose hash
falls in partition ``i mod N`` places the workers round-robin on the N partitions: with
N = the number of workers each worker has a Spark task of its own; with fewer partitions
several logical workers share one task, which lowers the fixed cost of a micro-batch (each
stateful task costs about 100 ms whatever it does: docs/architecture.md, "Measured costs").
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
def slot_keys(n: int, partitions: int | None = None) -> tuple[int, ...]:
    """``keys[i]`` is an int grouping key that Spark places in shuffle partition ``i mod partitions``
    of ``partitions`` (default ``n``: one worker per partition)."""
    parts = n if partitions is None else partitions
    free: dict[int, list[int]] = {}
    need = [sum(1 for i in range(n) if i % parts == q) for q in range(parts)]
    k = 0
    while any(len(free.get(q, ())) < need[q] for q in range(parts)):
        q = spark_hash_int(k) % parts
        if len(free.setdefault(q, [])) < need[q]:
            free[q].append(k)
        k += 1
    return tuple(free[i % parts][i // parts] for i in range(n))


class SlotPlan:
    """The keys of an operator plan whose ``parallelism`` logical workers share ``partitions``
    Spark state partitions (round-robin; ``None``: one partition per worker).

    A mixin for the operators' plan dataclasses, which define ``parallelism`` (and optionally
    ``partitions``): worker ``w``'s grouping key is ``keys[w]``, and :meth:`slot_of` gives the
    worker of a key.
    """

    parallelism: int

    @property
    def keys(self) -> tuple[int, ...]:
        return slot_keys(self.parallelism, getattr(self, "partitions", None))

    def slot_of(self, key: int) -> int:
        """The worker whose grouping key is ``key``."""
        return self.keys.index(int(key))
