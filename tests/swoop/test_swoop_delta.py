"""Logged changes (driftjoin.swoop.delta): a join rebuilt by applying the deltas of the batches
another join ran equals that join after every batch (window, inverted lists, stock, top-k,
visitors, token numbers, index time, counters), from the start or from a snapshot taken at any
batch, and gives the same outputs for any following inserts; over random data, k, window,
similarity, self-joins and two-stream joins, single joins and owner workers, both engines, with
late, duplicate and invalid sets, advances, a shared bound, and random batch cuts."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop import InvalidSetError, Swoop
from driftjoin.swoop import _kernels as K
from driftjoin.swoop.bound import Staircase
from driftjoin.swoop.partitioned import WORKERS, OwnerWorker, TokenPartWorker, owner_of
from driftjoin.swoop.similarity import SIMILARITIES


def logical_state(join: Swoop) -> dict:
    """Everything that decides the join's future outputs, independent of physical layout."""
    state = {
        "t_J": join.index_time, "next_seq": join._next_seq, "tokens": list(join.tokens._ids.items()),
        "records": {seq: (r.set_id, r.side, r.ts, r.end, r.size, tuple(np.asarray(sorted(r.tokens)).tolist()))
                    for seq, r in join._records.items()},
        "live": dict(join._live_ids), "visitors": [r.seq for r in join._visitors],
        "window": [r.seq for r in join._W], "next_number": join._W.next_number(),
        "stock": list(join.stock), "end_index": join.stock.end_index(), "topk": join.topk(),
        "counters": join._counters()[:2],
    }
    core = join._core
    if core is not None:
        meta, itok = core.meta, core.itok
        lists = {}
        for side in (0, 1):
            for t in range(itok.shape[1]):
                head, tail = itok[side, t, K.F_HEAD], itok[side, t, K.F_TAIL]
                if tail > head:
                    lists[(side, t)] = core.pools[side][:, head:tail].tolist()  # seqs, ends, sizes and ranks
        base, head, npos = int(meta[K.M_BASE]), int(meta[K.M_HEAD]), int(meta[K.M_NPOS])
        rows = []
        for p in range(head, npos):
            size2, toff = int(core.wi[p, K.W_SIZE2]), int(core.wi[p, K.W_TOFF])
            rows.append((base + p, size2, float(core.wf[p, K.W_END]), core.wtok[toff:toff + (size2 >> 1)].tolist()))
        state.update(lists=lists, rows=rows, bound=core.bound[:2, :int(meta[K.M_NB])].tolist(),
                     marks_ok=bool(core.tmark.max(initial=0) <= meta[K.M_STAMP]
                                   and (npos == head or core.wi[head:npos, K.W_MARK].max() <= meta[K.M_STAMP])))
    else:
        state["lists"] = {(side, t): plist.seqs[plist.head:] for side, index in join._indexes.items()
                          for t, plist in index._lists.items()}
    return state


@st.composite
def scenarios(draw):
    k = draw(st.sampled_from([1, 2, 3, 5]))
    similarity = draw(st.sampled_from(sorted(SIMILARITIES)))
    window = draw(st.sampled_from([1, 2, 3, 5, 8]))
    two_stream = draw(st.booleans())
    p = draw(st.sampled_from([1, 1, 2, 3]))  # 1: a single join, else a worker of p
    design = draw(st.sampled_from(["owner", "probe"]))
    vocab = draw(st.integers(3, 12))
    ops, ts = [], 0
    for _ in range(draw(st.integers(1, 60))):
        ts += draw(st.sampled_from([0, 0, 0, 1, 1, 2, 4]))
        kind = draw(st.integers(0, 14))
        if kind == 0:
            ops.append(("advance", ts))
            continue
        tokens = [f"w{t}" for t in draw(st.lists(st.integers(0, vocab - 1), min_size=0 if kind == 1 else 1,
                                                 max_size=7))]
        side = draw(st.sampled_from(["R", "S"])) if two_stream else None
        late = ts - 3 if kind == 2 else ts  # refused unless the index time allows it
        ops.append(("insert", draw(st.integers(0, 15)), tokens, late, side))  # small ids: duplicates
    cuts = sorted(draw(st.sets(st.integers(0, len(ops)), max_size=6)))
    follow = draw(st.integers(0, len(ops)))  # the ops from here run on both joins, without deltas
    snapshot = draw(st.integers(-1, 6))  # the batch after which the rebuilt join restarts from a copy
    bound = draw(st.booleans())
    return k, similarity, window, two_stream, (p, design), ops, cuts, follow, snapshot, bound


