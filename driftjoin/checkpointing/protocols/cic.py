"""CIC: communication-induced checkpointing, the HMNR protocol (thesis 3.3.3; Hélary et al.).

UNC (independent checkpoints, message logging, the same recovery line) plus HMNR's rule that
forces a checkpoint *before* delivering a message that could close a Z-cycle, so no checkpoint
becomes useless (no domino effect). Each instance i keeps (n = number of instances):

- ``lc``: a Lamport clock of checkpoints, incremented at each checkpoint, raised to a larger
  received one;
- ``ckpt[n]``: how many checkpoints each instance has taken, as far as i knows;
- ``sent_to[n]``: whether i sent to k since its last checkpoint;
- ``taken[n]``: whether a causal Z-path from k's last known checkpoint to i contains a checkpoint;
- ``greater[n]``: whether i's clock is greater than k's, as far as i knows.

``lc``, ``ckpt``, ``taken`` and ``greater`` are piggybacked on every message (8 + 6n bytes:
int64, int32[n], bool[n], bool[n]) and saved with every checkpoint. On receiving m from j,
i takes a forced checkpoint first if

    (exists k: sent_to[k] and m.greater[k]) and m.lc > lc        (i sent to someone whose clock
                                                                   j knows is below j's)
    or (m.ckpt[i] == ckpt[i] and m.taken[i])                      (a Z-path from i's current
                                                                   interval back to i)

then merges: a larger ``m.lc`` replaces ``lc`` and ``greater`` (``greater[i]`` false); an equal
one ands ``greater``; per k != i a larger ``m.ckpt[k]`` replaces ``ckpt[k]`` and ``taken[k]``,
an equal one ors ``taken[k]``. At a checkpoint: ``sent_to`` all false, ``taken[k]`` and
``greater[k]`` true for k != i, ``lc`` and ``ckpt[i]`` + 1. (The condition and updates are those
of HMNR as implemented in CheckMate's CIC worker, instances standing for its operators.)
"""

from __future__ import annotations

from typing import Any, Generator

import numpy as np

from driftjoin.checkpointing.protocols.unc import Uncoordinated


class HMNRVars:
    __slots__ = ("lc", "ckpt", "sent_to", "taken", "greater", "sent")

    def __init__(self, n: int) -> None:
        self.lc = 0
        self.ckpt = np.zeros(n, dtype=np.int32)
        self.sent_to = np.zeros(n, dtype=bool)
        self.taken = np.zeros(n, dtype=bool)
        self.greater = np.zeros(n, dtype=bool)
        #: what the messages piggyback (``lc``, ``ckpt``, ``taken``, ``greater``), copied once per
        #: change of the variables: every message sent meanwhile carries the same copy
        self.sent: tuple | None = None

    def copy(self) -> "HMNRVars":
        v = HMNRVars(0)
        v.lc, v.ckpt, v.sent_to, v.taken, v.greater = (self.lc, self.ckpt.copy(), self.sent_to.copy(),
                                                       self.taken.copy(), self.greater.copy())
        return v


class CommunicationInduced(Uncoordinated):
    name = "cic"
    piggybacks = True
    intercepts_receive = True

    def __init__(self, engine: Any, interval: float, seed: int, **clocks: Any) -> None:
        super().__init__(engine, interval, seed, **clocks)
        self.n = len(engine.insts)
        self.meta_bytes = 8 + 6 * self.n
        self.vars = {i.id: HMNRVars(self.n) for i in engine.insts}
        for ck in self.initial.values():
            ck.extra = self.vars[ck.inst].copy()
        #: per channel, the piggybacked variables last merged at its receiver: merging the same
        #: ones again changes nothing (lc and ckpt only grow, greater only shrinks and taken only
        #: grows while they stay), so a receiver merges each sender's copy once
        self._merged: dict[int, tuple] = {}

    def piggyback(self, inst: Any, ch: Any) -> tuple[Any, int]:
        v = self.vars[inst.id]
        v.sent_to[ch.dst] = True
        if v.sent is None:
            v.sent = (v.lc, v.ckpt.copy(), v.taken.copy(), v.greater.copy())
        return v.sent, self.meta_bytes

    def extra(self, inst: Any) -> Any:
        """HMNR's checkpoint step, then a copy of the variables to save with the checkpoint."""
        i = inst.id
        v = self.vars[i]
        v.sent_to[:] = False
        v.taken[:] = True
        v.taken[i] = False
        v.greater[:] = True
        v.greater[i] = False
        v.lc += 1
        v.ckpt[i] += 1
        v.sent = None
        return v.copy()

    def on_receive(self, inst: Any, msg: Any) -> Generator:
        lc, ckpt, taken, greater = msg.meta
        i = inst.id
        v = self.vars[i]
        if (lc > v.lc and bool((v.sent_to & greater).any())) or (ckpt[i] == v.ckpt[i] and taken[i]):
            self.forced += 1
            yield from self.take(inst, forced=True)
            v = self.vars[i]
        if self._merged.get(msg.ch) is msg.meta:
            return
        self._merged[msg.ch] = msg.meta
        changed = False
        if lc > v.lc:
            v.lc = lc
            v.greater = greater.copy()
            v.greater[i] = False
            changed = True
        elif lc == v.lc:
            both = v.greater & greater
            if (both != v.greater).any():
                v.greater, changed = both, True
        newer = ckpt > v.ckpt
        newer[i] = False
        same = ckpt == v.ckpt
        same[i] = False
        if newer.any():
            v.ckpt[newer] = ckpt[newer]
            v.taken[newer] = taken[newer]
            changed = True
        gained = same & taken & ~v.taken
        if gained.any():
            v.taken |= gained
            changed = True
        if changed:
            v.sent = None

    def after_recovery(self, line: dict[int, Any]) -> None:
        super().after_recovery(line)
        self._merged.clear()
        for i, ck in line.items():
            self.vars[i] = ck.extra.copy()
