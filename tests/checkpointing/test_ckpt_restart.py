"""Restart time from the measured costs (thesis Figure 3.11): COOR restarts from its states
alone; UNC and CIC also fetch, unpickle and sort the log of every channel with messages to
re-send, and a shuffle's channels grow with the workers squared."""

from __future__ import annotations

from driftjoin.checkpointing import CostModel, RunConfig, run
from driftjoin.checkpointing.engine import restart_seconds


def _restart(protocol: str, workers: int) -> float:
    # the workers' clocks a whole interval apart (the thesis's independent workers): messages
    # are in flight on the shuffle's channels at every uncoordinated recovery line
    r = run(RunConfig(query="q3", protocol=protocol, workers=workers, rate=60_000 * workers, duration=0.15,
                      interval=0.05, failures=[0.12], clocks="worker", clock_skew=0.05))
    assert r.drained
    return r.failures[0].restart_s


def test_uncoordinated_restarts_slow_down_with_the_workers_and_coordinated_ones_do_not() -> None:
    coor1, unc1, coor3, unc3 = _restart("coor", 1), _restart("unc", 1), _restart("coor", 3), _restart("unc", 3)
    assert unc1 < 1.2 * coor1                      # one worker: its instances checkpoint together
    assert unc3 > 2.0 * coor3                      # three: logs of the shuffle's channels to prepare
    assert coor3 < 1.2 * coor1                     # COOR: each worker fetches its own states in parallel


def test_a_log_costs_its_fetch_its_messages_and_their_sort() -> None:
    c = CostModel(fetch_latency=1e-3, download_per_byte=1e-9, restore_per_byte=2e-9, ser_per_msg=1e-6,
                  ser_per_byte=3e-9, sort_per_msg=1e-8)
    states = [(0, 1000), (1, 1000)]
    base = restart_seconds(c, 2, states, [])
    assert base == [1e-3 + 3e-6, 1e-3 + 3e-6]
    logs = restart_seconds(c, 2, states, [(1, 1024, 4096)])
    assert logs[0] == base[0]
    expected = 1e-3 + 4e-9 * 4096 + 1e-6 * 1024 + 1e-8 * 1024 * 10
    assert abs(logs[1] - base[1] - expected) < 1e-12
