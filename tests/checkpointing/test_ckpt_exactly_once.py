"""Every protocol recovers every query exactly once, to a consistent recovery line.

For random failure points (hypothesis), the canonical output of a run with failures equals the
failure-free run's (exactly-once), and every recovery line is checked against the engine's
message trace (:mod:`ckpt_trace_oracle`), not the protocol's own bookkeeping: no orphan
messages; the logged messages re-sent are exactly the in-flight ones; for UNC and CIC the line
is the maximum consistent line among the durable checkpoints; for COOR nothing is in flight
(aligned). CIC with packed or delta-encoded piggybacks decodes, at every delivery, exactly the
vectors its sender encoded (checked against the sender's copy) and takes the thesis's CIC's
checkpoints. Two deliberately broken protocols must fail these checks.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ckpt_trace_oracle as oracle
from driftjoin.checkpointing import CostModel, RunConfig, run
from driftjoin.checkpointing.protocols import CommunicationInducedPacked, Coordinated, Uncoordinated

DURATION = 2.0
#: input rates (records/s) that keep each example well under a second
RATE = {"q1": 700.0, "q3": 900.0, "q8": 700.0, "q12": 700.0, "reach": 350.0, "s3j": 60.0}
#: S3J with a threshold that gives pairs at that rate
PARAMS = {"s3j": {"threshold": 0.15}}
#: how much slower a busy machine is (S3J's per-record cost is already ~2 ms)
SLOWER = {"s3j": 3}
INTERVALS = (0.15, 0.25, 0.4)


@pytest.fixture(autouse=True)
def verify_piggybacks(monkeypatch):
    """Every decoded CIC piggyback is compared with what its sender encoded."""
    monkeypatch.setattr(CommunicationInducedPacked, "verify", True)


@lru_cache(maxsize=None)
def reference(query: str, workers: int, seed: int) -> Any:
    r = run(RunConfig(query=query, protocol="none", workers=workers, rate=RATE[query], duration=DURATION, seed=seed,
                      params=PARAMS.get(query, {})))
    assert r.drained and r.outputs > 0
    return r.result


def failure_times(draw: Any, interval: float) -> list[float]:
    k = draw(st.integers(1, 2))
    first = draw(st.floats(0.05, DURATION - interval * k - 0.05))
    gaps = [draw(st.floats(interval, interval * 2)) for _ in range(k - 1)]
    times = [first]
    for g in gaps:
        times.append(times[-1] + g)
    return [t for t in times if t < DURATION - 0.01]


@st.composite
def scenarios(draw: Any, queries: tuple[str, ...]) -> RunConfig:
    query = draw(st.sampled_from(queries))
    protocols = ("unc", "cic", "cic-delta") if query == "reach" else ("coor", "unc", "cic", "cic-delta", "cic-packed")
    interval = draw(st.sampled_from(INTERVALS))
    # on a slower machine the workers are busy: queues, blocked channels, logs to replay
    costs = CostModel().scaled(draw(st.sampled_from((1, SLOWER.get(query, 100)))))
    # UNC and CIC: a worker's instances on one clock, the workers' clocks in step, half an interval
    # or a whole one apart (the default), or every instance on its own clock (the most checkpoints
    # taken across traffic)
    clocks, skew = draw(st.sampled_from((("worker", 0.0), ("worker", 0.5), ("worker", None), ("instance", 0.0))))
    return RunConfig(query=query, protocol=draw(st.sampled_from(protocols)), workers=draw(st.integers(1, 3)),
                     interval=interval, rate=RATE[query], duration=DURATION, seed=draw(st.integers(0, 2)),
                     failures=failure_times(draw, interval), trace=True, params=PARAMS.get(query, {}), costs=costs,
                     clocks=clocks, clock_skew=None if skew is None else skew * interval)


def check_lines(cfg: RunConfig, traces: list) -> None:
    assert len(traces) == len(cfg.failures)
    for tr in traces:
        assert oracle.orphans(tr) == []
        assert tr.replayed == {ch: s for ch, s in oracle.in_flight(tr).items()}
        if cfg.protocol == "coor":
            assert tr.replayed == {}
        else:
            assert tr.line == oracle.max_consistent_line(tr)


def check(cfg: RunConfig) -> None:
    r = run(cfg)
    assert r.drained, "the run did not finish"
    assert r.result == reference(cfg.query, cfg.workers, cfg.seed)
    check_lines(cfg, r.traces)


EXAMPLES = settings(max_examples=14, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(scenarios(("q1", "q3", "q8", "q12")))
def test_nexmark_recovers_exactly_once(cfg: RunConfig) -> None:
    check(cfg)


@EXAMPLES
@given(scenarios(("reach",)))
def test_cyclic_query_recovers_exactly_once(cfg: RunConfig) -> None:
    check(cfg)


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(("s3j",)))
def test_similarity_join_recovers_exactly_once(cfg: RunConfig) -> None:
    check(cfg)


@pytest.mark.parametrize("protocol", ["coor", "unc", "cic", "cic-delta"])
def test_failure_in_every_protocol_rolls_back_and_replays(protocol: str) -> None:
    cfg = RunConfig(query="q3", protocol=protocol, workers=3, interval=0.25, rate=RATE["q3"], duration=DURATION,
                    failures=[0.9, 1.5], trace=True, clocks="instance")   # clocks apart: messages in flight at the line
    r = run(cfg)
    assert r.result == reference("q3", 3, 0)
    check_lines(cfg, r.traces)
    assert all(f.replayed_records > 0 and f.restart_s > 0 for f in r.failures)
    if protocol != "coor":
        assert any(f.replayed_messages > 0 for f in r.failures)


@pytest.mark.parametrize("protocol", ["cic", "cic-delta"])
def test_cic_leaves_no_invalid_checkpoint_on_the_cyclic_query(protocol: str) -> None:
    """HMNR forces checkpoints so that none is useless (no Z-cycle), even with the cycle."""
    for seed in range(3):
        r = run(RunConfig(query="reach", protocol=protocol, workers=3, interval=0.15, rate=RATE["reach"],
                          duration=DURATION, seed=seed, clocks="instance"))
        assert r.forced > 0 and r.judged > 0
        assert r.invalid == 0


@pytest.mark.parametrize("query", ["q3", "reach"])
def test_packed_and_delta_piggybacks_take_the_thesis_cics_checkpoints_with_fewer_bytes(query: str) -> None:
    """With bytes free of cost (so no timing differs), the three encodings of HMNR's piggyback
    force the same checkpoints, roll back to the same lines and give the same output; the
    packed vectors and the deltas carry fewer protocol bytes, the deltas fewest."""
    free = CostModel(ser_per_byte=0.0, net_per_byte=0.0, log_per_byte=0.0, snapshot_per_byte=0.0, upload_per_byte=0.0,
                     download_per_byte=0.0, restore_per_byte=0.0)
    runs = {p: run(RunConfig(query=query, protocol=p, workers=3, interval=0.15, rate=RATE[query], duration=DURATION,
                             failures=[0.8, 1.4], costs=free, trace=True))
            for p in ("cic", "cic-packed", "cic-delta")}
    full, packed, delta = runs["cic"], runs["cic-packed"], runs["cic-delta"]
    for r in (packed, delta):
        assert (r.forced, r.checkpoints, r.invalid, r.result) == (full.forced, full.checkpoints, full.invalid, full.result)
        assert [tr.line for tr in r.traces] == [tr.line for tr in full.traces]
        assert [f.replayed_messages for f in r.failures] == [f.replayed_messages for f in full.failures]
    assert full.forced > 0 and any(f.replayed_messages for f in full.failures)
    assert delta.bytes_protocol < packed.bytes_protocol < full.bytes_protocol
    assert delta.bytes_data == full.bytes_data


# --- protocols with a bug must fail the checks above ------------------------------------------------

class LatestCheckpoints(Uncoordinated):
    """UNC that ignores the recovery line: restores every instance's latest durable checkpoint."""

    name = "unc-latest"

    def gc(self) -> None:  # its lines are not consistent, so the collector's would not be either
        pass

    def recovery_line(self):
        line = {i: cks[-1] for i, cks in self.stable.items()}
        replay = {}
        for ch, (src, dst) in self.engine.channel_ends.items():
            lo, hi = line[dst].recv.get(ch, 0), line[src].sent.get(ch, 0)
            if hi > lo:
                replay[ch] = [self.engine.durable[ch][q] for q in range(lo + 1, hi + 1)]
        return line, replay, 0.0


