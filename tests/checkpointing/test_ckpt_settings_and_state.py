"""Bad settings fail before the run with what to change; snapshots are real, independent copies."""

from __future__ import annotations

import pytest

from driftjoin.checkpointing import RunConfig, run
from driftjoin.checkpointing.generators import nexmark, reachability
from driftjoin.checkpointing.operators import (
    IncrementalJoin, ReachJoin, S3JCompute, S3JFormulate, Sink, WindowedCount, WindowedJoin,
)


@pytest.mark.parametrize("settings, says", [
    (dict(protocol="chandy"), "unknown protocol 'chandy': choose one of coor, unc, cic"),
    (dict(query="q5"), "unknown query 'q5'"),
    (dict(interval=0), "interval must be > 0 seconds"),
    (dict(interval=-1.0), "interval must be > 0 seconds"),
    (dict(workers=0), "workers must be an integer in 1..64"),
    (dict(rate=0), "rate must be > 0"),
    (dict(failures=5, duration=2.0, interval=0.5), "5 failures do not fit in a 2 s run with a checkpoint every 0.5 s (at most 3"),
    (dict(failures=[1.0, 1.2], interval=0.5), "at least one checkpoint interval (0.5 s) apart"),
    (dict(failures=[9.0], duration=4.0), "failure times must lie inside the input (0, 4) s"),
    (dict(query="reach", protocol="coor"), "use protocol 'unc' or 'cic'"),
    (dict(query="q1", hot=0.2), "query q1 has no keyed operator that hot items would skew: use hot=0"),
    (dict(query="q3", hot=1.5), "hot (the share of hot-item events) must be in [0, 1)"),
    (dict(protocol="unc", clocks="global"), "clocks='global': choose 'worker'"),
    (dict(protocol="unc", clock_skew=2.0, interval=1.0), "clock_skew=2.0 must be in [0, interval=1]"),
])
def test_bad_settings_fail_before_the_run(settings: dict, says: str) -> None:
    with pytest.raises(ValueError) as err:
        run(RunConfig(**settings))
    assert says in str(err.value)


def _replay(op, recs, ch_of):
    return [out for k, r in enumerate(recs) for out in op.process(ch_of(r), k % op.n_inputs, r, 40)]


def _records(kind: str):
    if kind == "reach":
        return [r for part in reachability(400, 1.0, 1, 3, nodes=60) for _, r in part]
    return [r for part in nexmark(kind, 400, 2.5, 1, 3) for _, r in part]


@pytest.mark.parametrize("make, kind, port", [
    (lambda: IncrementalJoin(2, lambda p: p[1], lambda a: a[2], lambda p, a: (p[1], a[1])), "PA", lambda r: r[0] == "A"),
    (lambda: WindowedJoin(2, 1.0, lambda p: p[1], lambda a: a[2], lambda p, a, w: (p[1], a[1], w), lambda r: r[-1]),
     "PA", lambda r: r[0] == "A"),
    (lambda: WindowedCount(2, 1.0, lambda b: b[2], lambda b: b[4]), "B", lambda r: 0),
    (lambda: ReachJoin(2), "reach", lambda r: 0),
])
def test_restoring_a_snapshot_replays_to_the_same_outputs_and_state(make, kind, port) -> None:
    recs = _records(kind)
    half = len(recs) // 2
    op = make()
    _replay(op, recs[:half], port)
    snap = op.snapshot()
    first = _replay(op, recs[half:], port)
    size = op.state_bytes
    op.restore(snap)  # the snapshot must not have changed while the operator went on
    assert _replay(op, recs[half:], port) == first
    assert op.state_bytes == size
    assert size > 0


def test_sink_restore_truncates_to_the_snapshot() -> None:
    sink = Sink(1)
    for k in range(5):
        sink.process(0, 0, ("x", k), 10)
    snap = sink.snapshot()
    sink.process(0, 0, ("x", 5), 10)
    sink.restore(snap)
    assert sink.log == [("x", k) for k in range(5)]


def test_s3j_operators_restore_their_worksets() -> None:
    import numpy as np

    form, comp = S3JFormulate(1, "euclidean", 0.2, 2), S3JCompute(1, "euclidean", 0.2)
    rng = np.random.default_rng(1)
    recs = [("M", 0, False, i, i % 2, tuple(v), 0.01 * i, 0) for i, v in enumerate(rng.uniform(-1, 1, (80, 2)).tolist())]

    def go(rs):
        return [p for r in rs for m in form.process(0, 0, r, 40) for p in comp.process(0, 0, m, 40)]

    go(recs[:40])
    snaps = form.snapshot(), comp.snapshot()
    first = go(recs[40:])
    form.restore(snaps[0])
    comp.restore(snaps[1])
    assert go(recs[40:]) == first and first


def test_mst_search_probes_to_saturation() -> None:
    """The MST is a rate that was run and kept up, with a rate that was run and did not just
    above it (probed, not extrapolated from a lightly loaded run)."""
    from dataclasses import replace

    from driftjoin.checkpointing import CostModel
    from driftjoin.checkpointing.mst import search, sustainable

    cfg = RunConfig(query="q12", protocol="coor", workers=1, duration=0.3, interval=0.1, costs=CostModel().scaled(20))
    m = search(cfg, rate=1000.0, probes=10, tolerance=0.05)
    assert m.saturated and m.mst < m.upper and m.upper - m.mst <= 0.05 * m.upper
    assert (m.mst, True) in [(r, ok) for r, ok, _ in m.probes] and (m.upper, False) in [(r, ok) for r, ok, _ in m.probes]
    assert sustainable(run(replace(cfg, rate=m.mst)))
    assert not sustainable(run(replace(cfg, rate=m.upper)))
    assert search(cfg, rate=1000.0, probes=0).probes == []          # the estimate alone, kept by name
