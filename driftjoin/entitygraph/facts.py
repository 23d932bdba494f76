"""The persisted state of the entity core: immutable facts in runs, written per batch only for what changed.

The state is a set of **facts**, each written once and never changed:

* ``R(side, id, home, time, source)``: a record joined entity ``home`` (an internal number, ``eid``,
  never reused) at ``time``;
* ``E(eid, founder side, founder id, created)``: an entity was created;
* ``M(eid, survivor, time)``: entity ``eid`` was retired into ``survivor`` (itself maybe retired later);
* ``T(eid)``: entity ``eid`` has expired (a tombstone: see below).

A record's entity now is its ``home`` followed along the ``M`` facts to an entity that is not
retired. A batch writes one **run** (one chunk of the state layer) holding the facts it adds: its
new records, new entities and merges, each O(1), so a batch writes O(what changed) and the
records of a merged entity are never rewritten (their ``home`` is followed through the new ``M``).

Dead facts. When an entity expires, every fact of its tree (the entity and the entities retired
into it) is dead: its ``R`` facts, ``E`` facts and ``M`` facts. Rather than rewriting every run
holding one, the batch writes a ``T`` fact for each ``eid`` of the tree that still has facts. A
fact is dead when its ``eid`` has a ``T`` fact (an ``E`` fact also when its entity is retired: an
``M`` names it), and a ``T`` fact is dead once no fact of its ``eid`` remains. Each run counts its
dead facts, and per tombstoned ``eid`` how many of its facts it holds.

Compaction (decided from the runs' order and counts only, so a value rebuilt from the runs takes the
same decisions as the one a process kept in memory):

1. a run whose facts are at least half dead is rewritten: its live facts go into the batch's run
   and its dead ones are gone (each dead fact is dropped once, and a rewrite costs at most twice the
   dead facts it drops);
2. then, as long as the older of the last two runs has fewer than twice the facts of the newer and
   their live facts fit in ``run_cap``, they are merged (as :mod:`driftjoin.metric.store`'s runs
   are): O(log) small runs, each fact rewritten O(log(run_cap)) times, and runs of about
   ``run_cap`` facts are never merged again, so no batch rewrites the whole state.

So the state holds the live facts (one ``R`` per linked record, one ``E`` per entity created and not
expired, one ``M`` per merge of an entity still held) and dead facts that are at most the live ones
per run, in about ``live / run_cap + log(run_cap)`` runs.

Rebuild (:meth:`FactStore.restore`): from the runs alone, a fact is live or dead by the rules
above, so a rebuilt state holds the same records, entities, counts and run accounting as the state
kept in memory (tested by rebuilding after every batch and comparing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: The payload layout's version (stored in the plan: another layout is refused on restart).
STATE_FORMAT = 1


@dataclass
class Run:
    """One run: the facts it holds (by reference into the graph's tables) and its counts.

    The lists may hold references to facts that have since moved or died; :meth:`FactStore.live`
    filters them by where each fact is now."""

    rid: int
    label: int | None = None
    recs: list[int] = field(default_factory=list)
    ents: list[int] = field(default_factory=list)
    merges: list[int] = field(default_factory=list)
    tombs: list[int] = field(default_factory=list)
    total: int = 0
    dead: int = 0
    dead_of: dict[int, int] = field(default_factory=dict)


@dataclass
class Merge:
    """What the state keeps of a retired entity: its ``M`` fact and where its facts are."""

    survivor: int
    time: float
    erun: int
    mrun: int


@dataclass
class Restored:
    """The live state found in a list of runs (arrays aligned per record, per entity, per merge)."""

    kind: np.dtype | None
    rec_side: np.ndarray
    rec_id: np.ndarray
    rec_home: np.ndarray
    rec_time: np.ndarray
    rec_src: np.ndarray
    rec_run: np.ndarray
    rec_root: np.ndarray
    ent_eid: np.ndarray
    ent_created: np.ndarray
    ent_fside: np.ndarray
    ent_fid: np.ndarray
    ent_run: np.ndarray
    merged_eid: np.ndarray
    merged_root: np.ndarray
    merged_time: np.ndarray


def _concat(parts: list[np.ndarray], dtype: Any) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


class FactStore:
    """The runs of one :class:`~driftjoin.entitygraph.graph.EntityGraph` (module docstring): ``graph``
    is the graph whose record and entity tables the runs refer to."""

    def __init__(self, graph: Any, run_cap: int) -> None:
        self.g = graph
        self.cap = int(run_cap)
        self.runs: dict[int, Run] = {}
        self.next_rid = 0
        self.pending: int | None = None
        self.retired: dict[int, Merge] = {}
        self.pinned: dict[int, int] = {}
        self.tomb_run: dict[int, int] = {}
        #: labels of written runs that were merged or rewritten (to remove from the store)
        self.dropped: list[int] = []

    # ------------------------------------------------------------------ recording a batch

    def _new_run(self) -> Run:
        run = Run(self.next_rid)
        self.next_rid += 1
        self.runs[run.rid] = run
        return run

    def open_run(self) -> None:
        self.pending = self._new_run().rid

    def add_entities(self, slots: np.ndarray) -> None:
        run = self.runs[self.pending]
        self.g.ent["erun"][slots] = run.rid
        run.ents.extend(self.g.ent["eid"][slots].tolist())
        run.total += len(slots)

    def add_records(self, slots: np.ndarray) -> None:
        run = self.runs[self.pending]
        self.g.rec["run"][slots] = run.rid
        run.recs.extend(slots.tolist())
        run.total += len(slots)

    def merge(self, slot: int, survivor: int, time: float) -> None:
        """Entity ``slot`` is retired into ``survivor``: its ``E`` fact dies, an ``M`` fact is added."""
        ent = self.g.ent
        eid, erun = int(ent["eid"][slot]), int(ent["erun"][slot])
        run = self.runs[erun]
        if run.label is None:  # not written yet: the fact is simply not written
            run.total -= 1
            erun = -1
        else:
            run.dead += 1
        pending = self.runs[self.pending]
        pending.merges.append(eid)
        pending.total += 1
        self.retired[eid] = Merge(int(ent["eid"][survivor]), time, erun, pending.rid)

    def _kill(self, rid: int, eid: int) -> None:
        run = self.runs[rid]
        if run.label is None:
            run.total -= 1
        else:
            run.dead += 1
            run.dead_of[eid] = run.dead_of.get(eid, 0) + 1
            self.pinned[eid] = self.pinned.get(eid, 0) + 1

    def expire(self, slot: int, members: list[int], tree: list[int]) -> None:
        """Entity ``slot`` (with ``members`` and the retired ``tree``) leaves the state."""
        g = self.g
        eid = int(g.ent["eid"][slot])
        runs, homes = g.rec["run"][members].tolist(), g.rec["home"][members].tolist()
        for rid, home in zip(runs, homes):
            self._kill(rid, home)
        self._kill(int(g.ent["erun"][slot]), eid)
        for y in tree:
            info = self.retired.pop(y)
            if info.erun >= 0:  # its E fact is dead already (retired), now also of a tombstoned eid
                run = self.runs[info.erun]
                run.dead_of[y] = run.dead_of.get(y, 0) + 1
                self.pinned[y] = self.pinned.get(y, 0) + 1
            self._kill(info.mrun, y)
        pending = self.runs[self.pending]
        for y in [eid, *tree]:
            if self.pinned.get(y, 0) > 0:
                self.tomb_run[y] = pending.rid
                pending.tombs.append(y)
                pending.total += 1

    # ------------------------------------------------------------------ compaction

    def live(self, run: Run) -> tuple[list[int], list[int], list[int], list[int]]:
        """The facts ``run`` holds now: record slots, entity eids (``E``), retired eids (``M``), tombstones."""
        g = self.g
        rid = run.rid
        recs = []
        if run.recs:
            slots = np.unique(np.asarray(run.recs, np.int64))
            recs = slots[g.rec["run"][slots] == rid].tolist()
        ents = [e for e in dict.fromkeys(run.ents) if e in g.eid_slot and g.ent["erun"][g.eid_slot[e]] == rid]
        merges = [y for y in dict.fromkeys(run.merges) if y in self.retired and self.retired[y].mrun == rid]
        tombs = [y for y in dict.fromkeys(run.tombs) if self.tomb_run.get(y) == rid and y in self.pinned]
        return recs, ents, merges, tombs

    def _move(self, a: Run, b: Run) -> None:
        """Rewrite run ``a``: its live facts go into ``b`` (not written yet), its dead ones are dropped."""
        g = self.g
        for y, c in a.dead_of.items():
            left = self.pinned[y] - c
            if left:
                self.pinned[y] = left
                continue
            del self.pinned[y]
            r = self.tomb_run[y]
            if r != a.rid:
                holder = self.runs[r]
                if holder.label is None:
                    holder.total -= 1
                    del self.tomb_run[y]
                else:
                    holder.dead += 1
        recs, ents, merges, tombs = self.live(a)
        for e in dict.fromkeys(a.ents):
            info = self.retired.get(e)
            if info is not None and info.erun == a.rid:
                info.erun = -1
        for y in dict.fromkeys(a.tombs):
            if self.tomb_run.get(y) == a.rid and y not in self.pinned:
                del self.tomb_run[y]
        if recs:
            g.rec["run"][recs] = b.rid
        for e in ents:
            g.ent["erun"][g.eid_slot[e]] = b.rid
        for y in merges:
            self.retired[y].mrun = b.rid
        for y in tombs:
            self.tomb_run[y] = b.rid
        b.recs.extend(recs)
        b.ents.extend(ents)
        b.merges.extend(merges)
        b.tombs.extend(tombs)
        b.total += len(recs) + len(ents) + len(merges) + len(tombs)
        del self.runs[a.rid]
        if a.label is not None:
            self.dropped.append(a.label)

    def settle(self) -> None:
        """Close the batch: rewrite runs at least half dead, merge the last runs (module docstring)."""
        pending = self.runs[self.pending]
        for run in list(self.runs.values()):
            if run.label is not None and run.total and 2 * run.dead >= run.total:
                self._move(run, pending)
        while len(self.runs) >= 2:
            *_, ra, rb = self.runs
            a, b = self.runs[ra], self.runs[rb]
            if b.label is None and b.total == 0:
                del self.runs[rb]
                continue
            if a.total < 2 * b.total and (a.total - a.dead) + (b.total - b.dead) <= self.cap:
                if b.label is None:
                    self._move(a, b)
                else:
                    c = self._new_run()
                    self._move(a, c)
                    self._move(b, c)
                continue
            break
        for rid in [r for r, run in self.runs.items() if run.label is None and run.total == 0]:
            del self.runs[rid]
        self.pending = None

    # ------------------------------------------------------------------ writing and reading

    def unwritten(self) -> list[tuple[int, dict[str, Any]]]:
        """``(run id, payload)`` of every run not written yet, in order."""
        return [(rid, self.payload(run)) for rid, run in self.runs.items() if run.label is None]

    def written(self, rid: int, label: int) -> None:
        """Run ``rid`` was written under ``label`` (e.g. the chunk id)."""
        self.runs[rid].label = label

    def take_dropped(self) -> list[int]:
        out, self.dropped = self.dropped, []
        return out

    def payload(self, run: Run) -> dict[str, Any]:
        """The facts of a run as arrays (what is written)."""
        g = self.g
        recs, ents, merges, tombs = self.live(run)
        if len(recs) + len(ents) + len(merges) + len(tombs) != run.total:
            raise AssertionError(f"entity run {run.rid}: {run.total} facts counted, "
                                 f"{len(recs) + len(ents) + len(merges) + len(tombs)} found")
        kind = g.id_kind or np.dtype(np.int64)
        rec, ent = g.rec, g.ent
        eslots = np.asarray([g.eid_slot[e] for e in ents], np.int64)
        src = rec["src"][recs] if recs else np.zeros(0, object)
        return {
            "r_side": rec["side"][recs] if recs else np.zeros(0, np.int8),
            "r_id": rec["id"][recs] if recs else np.zeros(0, kind),
            "r_home": rec["home"][recs] if recs else np.zeros(0, np.int64),
            "r_time": rec["time"][recs] if recs else np.zeros(0),
            "r_src": None if all(x is None for x in src.tolist()) else src,
            "e_eid": ent["eid"][eslots] if ents else np.zeros(0, np.int64),
            "e_created": ent["created"][eslots] if ents else np.zeros(0, np.int64),
            "e_fside": ent["fside"][eslots] if ents else np.zeros(0, np.int8),
            "e_fid": ent["fid"][eslots] if ents else np.zeros(0, kind),
            "m_eid": np.asarray(merges, np.int64),
            "m_survivor": np.asarray([self.retired[y].survivor for y in merges], np.int64),
            "m_time": np.asarray([self.retired[y].time for y in merges], np.float64),
            "t_eid": np.asarray(tombs, np.int64),
        }

    def restore(self, runs: list[tuple[int, dict[str, Any]]]) -> Restored:
        """Rebuild the runs' accounting from their payloads and return the live state (module docstring)."""
        self.runs, self.retired, self.pinned, self.tomb_run = {}, {}, {}, {}
        self.next_rid = len(runs)
        kind = None
        for _, p in runs:
            for col in ("r_id", "e_fid"):
                if len(p[col]):
                    kind = p[col].dtype
        tombs: dict[int, int] = {}
        for rid, (_, p) in enumerate(runs):
            for y in p["t_eid"].tolist():
                tombs[y] = rid
        retired_all: dict[int, tuple[int, float, int]] = {}
        e_run: dict[int, int] = {}
        for rid, (_, p) in enumerate(runs):
            for y, s, t in zip(p["m_eid"].tolist(), p["m_survivor"].tolist(), p["m_time"].tolist()):
                retired_all[y] = (s, t, rid)
            for e in p["e_eid"].tolist():
                e_run[e] = rid
        tomb_ids = np.fromiter(tombs, np.int64, len(tombs))
        retired_ids = np.fromiter(retired_all, np.int64, len(retired_all))
        ent_parts: dict[str, list] = {k: [] for k in ("eid", "created", "fside", "fid", "run")}
        rec_parts: dict[str, list] = {k: [] for k in ("side", "id", "home", "time", "src", "run")}
        for rid, (label, p) in enumerate(runs):
            run = Run(rid, label)
            self.runs[rid] = run
            run.total = sum(len(p[c]) for c in ("r_id", "e_eid", "m_eid", "t_eid"))

            def dead_of(eids: np.ndarray, run: Run = run) -> np.ndarray:
                """Which of ``eids`` are tombstoned; counts them for the run and the tombstones."""
                gone = np.isin(eids, tomb_ids) if len(tomb_ids) and len(eids) else np.zeros(len(eids), dtype=bool)
                if gone.any():
                    for y, c in zip(*np.unique(eids[gone], return_counts=True)):
                        y, c = int(y), int(c)
                        run.dead_of[y] = run.dead_of.get(y, 0) + c
                        self.pinned[y] = self.pinned.get(y, 0) + c
                return gone

            r_dead = dead_of(p["r_home"])
            keep = np.nonzero(~r_dead)[0]
            n_src = len(r_dead)
            rec_parts["side"].append(p["r_side"][keep])
            rec_parts["id"].append(p["r_id"][keep])
            rec_parts["home"].append(p["r_home"][keep])
            rec_parts["time"].append(p["r_time"][keep])
            src = p["r_src"] if p["r_src"] is not None else np.full(n_src, None, dtype=object)
            rec_parts["src"].append(src[keep])
            rec_parts["run"].append(np.full(len(keep), rid, np.int64))
            e_gone = dead_of(p["e_eid"]) | (np.isin(p["e_eid"], retired_ids) if len(retired_ids) else False)
            run.dead += int(np.sum(e_gone))
            run.ents.extend(p["e_eid"].tolist())
            sel = np.nonzero(~e_gone)[0]
            ent_parts["eid"].append(p["e_eid"][sel])
            ent_parts["created"].append(p["e_created"][sel])
            ent_parts["fside"].append(p["e_fside"][sel])
            ent_parts["fid"].append(p["e_fid"][sel])
            ent_parts["run"].append(np.full(len(sel), rid, np.int64))
            m_eids = p["m_eid"].tolist()
            for y, gone in zip(m_eids, dead_of(p["m_eid"]).tolist()):
                run.merges.append(y)
                if gone:
                    run.dead += 1
                else:
                    s, t, _ = retired_all[y]
                    erun = e_run.get(y, -1)
                    self.retired[y] = Merge(s, t, erun, rid)
            run.dead += int(r_dead.sum())
            run.tombs.extend(p["t_eid"].tolist())
        for y, rid in tombs.items():
            self.tomb_run[y] = rid
            if y not in self.pinned:
                self.runs[rid].dead += 1
        kind_or = kind if kind is not None else np.dtype(np.int64)
        rec_id = _concat(rec_parts["id"], kind_or)
        rec_home = _concat(rec_parts["home"], np.int64)
        ent_eid = _concat(ent_parts["eid"], np.int64)
        merged_eid = np.fromiter(self.retired, np.int64, len(self.retired))
        survivor = np.asarray([self.retired[y].survivor for y in merged_eid.tolist()], np.int64)
        order = np.argsort(merged_eid)
        merged_sorted, survivor_sorted = merged_eid[order], survivor[order]

        def roots(eids: np.ndarray) -> np.ndarray:
            """Each eid followed along the merges to an entity that is not retired."""
            out = eids.copy()
            active = np.arange(len(out))
            while len(merged_sorted) and len(active):
                at = np.minimum(np.searchsorted(merged_sorted, out[active]), len(merged_sorted) - 1)
                hit = merged_sorted[at] == out[active]
                active, at = active[hit], at[hit]
                out[active] = survivor_sorted[at]
            return out

        return Restored(
            kind=kind,
            rec_side=_concat(rec_parts["side"], np.int8), rec_id=rec_id, rec_home=rec_home,
            rec_time=_concat(rec_parts["time"], np.float64), rec_src=_concat(rec_parts["src"], object),
            rec_run=_concat(rec_parts["run"], np.int64), rec_root=roots(rec_home),
            ent_eid=ent_eid, ent_created=_concat(ent_parts["created"], np.int64),
            ent_fside=_concat(ent_parts["fside"], np.int8), ent_fid=_concat(ent_parts["fid"], kind_or),
            ent_run=_concat(ent_parts["run"], np.int64),
            merged_eid=merged_eid, merged_root=roots(merged_eid),
            merged_time=np.asarray([self.retired[y].time for y in merged_eid.tolist()], np.float64),
        )

    def attach(self, rec_slots: np.ndarray) -> None:
        """After a restore: the runs' record lists, from the slots the graph gave the live records."""
        runs = self.g.rec["run"][rec_slots]
        order = np.argsort(runs, kind="stable")
        sorted_runs = runs[order]
        bounds = np.flatnonzero(np.r_[True, sorted_runs[1:] != sorted_runs[:-1], True]).tolist()
        slots = rec_slots[order].tolist()
        for a, b, rid in zip(bounds[:-1], bounds[1:], sorted_runs[bounds[:-1]].tolist()):
            self.runs[rid].recs.extend(slots[a:b])

    # ------------------------------------------------------------------ statistics

    def summary(self) -> dict[str, int]:
        """Runs, facts held and dead facts held (the state's size)."""
        return {"runs": len(self.runs), "facts": sum(r.total for r in self.runs.values()),
                "dead_facts": sum(r.dead for r in self.runs.values())}

    def describe(self) -> dict[str, Any]:
        """Every run's counts and fact sets in order, with the tombstone bookkeeping (for tests:
        a rebuilt state must describe itself exactly as the state kept in memory)."""
        g = self.g
        out = []
        for run in self.runs.values():
            recs, ents, merges, tombs = self.live(run)
            out.append({
                "label": run.label, "total": run.total, "dead": run.dead,
                "dead_of": {k: v for k, v in sorted(run.dead_of.items()) if v},
                "recs": sorted(zip(g.rec["side"][recs].tolist(), g.rec["id"][recs].tolist(),
                                   g.rec["home"][recs].tolist())),
                "ents": sorted(ents), "merges": sorted(merges), "tombs": sorted(tombs),
            })
        return {"runs": out, "pinned": dict(sorted(self.pinned.items())), "tomb_run_count": len(self.tomb_run),
                "retired": {y: (m.survivor, m.time, m.erun >= 0) for y, m in sorted(self.retired.items())}}
