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

    def decode(self, msg: Any) -> tuple:
        """The piggybacked ``(lc, ckpt, taken, greater)`` of a delivered message."""
        return msg.meta

    def on_receive(self, inst: Any, msg: Any) -> Generator:
        meta = self.decode(msg)
        lc, ckpt, taken, greater = meta
        i = inst.id
        v = self.vars[i]
        if (lc > v.lc and bool((v.sent_to & greater).any())) or (ckpt[i] == v.ckpt[i] and taken[i]):
            self.forced += 1
            yield from self.take(inst, forced=True)
            v = self.vars[i]
        if self._merged.get(msg.ch) is meta:
            return
        self._merged[msg.ch] = meta
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


def varint_bytes(values: np.ndarray | int) -> int:
    """Bytes of ``values`` (non-negative ints) as LEB128 varints, 7 bits per byte (protobuf's).

    >>> varint_bytes(0), varint_bytes(127), varint_bytes(128), varint_bytes(np.array([1, 300, 70000]))
    (1, 1, 2, 6)
    """
    if isinstance(values, (int, np.integer)):
        return max(1, (int(values).bit_length() + 6) // 7)
    v = np.asarray(values)
    if not v.size:
        return 0
    return int(v.size + (v >= 1 << 7).sum() + (v >= 1 << 14).sum() + (v >= 1 << 21).sum() + (v >= 1 << 28).sum())


def _index_set_bytes(indices: np.ndarray, n: int) -> int:
    """A set of entries of an n-vector: its indices as varints or a bitset, whichever is smaller
    (one tag byte says which, with the count)."""
    return 1 + min(varint_bytes(len(indices)) + varint_bytes(indices), (n + 7) // 8)


_NONE = np.zeros(0, dtype=np.int64)
_ALL: dict[int, np.ndarray] = {}


def _all(n: int) -> np.ndarray:
    _ALL[n] = np.arange(n)
    return _ALL[n]


class Piggyback:
    """What a message of CIC with packed vectors carries: the entries of ``ckpt``, ``taken`` and
    ``greater`` that changed since ``base`` (the previous message on the same channel; ``full``:
    against all-zero vectors), ``lc``, and the encoded size. ``sent`` is the sender's tuple the
    message encodes, kept in the sender's in-flight log to re-encode a message it re-sends
    after a recovery; the receiver decodes from the delta alone."""

    __slots__ = ("full", "lc", "ck_idx", "ck_val", "taken_idx", "greater_idx", "size", "sent")

    def __init__(self, full: bool, lc: int, ck_idx: np.ndarray, ck_val: np.ndarray, taken_idx: np.ndarray,
                 greater_idx: np.ndarray, size: int, sent: tuple) -> None:
        self.full, self.lc, self.ck_idx, self.ck_val = full, lc, ck_idx, ck_val
        self.taken_idx, self.greater_idx, self.size, self.sent = taken_idx, greater_idx, size, sent

    @property
    def empty(self) -> bool:
        return not self.full and not (len(self.ck_idx) or len(self.taken_idx) or len(self.greater_idx))


class CommunicationInducedPacked(CommunicationInduced):
    """HMNR with its piggyback compressed: ``cic-packed`` and ``cic-delta``.

    The thesis's CIC (:class:`CommunicationInduced`, ``cic``) carries the full vectors on every
    message, ``8 + 6n`` bytes (int32 ``ckpt[n]``, bool ``taken[n]`` and ``greater[n]``), which is
    what makes its message overhead grow with the instances. The literature's remedies, same
    protocol and same forced checkpoints, fewer bytes:

    - ``cic-packed`` (``delta=False``): the full vectors on every message, packed: ``lc`` and the
      ``ckpt`` entries as varints (checkpoint counts are small numbers), ``taken`` and
      ``greater`` as bitsets, ``n / 8`` bytes each.
    - ``cic-delta`` (``delta=True``): Singhal and Kshemkalyani's differential technique (1992)
      for vector clocks on FIFO channels: a message carries only the entries that changed since
      the previous message on the same channel (index and new value as varints, or a bitset of
      the flipped booleans when that is smaller) and ``lc`` if it changed, behind a tag byte
      whose bits say which parts follow; the receiver keeps the last vectors it decoded per
      channel and applies the delta. Unchanged variables cost the tag alone, one byte.

    Exactness: the receiver decodes what the sender encoded (FIFO channels, no loss between
    failures); a failure drops the messages in flight, so every channel starts again from full
    vectors after a recovery, the re-sent logged messages included (re-encoded from the tuple the
    sender's log kept). ``verify`` (tests) checks every decoded vector against the sender's.
    """

    name = "cic-packed"
    delta = False
    #: check every decoded piggyback against the tuple the sender encoded (tests)
    verify = False

    def __init__(self, engine: Any, interval: float, seed: int, **clocks: Any) -> None:
        super().__init__(engine, interval, seed, **clocks)
        self.meta_bytes = 0                                     # per message: see piggyback_bytes
        #: per channel, the tuple the last message sent on it encoded, and the one its receiver decoded
        self._sent_base: dict[int, tuple] = {}
        self._recv_base: dict[int, tuple] = {}
        self._zero = (0, np.zeros(self.n, dtype=np.int32), np.zeros(self.n, dtype=bool), np.zeros(self.n, dtype=bool))
        #: per instance, the piggybacks piggyback_bytes encoded for the sends under way
        self._pending: dict[int, list] = {}
        self._fulls: dict[int, Piggyback] = {}
        #: full piggybacks decoded (each is shared by the messages sent until the variables change)
        self._decoded: dict[int, tuple[Piggyback, tuple]] = {}

    def _sent_tuple(self, inst: Any) -> tuple:
        v = self.vars[inst.id]
        if v.sent is None:
            v.sent = (v.lc, v.ckpt.copy(), v.taken.copy(), v.greater.copy())
        return v.sent

    def encode(self, ch: int, sent: tuple) -> Piggyback:
        """``sent`` as a message on channel ``ch`` carries it (against the channel's base: ``cic-delta``)."""
        return self._delta(sent, self._sent_base.get(ch) if self.delta else None)

    def _delta(self, sent: tuple, base: tuple | None) -> Piggyback:
        lc = sent[0]
        if base is sent:           # nothing changed since the last message on the channel: the tag alone
            return Piggyback(False, lc, _NONE, _NONE, _NONE, _NONE, 1, sent)
        n = self.n
        if base is None:
            return self._full(sent)
        ck_idx = np.flatnonzero(sent[1] != base[1])
        ck_val = sent[1][ck_idx].astype(np.int64)
        taken_idx = np.flatnonzero(sent[2] != base[2])
        greater_idx = np.flatnonzero(sent[3] != base[3])
        # changed entries: (index, new value) pairs; flipped booleans as indices or a bitset
        # a tag (whose bits say which parts follow), lc if it changed, the parts that changed
        size = (1 + (varint_bytes(lc) if lc != base[0] else 0)
                + (varint_bytes(len(ck_idx)) + varint_bytes(ck_idx) + varint_bytes(ck_val) if len(ck_idx) else 0)
                + (_index_set_bytes(taken_idx, n) if len(taken_idx) else 0)
                + (_index_set_bytes(greater_idx, n) if len(greater_idx) else 0))
        return Piggyback(False, lc, ck_idx, ck_val, taken_idx, greater_idx, size, sent)

    def piggyback_bytes(self, inst: Any, sends: list) -> int:
        """Encodes the sends' piggybacks now (the sender's CPU pays for their bytes); ``piggyback``
        hands them out as the messages go, unless the variables or a base changed meanwhile."""
        sent = self._sent_tuple(inst)
        if not self.delta:
            size = self._packed_size(sent)
            return size * len(sends)
        base = self._sent_base
        pending = []
        total = 0
        seen: dict[int, tuple] = {}
        for ch, _rec, _size in sends:
            cid = ch.id
            b = seen.get(cid, base.get(cid))
            p = self._delta(sent, b)
            seen[cid] = sent
            pending.append((cid, b, p))
            total += p.size
        self._pending[inst.id] = pending
        return total

    def _packed_size(self, sent: tuple) -> int:
        return self._full(sent).size

    def _full(self, sent: tuple) -> Piggyback:
        """The full encoding of ``sent`` (every entry: the counts as varints, the booleans as
        bitsets), made once per tuple: every message sent before the variables change shares it."""
        hit = self._fulls.get(id(sent))
        if hit is not None and hit.sent is sent:
            return hit
        if len(self._fulls) > 4 * self.n + 64:
            self._fulls.clear()
        size = 1 + varint_bytes(sent[0]) + varint_bytes(sent[1]) + 2 * ((self.n + 7) // 8)
        p = Piggyback(True, sent[0], _ALL[self.n] if self.n in _ALL else _all(self.n), sent[1].astype(np.int64),
                      np.flatnonzero(sent[2]), np.flatnonzero(sent[3]), size, sent)
        self._fulls[id(sent)] = p
        return p

    def piggyback(self, inst: Any, ch: Any) -> tuple[Any, int]:
        self.vars[inst.id].sent_to[ch.dst] = True
        sent = self._sent_tuple(inst)
        cid = ch.id
        p = None
        pending = self._pending.get(inst.id)
        if pending:
            pcid, pbase, pp = pending.pop(0)
            if pcid == cid and pp.sent is sent and pbase is self._sent_base.get(cid):
                p = pp
            else:
                pending.clear()
        if p is None:
            p = self.encode(cid, sent)
        self._sent_base[cid] = sent
        return p, p.size

    def decode(self, msg: Any) -> tuple:
        p: Piggyback = msg.meta
        if p.full:
            hit = self._decoded.get(id(p))
            if hit is not None and hit[0] is p:
                out = hit[1]
                if self.delta:
                    self._recv_base[msg.ch] = out
                return out
            ref = self._zero
        else:
            ref = self._recv_base.get(msg.ch)
            if ref is None:
                raise RuntimeError(f"{self.name}: a delta on channel {msg.ch} without a base (a message was lost)")
        if p.empty:
            out = ref
        else:
            ckpt, taken, greater = ref[1].copy(), ref[2].copy(), ref[3].copy()
            ckpt[p.ck_idx] = p.ck_val
            taken[p.taken_idx] = ~taken[p.taken_idx]
            greater[p.greater_idx] = ~greater[p.greater_idx]
            out = (p.lc, ckpt, taken, greater)
        if self.verify:
            s = p.sent
            if not (out[0] == s[0] and np.array_equal(out[1], s[1]) and np.array_equal(out[2], s[2])
                    and np.array_equal(out[3], s[3])):
                raise AssertionError(f"{self.name}: channel {msg.ch} seq {msg.seq} decoded {out} but {s} was sent")
        if p.full:
            if len(self._decoded) > 4 * self.n + 64:
                self._decoded.clear()
            self._decoded[id(p)] = (p, out)
        if self.delta:
            self._recv_base[msg.ch] = out
        return out

    def replayed(self, ch: int, msg: Any) -> Any:
        from driftjoin.checkpointing.engine import Msg

        p = self.encode(ch, msg.meta.sent)
        self._sent_base[ch] = p.sent
        return Msg(msg.kind, msg.ch, msg.seq, msg.rec, msg.ts, msg.size, p, p.size)

    def after_recovery(self, line: dict[int, Any]) -> None:
        super().after_recovery(line)
        self._sent_base.clear()     # the messages in flight are gone: every channel restarts from full vectors
        self._recv_base.clear()
        self._pending.clear()


class CommunicationInducedDelta(CommunicationInducedPacked):
    """HMNR with only the changed entries on each message (``cic-delta``; see the parent)."""

    name = "cic-delta"
    delta = True