class Unaligned(Coordinated):
    """COOR without alignment: checkpoints at the first marker and never blocks a channel."""

    name = "coor-unaligned"

    def on_marker(self, inst, msg):
        if self.seen.get(inst.id) == msg.rec:
            return
        self.seen[inst.id] = msg.rec
        epoch = self.engine.epoch
        yield from self.engine.checkpoint(inst, self._durable, round_=msg.rec)
        if self.engine.epoch == epoch:
            self.engine.send_marker(inst, msg.rec, 16)


@pytest.mark.parametrize("broken, query, slower", [(LatestCheckpoints, "q3", 150), (Unaligned, "q8", 400)])
def test_broken_protocols_are_caught(broken: type, query: str, slower: float) -> None:
    """Both bugs change the output and the trace shows why: orphans, or in-flight messages lost."""
    caught_output = caught_line = 0
    for seed in range(3):
        # a slower machine keeps the workers busy and messages queued, where the bugs show
        cfg = RunConfig(query=query, protocol="unc", workers=3, interval=0.15, rate=RATE[query], duration=DURATION,
                        seed=seed, failures=[0.7 + 0.1 * seed, 1.5], trace=True, costs=CostModel().scaled(slower),
                        clocks="instance")
        r = run(cfg, protocol=broken)
        caught_output += r.result != reference(query, 3, seed)
        caught_line += any(oracle.orphans(tr) or oracle.in_flight(tr) != tr.replayed for tr in r.traces)
    assert caught_output > 0
    assert caught_line > 0


