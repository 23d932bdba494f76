"""bench/autoscale_sim.py and bench/autoscale_mechanics.py: the thesis-scale tables run from the
committed inputs alone, with every setup, query x workload cell and sweep the docs show; the
Incremental Join's state model is fitted from Spark's numbers exactly when they follow it."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.bench  # their subject is a script under bench/, not the library

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load(name: str, monkeypatch):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def test_the_simulated_tables_run_from_the_committed_inputs(monkeypatch, tmp_path, capsys):
    sim = _load("autoscale_sim", monkeypatch)
    mech = tmp_path / "mechanics.json"
    mech.write_text(json.dumps({"restart": {"70": {"pause_s": 12.5, "extra_first_batch_s": 3.0, "launch_s": 21.0}},
                                "ij": {"per_source_record_s": 1e-6, "per_state_row_per_batch_s": 2e-7,
                                       "per_record_per_partition_row_s": 1e-9, "state_rows_per_source_record_of_ttl": 0.01}}))
    out = tmp_path / "sim.json"
    monkeypatch.setattr(sim, "SWEEPS", {"peak": (0.8, 1.0), "overprovisioning": (0.0, 0.2), "target": (0.7, 0.9),
                                        "restart_pause": (60.0,)})
    monkeypatch.setattr(sys, "argv", ["autoscale_sim.py", "--minutes", "1", "--max-workers", "2", "--cooldown", "20",
                                      "--sections", "nexmark,sweeps", "--setups", "thesis/restart,waves/live",
                                      "--mechanics", str(mech), "--out", str(out)])
    sim.main()
    res = json.loads(out.read_text())
    assert (res["config"]["restart_pause"], res["config"]["restart_reload"], res["config"]["launch_delay"]) == (12.5, 3.0, 21.0)
    cells = {(x["query"], x["workload"]) for x in res["nexmark"]}
    assert {("map", w) for w in sim.WORKLOADS} | {("swa", w) for w in sim.WORKLOADS} <= cells
    assert {("filter", "cosine"), ("ij", "cosine"), ("sa", "cosine"), ("ij-premise", "cosine")} <= cells
    assert {x["policy"] for x in res["nexmark"]} == set(sim.POLICIES) and "dhalion-stage" in sim.POLICIES
    assert {x["setup"] for x in res["nexmark"]} == {"thesis/restart", "waves/live"}
    assert {x["sweep"] for x in res["sweeps"]} == {"peak", "overprovisioning", "target", "restart_pause"}
    assert {x["value"] for x in res["sweeps"] if x["sweep"] == "restart_pause"} == {12.5, 60.0}
    assert {x["setup"] for x in res["sweeps"] if x["sweep"] == "restart_pause"} == {"thesis/restart"}
    assert all(x["reversals"] >= 0 and x["peak_workers"] <= 2 and x["trace"][0][0] == 0.0 for x in res["nexmark"])
    part = tmp_path / "sweeps.json"
    part.write_text(json.dumps({k: v for k, v in res.items() if k != "nexmark"}))
    only_nexmark = tmp_path / "nexmark.json"
    only_nexmark.write_text(json.dumps({k: v for k, v in res.items() if k != "sweeps"}))
    monkeypatch.setattr(sys, "argv", ["autoscale_sim.py", "--markdown", "--from", f"{only_nexmark},{part}"])
    capsys.readouterr()
    sim.main()
    text = capsys.readouterr().out                                        # two sections' runs, merged
    assert "### NexMark queries" in text and "| setup | 0.8* | 1 |" in text
    assert "| setup | 0* | 0.2* |" not in text and "| setup | 0 | 0.2* |" in text and "reversals" in text
    assert "| setup | 0.7* | 0.9 |" in text                                # the thesis's values, marked
    assert "peak (share of what the most workers take): p95 s (thr/in, mean workers, actions); this project's assumption" in text
    assert "restart pause, s: p95 s (thr/in, mean workers, actions); the pause measured on Spark first" in text


def test_the_decreasing_workload_starts_where_its_peak_needs_under_each_sizing(monkeypatch):
    sim = _load("autoscale_sim", monkeypatch)
    args = type("Args", (), {"max_workers": 70, "cooldown": 300.0})()
    assert sim.start_workers("decreasing", 0.8, "thesis", args, 70) == 56      # the thesis's count
    assert sim.start_workers("decreasing", 0.8, "waves", args, 70) == 70       # 56 executors run 2 waves: like 35
    assert sim.start_workers("decreasing", 0.2, "waves", args, 70) == 14
    assert sim.start_workers("cosine", 0.8, "thesis", args, 70) == 1
    assert sim.reversals([(0, 1), (10, 4), (20, 8), (30, 5), (40, 9), (50, 9)]) == 2
    assert sim.reversals([(0, 70), (10, 56), (20, 44)]) == 0


def test_the_incremental_joins_state_makes_its_capacity_fall_with_the_rate(monkeypatch):
    sim = _load("autoscale_sim", monkeypatch)
    from driftjoin.control.autoscale.simulator import SimConfig

    measured = json.loads((BENCH / "inputs" / "nexmark_costs.json").read_text())["nexmark_costs"]["ij"]
    plain = sim.nexmark_config(SimConfig(partitions=70), measured)
    state = {"per_source_record_s": 2e-6, "per_state_row_per_batch_s": 1e-7, "per_record_per_partition_row_s": 1e-8,
             "state_rows_per_source_record_of_ttl": 0.05, "ttl": 10.0}
    grown = sim.nexmark_config(SimConfig(partitions=70), measured, state)
    join = grown.query()[-1]
    assert join.state_ttl == 10.0 and join.state_cost == pytest.approx(5e-9) and join.probe_cost == pytest.approx(5e-10)
    assert plain.query()[-1].state_ttl is None
    a, b = sim.capacity_at(grown, 10, 1e5), sim.capacity_at(grown, 70, 1e6)
    assert b < 7 * a                                          # seven times the workers, less than seven times the rate
    assert sim.capacity_at(plain, 70, 1e6) == pytest.approx(7 * sim.capacity_at(plain, 10, 1e5))
    peak = 0.8 * plain.stage_capacity() * 70
    premise = sim.premise_config(plain, 10.0, peak)          # the thesis's premise: the state doubles the cost at the peak
    rows_per_partition = peak * 10.0 / 70
    assert premise.query()[-1].probe_cost * rows_per_partition == pytest.approx(sum(s.cost for s in plain.query()))


def test_the_incremental_join_model_is_fitted_exactly_from_windows_that_follow_it(monkeypatch):
    mech = _load("autoscale_mechanics", monkeypatch)
    k, a, b, c = 0.1, 1.5e-6, 4e-7, 2e-9
    rows = []
    rng = np.random.default_rng(1)
    for rate in (10_000, 40_000):
        for ttl in (5, 40):
            for _ in range(6):                                    # one row per micro-batch
                n = rate * rng.uniform(0.9, 1.1)
                s = 0.02 * rate * ttl * rng.uniform(0.5, 1.0)
                rows.append({"rate": rate, "ttl": ttl, "partitions": 2, "source_records": n, "state_rows": s, "batches": 1,
                             "join_cpu_s": k + a * n + b * s + c * n * s / 2})
    fit = mech.fit_ij(rows)
    assert fit["per_batch_s"] == pytest.approx(k, rel=1e-6)
    assert fit["per_source_record_s"] == pytest.approx(a, rel=1e-6)
    assert fit["per_state_row_per_batch_s"] == pytest.approx(b, rel=1e-6)
    assert fit["per_record_per_partition_row_s"] == pytest.approx(c, rel=1e-6)
    assert fit["r2"] > 0.999999
    summary = mech.summarise({"ij": rows, "restart": [
        {"partitions": 70, "from": a, "to": b, "pause_s": p, "extra_first_batch_s": 1.0, "actuation_s": 9.0, "load": 3.0}
        for a, b, p in ((4, 2, 6.0), (2, 4, 30.0), (4, 2, 8.0), (2, 4, 34.0))]})
    assert summary["restart"]["70"]["pause_s"] == 7.0 and summary["restart"]["70"]["launch_s"] == 25.0
    assert summary["ij"]["windows"] == len(rows)


def test_queries_and_sweeps_run_apart(monkeypatch, tmp_path):
    """--queries and --sweeps split the nexmark and sweeps sections into pieces that run at once
    and merge (--markdown --from); a misspelled name fails before anything runs."""
    sim = _load("autoscale_sim", monkeypatch)
    out = tmp_path / "swa.json"
    monkeypatch.setattr(sim, "SWEEPS", dict(sim.SWEEPS, overprovisioning=(0.0, 0.2)))
    monkeypatch.setattr(sys, "argv", ["autoscale_sim.py", "--minutes", "1", "--max-workers", "2", "--cooldown", "20",
                                      "--sections", "sweeps,nexmark", "--queries", "swa,ij-premise", "--sweeps",
                                      "overprovisioning", "--workloads", "steps,cosine", "--setups", "waves/live",
                                      "--out", str(out)])
    sim.main()
    res = json.loads(out.read_text())
    assert {(x["query"], x["sweep"], x["policy"]) for x in res["sweeps"]} == {("swa", "overprovisioning", "ds2")}
    assert {(x["query"], x["workload"]) for x in res["nexmark"]} == {("swa", "steps"), ("swa", "cosine"), ("ij-premise", "cosine")}
    monkeypatch.setattr(sys, "argv", ["autoscale_sim.py", "--queries", "map,q5", "--sweeps", "peek", "--out", str(out)])
    with pytest.raises(SystemExit, match="--queries q5, --sweeps peek: choose queries from map"):
        sim.main()


def test_a_sweep_that_stops_keeps_the_values_that_finished(monkeypatch, tmp_path):
    sim = _load("autoscale_sim", monkeypatch)
    out = tmp_path / "sweeps.json"
    monkeypatch.setattr(sim, "SWEEPS", dict(sim.SWEEPS, overprovisioning=(0.0, 0.2)))
    real, calls = sim.run_setups, []

    def stops(*a, **kw):                        # the third call (the second value's first workload) breaks
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("stopped")
        return real(*a, **kw)

    monkeypatch.setattr(sim, "run_setups", stops)
    monkeypatch.setattr(sys, "argv", ["autoscale_sim.py", "--minutes", "1", "--max-workers", "2", "--cooldown", "20",
                                      "--sections", "sweeps", "--queries", "map", "--sweeps", "overprovisioning",
                                      "--setups", "waves/live", "--out", str(out)])
    with pytest.raises(RuntimeError, match="stopped"):
        sim.main()
    rows = json.loads(out.read_text())["sweeps"]
    assert {(x["value"], x["workload"]) for x in rows} == {(0.0, "steps"), (0.0, "cosine")}
