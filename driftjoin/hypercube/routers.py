"""Routing functions: pure, frozen snapshots of a dispatcher's configuration.

A router maps one tuple to its routed copies ``((task, role), ...)``. It depends on nothing but
its own fields, so a Spark driver can broadcast it and executors can route a micro-batch with it.
"""

from __future__ import annotations

from collections.abc import Mapping

from driftjoin.hypercube.grid import Grid
from driftjoin.hypercube.hashing import GROUP_SEED, LIGHT_SEED, key_hash, tuple_hash
from driftjoin.hypercube.model import Key, Role, Side, StreamTuple

_SP = Role.STORE_PROBE


class HashRouter:
    """The parallel hash join: a tuple with join value b goes to task ``h^L(b)`` (store and probe)."""

    __slots__ = ("tasks", "_routes")

    def __init__(self, tasks: tuple[int, ...]) -> None:
        self.tasks = tasks
        self._routes = tuple(((t, _SP),) for t in tasks)

    def task_of(self, key: Key) -> int:
        return self.tasks[key_hash(key, LIGHT_SEED) % len(self.tasks)]

    def route(self, tup: StreamTuple) -> tuple[tuple[int, Role], ...]:
        return self._routes[key_hash(tup.key, LIGHT_SEED) % len(self._routes)]


class GridRouter:
    """SHC: light values by ``light``; a heavy value's R tuple to its grid row ``h_R mod p_R``, an
    S tuple to its grid column ``h_S mod p_S`` (every copy stores and probes)."""

    __slots__ = ("light", "_rows", "_cols")

    def __init__(self, light: HashRouter, grids: Mapping[Key, Grid]) -> None:
        self.light = light
        self._rows = {b: tuple(tuple((t, _SP) for t in row) for row in g.rows) for b, g in grids.items()}
        self._cols = {b: tuple(tuple((t, _SP) for t in col) for col in g.columns) for b, g in grids.items()}

    def route(self, tup: StreamTuple) -> tuple[tuple[int, Role], ...]:
        lines = (self._rows if tup.side == Side.R else self._cols).get(tup.key)
        if lines is None:
            return self.light.route(tup)
        return lines[tuple_hash(tup.side, tup.tid) & (len(lines) - 1)]


class BicliqueRouter:
    """Join-Biclique with ContRand routing (Lin et al., SIGMOD 2015).

    Units of R and units of S form the two sides of a biclique, each split into ``groups``
    subgroups. A tuple with join value b is stored (STORE) at one unit of subgroup ``g(b)`` of its
    own relation, chosen by a hash of the tuple (content-insensitive, i.e. random, inside the
    subgroup), and probes (PROBE) every unit of subgroup ``g(b)`` of the other relation
    (content-sensitive between subgroups). One subgroup is pure random routing with a broadcast of
    probes; one unit per subgroup is a hash join with R and S state on different units.
    """

    __slots__ = ("groups", "_store", "_probe")

    def __init__(self, r_groups: tuple[tuple[int, ...], ...], s_groups: tuple[tuple[int, ...], ...]) -> None:
        if len(r_groups) != len(s_groups) or not all(r_groups) or not all(s_groups):
            raise ValueError("both relations need the same number of non-empty subgroups")
        self.groups = len(r_groups)
        self._store = tuple(tuple(tuple(((u, Role.STORE),) for u in g) for g in side) for side in (r_groups, s_groups))
        self._probe = tuple(tuple(tuple((u, Role.PROBE) for u in g) for g in side) for side in (s_groups, r_groups))

    def route(self, tup: StreamTuple) -> tuple[tuple[int, Role], ...]:
        g = key_hash(tup.key, GROUP_SEED) % self.groups
        own = self._store[tup.side][g]
        return own[tuple_hash(tup.side, tup.tid) % len(own)] + self._probe[tup.side][g]
