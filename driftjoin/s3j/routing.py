"""Routing workset memberships to workers under a changing assignment, exactly once.

The balancer may move a workset to another worker, or split a heavy one, at any micro-batch:
at a window boundary (the paper's setting: nothing needs to move) or inside a window (which the
paper could only do by stopping Flink and rewriting a savepoint). No state is transferred.
Instead, each space partition remembers, per (workset, window), which workers *hold* stored
members, and routes every new member:

- one *store* copy to the workset's current owner, which pairs it with the members stored there
  and with the other new members, then keeps it;
- one *probe* copy (``store=False``) to every other holder of the same (workset, window), which
  pairs it with the members stored there only and keeps nothing.

A pair whose two members arrived before a move is found where they were stored; a pair with one
member from before and one from after is found by the later member's probe at the old holder;
a pair of two later members at the new owner: each pair exactly once. At a window boundary the
new window has no holders but the owner, so nothing is probed.

**Splitting a workset** (beyond the paper, its future work in section 9.6). A workset ``g`` split
into ``k`` parts becomes ``k (k + 1) / 2`` *sites*, one per unordered pair of parts ``{i, j}``. A
member is in part ``hash(id) % k`` and goes to the k sites that contain its part. A site
``{i, j}`` with ``i != j`` pairs only members of different parts; a site ``{i, i}`` pairs its
members as the workset did. Every pair of the workset is therefore met at exactly the site of its
two parts, and each site carries about ``2 / k^2`` of the workset's pairs, so sites can be
balanced like worksets. Members stored under ``g`` before the split stay where they are: new
members probe them as above (under ``g``).

Site ids live in the low 32 bits of the workset id: bits 0-23 the local workset id, bits 24-30
the site number (1-based), bit 31 set for a cross-part site. A member's part travels in the role
byte: ``role | (part + 1) << 2`` (``part = -1`` for unsplit worksets).

Holders are kept only for the worksets the balancer has touched (moved or split): every other
workset has always been stored at its partition's worker, its members go there in one
vectorised step, and nothing is recorded for it. When a workset is first moved or split, its
partition's worker becomes a holder of it in every window open at the time (if it stored
nothing there, probing it finds nothing), so the rule above holds from then on.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np

from driftjoin.s3j.compute import CROSS_BIT
from driftjoin.s3j.ids import WORKSET_BITS

LOCAL_BITS = 24
SITE_SHIFT = 24
MAX_PARTS = 15


def site_number(i: int, j: int) -> int:
    """1-based number of the site of the unordered part pair {i, j}."""
    lo, hi = min(i, j), max(i, j)
    return hi * (hi + 1) // 2 + lo + 1


def site_gid(gid: int, i: int, j: int) -> int:
    """Workset id of the site {i, j} of split workset ``gid``."""
    return int(gid) | (site_number(i, j) << SITE_SHIFT) | (CROSS_BIT if i != j else 0)


def base_gid(gid: np.ndarray | int) -> np.ndarray | int:
    """The workset a (site) id belongs to."""
    high = (np.asarray(gid, dtype=np.int64) >> WORKSET_BITS) << WORKSET_BITS
    return high | (np.asarray(gid, dtype=np.int64) & ((1 << LOCAL_BITS) - 1))


def encode_role(role: np.ndarray, part: np.ndarray) -> np.ndarray:
    return (np.asarray(role, dtype=np.int16) | ((np.asarray(part, dtype=np.int16) + 1) << 2)).astype(np.int8)


def decode_role(code: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = np.asarray(code, dtype=np.int16)
    return (c & 3).astype(np.int8), ((c >> 2) - 1).astype(np.int8)


def part_of(ids: np.ndarray, k: int) -> np.ndarray:
    """Stable part of each record id in 0..k-1 (the same on every machine and run)."""
    if ids.dtype.kind in "iu":
        return ((ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(33)).astype(np.int64) % k
    return np.array([zlib.crc32(str(x).encode()) % k for x in ids], dtype=np.int64)


@dataclass
class Routed:
    """Copies to send: ``row`` indexes the input memberships."""

    row: np.ndarray
    worker: np.ndarray
    gid: np.ndarray
    role: np.ndarray  # encoded role byte (role | part << 2)
    store: np.ndarray


@dataclass
class WorksetRouter:
    """Assignment, splits and holders of one space partition's worksets (part of its state)."""

    partition: int
    assignment: dict[int, int] = field(default_factory=dict)
    splits: dict[int, int] = field(default_factory=dict)
    #: holders of the worksets (and sites) the balancer has touched, per (workset, window)
    holders: dict[tuple[int, int], set[int]] = field(default_factory=dict)
    version: int = -1
    #: windows this partition has routed members of and not yet expired
    windows: set[int] = field(default_factory=set)
    #: worksets whose members may live elsewhere than this partition's worker (moved or split)
    touched: set[int] = field(default_factory=set)

    def owner(self, gid: int) -> int:
        return self.assignment.get(gid, self.partition)

    def update(self, version: int, assignment: dict[int, int], splits: dict[int, int]) -> None:
        """Adopt a newer assignment (only this partition's worksets matter)."""
        if version <= self.version:
            return
        mine = lambda g: (int(g) >> WORKSET_BITS) == self.partition  # noqa: E731
        self.assignment = {int(g): int(w) for g, w in assignment.items() if mine(g)}
        for g, k in splits.items():
            if mine(g) and int(g) not in self.splits:
                if not 2 <= int(k) <= MAX_PARTS:
                    raise ValueError(f"a workset can be split into 2..{MAX_PARTS} parts, got {k}")
                self.splits[int(g)] = int(k)
        for g in (set(self.assignment) | set(self.splits)) - self.touched:
            base = int(base_gid(g))
            if base not in self.touched:  # until now always stored at this partition's worker
                for w in self.windows:
                    self.holders.setdefault((base, w), set()).add(self.partition)
                self.touched.add(base)
            self.touched.add(g)
        self.version = version

    def expire_before(self, window: int) -> None:
        for key in [k for k in self.holders if k[1] < window]:
            del self.holders[key]
        self.windows = {w for w in self.windows if w >= window}

    def route(self, gid: np.ndarray, role: np.ndarray, window: np.ndarray, ids: np.ndarray) -> Routed:
        """Copies of memberships (gid, role, window, record id) for the workers."""
        rows: list[np.ndarray] = []
        workers: list[np.ndarray] = []
        gids: list[np.ndarray] = []
        roles: list[np.ndarray] = []
        stores: list[np.ndarray] = []

        def emit(sel: np.ndarray, g: int, w: int, r: np.ndarray, store: bool) -> None:
            rows.append(sel)
            workers.append(np.full(len(sel), w, dtype=np.int64))
            gids.append(np.full(len(sel), g, dtype=np.int64))
            roles.append(r)
            stores.append(np.full(len(sel), store))

        self.windows.update(np.unique(window).tolist())
        plain_rows = ~np.isin(gid, np.fromiter(self.touched, np.int64, len(self.touched))) if self.touched else np.ones(len(gid), bool)
        if plain_rows.any():  # never moved nor split: stored at this partition's worker, nothing to record
            sel = np.nonzero(plain_rows)[0]
            emit(sel, 0, self.partition, encode_role(role[sel], np.full(len(sel), -1)), True)
            gids[-1] = gid[sel].astype(np.int64)
        rest = np.nonzero(~plain_rows)[0]
        gid, role, window, ids, base_row = gid[rest], role[rest], window[rest], ids[rest], rest
        keys = np.stack([gid, window], axis=1) if len(gid) else np.zeros((0, 2), dtype=np.int64)
        uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        by_group = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[by_group], np.arange(len(uniq) + 1))
        for u, (g, w) in enumerate(uniq.tolist()):
            local = by_group[bounds[u] : bounds[u + 1]]
            sel = base_row[local]
            plain = encode_role(role[local], np.full(len(local), -1))
            k = self.splits.get(g)
            for h in sorted(self.holders.get((g, w), set()) - ({self.owner(g)} if k is None else set())):
                emit(sel, g, h, plain, False)  # probe members stored before a move or a split
            if k is None:
                emit(sel, g, self.owner(g), plain, True)
                self.holders.setdefault((g, w), set()).add(self.owner(g))
                continue
            part = part_of(ids[local], k)
            code = encode_role(role[local], part)
            for i in range(k):
                for j in range(i, k):
                    s = site_gid(g, i, j)
                    in_site = np.nonzero((part == i) | (part == j))[0]
                    if len(in_site) == 0:
                        continue
                    owner = self.assignment.get(s, self.owner(g))
                    for h in sorted(self.holders.get((s, w), set()) - {owner}):
                        emit(sel[in_site], s, h, code[in_site], False)
                    emit(sel[in_site], s, owner, code[in_site], True)
                    self.holders.setdefault((s, w), set()).add(owner)
        if not rows:
            z = np.zeros(0, dtype=np.int64)
            return Routed(z, z, z, np.zeros(0, np.int8), np.zeros(0, bool))
        return Routed(np.concatenate(rows), np.concatenate(workers), np.concatenate(gids),
                      np.concatenate(roles).astype(np.int8), np.concatenate(stores))