# --- the cyclic query: whose clock the uncoordinated checkpoints follow ----------------------------

def test_timers_in_step_make_uncoordinated_checkpoints_coordinated_by_accident() -> None:
    """UNC on the cyclic query: with every instance on a clock of its own, checkpoints fall
    between the cycle's messages in both directions and a failure rolls back far (the domino
    effect). On the workers' clocks (the thesis), a worker's instances tick together: with the
    workers' timers in step (``clock_skew=0``) every checkpoint is taken at about the same
    instant and almost nothing is invalid; with the default, each worker's phase drawn from
    the seed over the whole interval (workers start their clocks when they start), the
    checkpoints of different workers fall apart and more are invalid."""
    def invalid(**clocks) -> float:
        r = run(RunConfig(query="reach", protocol="unc", workers=2, interval=0.1, rate=20_000, duration=0.6,
                          failures=[0.45], **clocks))
        assert r.drained
        return r.invalid_pct

    in_step, default, apart = invalid(clock_skew=0.0), invalid(), invalid(clocks="instance")
    assert apart > 30.0
    assert in_step < 5.0
    assert default > in_step


def test_default_timer_phases_are_seeded_and_reported() -> None:
    """Each worker's timer phase is drawn from the run's seed over the whole interval by default
    (a worker's instances share it), the same for the same seed; the run reports the setting."""
    from driftjoin.checkpointing.run import build_engine

    def phases(seed: int, **kw) -> dict[int, list[float]]:
        engine = build_engine(RunConfig(query="q3", protocol="unc", workers=4, interval=0.1, rate=3000, duration=0.5,
                                        seed=seed, **kw))
        out: dict[int, set[float]] = {}
        for inst in engine.insts:
            out.setdefault(inst.worker, set()).add(engine.protocol.phase[inst.id])
        return out

    a, b, c = phases(1), phases(1), phases(2)
    assert a == b != c
    assert all(len(p) == 1 and 0.0 <= next(iter(p)) < 0.1 for p in a.values())
    assert len({next(iter(p)) for p in a.values()}) == 4                       # four workers, four phases
    assert {next(iter(p)) for p in phases(1, clock_skew=0.0).values()} == {0.0}
    r = run(RunConfig(query="q3", protocol="unc", workers=2, interval=0.1, rate=3000, duration=0.3))
    assert (r.clocks, r.clock_skew) == ("worker", 0.1)