def _run(join: Swoop, op: tuple, p: int, w: int) -> object:
    if op[0] == "advance":
        return ("advance", join.advance(op[1]))
    _, set_id, tokens, ts, side = op
    try:
        if p == 1:
            return join.insert(set_id, tokens, ts, side)
        return join.insert_routed(set_id, tokens, ts, side, owner_of(set_id, side, p))
    except InvalidSetError as exc:
        return type(exc).__name__


@pytest.mark.parametrize("engine", ["compiled", "python"])
@settings(max_examples=150, deadline=None)
@given(scenario=scenarios())
def test_applied_deltas_rebuild_the_join(engine, scenario):
    k, similarity, window, two_stream, (p, design), ops, cuts, follow, snapshot, bound = scenario
    if p == 1:
        ran = Swoop(k, similarity, window, two_stream=two_stream, engine=engine)
        w = 0
    else:
        w = len(ops) % p
        ran = WORKERS[design](k, similarity, window, w, p, two_stream=two_stream, engine=engine)
    rebuilt = pickle.loads(pickle.dumps(ran))
    logged, following = ops[:follow], ops[follow:]
    bounds = [0, *[c for c in cuts if c < len(logged)], len(logged)]
    for b, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
        if p > 1 and bound and b % 2:  # a shared bound adopted between batches, as the Spark worker does
            staircase = Staircase(np.array([ran.index_time or 0.0, (ran.index_time or 0.0) + window]),
                                  np.array([0.9, 0.4]))
            ran.set_bound(staircase)
            rebuilt.set_bound(staircase)
        ran.start_delta()
        for op in logged[lo:hi]:
            _run(ran, op, p, w)
        change = pickle.loads(pickle.dumps(ran.take_delta()))
        rebuilt.apply_delta(change)
        assert logical_state(rebuilt) == logical_state(ran)
        if b == snapshot:  # a restart from a snapshot written at this batch
            rebuilt = pickle.loads(pickle.dumps(ran))
    for op in following:
        assert _run(rebuilt, op, p, w) == _run(ran, op, p, w)
    state, expected = logical_state(rebuilt), logical_state(ran)
    if engine == "python":  # its pruning uses a cached bound whose age a rebuild resets (exact either way)
        state.pop("counters"), expected.pop("counters")
    assert state == expected


@pytest.mark.parametrize("engine", ["compiled", "python"])
@pytest.mark.parametrize("worker", [None, 1])
def test_deltas_compose_for_a_stale_copy(engine, worker):
    """A copy several batches behind catches up by applying the missed deltas in order, through
    window compactions and index growth (thousands of sets, most of them expired)."""
    if worker is None:
        ran = Swoop(3, "jaccard", 3.0, engine=engine)
    else:
        ran = OwnerWorker(3, "jaccard", 3.0, worker, 2, engine=engine)
    stale = pickle.loads(pickle.dumps(ran))
    missed = []
    rng = np.random.default_rng(3)
    for batch in range(6):
        ran.start_delta()
        for n in range(batch * 600, batch * 600 + 600):
            tokens = [f"t{x}" for x in rng.zipf(1.3, 8) % 400]
            if worker is None:
                ran.insert(n, tokens, n / 250)
            else:
                ran.insert_routed(n, tokens, n / 250, None, owner_of(n, None, 2))
        missed.append(ran.take_delta())
    for change in missed:
        stale.apply_delta(change)
    assert logical_state(stale) == logical_state(ran)
    assert len(ran.stock) > 0 and ran.window_size > 100
    follow = [("insert", 10**6 + n, [f"t{x}" for x in rng.zipf(1.3, 8) % 400], 15.0 + n / 250, None)
              for n in range(300)]
    p, w = (1, 0) if worker is None else (2, worker)
    assert [_run(stale, op, p, w) for op in follow] == [_run(ran, op, p, w) for op in follow]


def test_misuse_is_refused():
    join = Swoop(2, "jaccard", 5.0)
    with pytest.raises(RuntimeError, match="start_delta"):
        join.take_delta()
    join.start_delta()
    with pytest.raises(RuntimeError, match="being recorded"):
        join.apply_delta(None)  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match="owner"):
        TokenPartWorker(2, "jaccard", 5.0, 0, 2).start_delta()
