"""bench/checkpointing_testbed.py: settings checked before it runs, each section written as it
finishes, every recovered run checked record for record against its failure-free run."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from driftjoin.checkpointing import CostModel

pytestmark = pytest.mark.bench  # their subject is a script under bench/, not the library

BENCH = Path(__file__).resolve().parents[2] / "bench" / "checkpointing_testbed.py"


@pytest.fixture
def bench(monkeypatch):
    spec = importlib.util.spec_from_file_location("checkpointing_testbed", BENCH)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "checkpointing_testbed", module)   # its pool's workers find it by name
    spec.loader.exec_module(module)
    return module


def _main(bench, monkeypatch, tmp_path: Path, *args: str) -> None:
    costs = tmp_path / "costs.json"
    CostModel().to_json(costs, {"when": "test", "load_average": [0.0, 0.0]})
    monkeypatch.setattr(sys, "argv", ["checkpointing_testbed.py", "--workers", "1", "--failure-workers", "1", "--skew-workers",
                                      "1", "--cyclic-workers", "1", "--duration", "0.1", "--interval", "0.04", "--probes", "0",
                                      "--jobs", "1", "--costs", str(costs), "--out", str(tmp_path / "out"), *args])
    bench.main()


def test_a_section_the_queries_cannot_feed_fails_before_anything_runs(bench, monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit, match="the intervals section runs q8"):
        _main(bench, monkeypatch, tmp_path, "--queries", "q1,q3", "--sections", "normal,intervals")
    assert not (tmp_path / "out" / "checkpointing_testbed.json").exists()
    assert "costs" not in capsys.readouterr().out            # nothing measured, nothing run


def test_a_failure_load_above_the_mst_fails_before_anything_runs(bench, monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit, match="--failure-load 1.5 must be in"):
        _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "normal,failure", "--failure-load", "1.5")
    assert "costs" not in capsys.readouterr().out


def test_each_section_is_written_when_it_finishes(bench, monkeypatch, tmp_path, capsys):
    def broken(args, normal):
        raise RuntimeError("the failure section broke")

    monkeypatch.setattr(bench, "section_failure", broken)
    with pytest.raises(RuntimeError, match="failure section broke"):
        _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "normal,failure")
    written = json.loads((tmp_path / "out" / "checkpointing_testbed.json").read_text())
    assert {r["protocol"] for r in written["normal"]} == {"none", "coor", "unc", "cic", "cic-delta"}
    assert written["costs"]["measured"]["when"] == "test"
    assert "from " in capsys.readouterr().out                # the costs' source is printed


def test_recovered_runs_are_checked_record_for_record(bench, monkeypatch, tmp_path, capsys):
    _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "normal,failure")
    out = capsys.readouterr().out
    rows = json.loads((tmp_path / "out" / "checkpointing_testbed.json").read_text())["failure"]
    assert len(rows) == 4 and all(r["exact"] is True for r in rows)
    assert "4 of 4 recovered runs equal their failure-free run" in out
    assert "phases drawn (seed 0) over 40 ms of the 40 ms interval (whole interval)" in out   # the clock setting, stated
    monkeypatch.setattr(sys, "argv", ["checkpointing_testbed.py", "--markdown", "--out", str(tmp_path / "out")])
    bench.main()
    text = capsys.readouterr().out
    assert "### One failure at 30% of the run, 80% of each protocol's estimated MST" in text and "whole interval (seed 0)" in text
    assert "MST **estimated** from one run at a moderate rate" in text                    # --probes 0, named as such
    assert text.count("| q1 | ") == 5 + 4 and "| True |" in text          # normal (none + 4) and failure (4) rows

    real = bench.run

    def lossy(cfg, *a, **kw):                                # a protocol that drops an output after a failure
        res = real(cfg, *a, **kw)
        if cfg.failures and cfg.protocol == "unc":
            res.result = res.result - type(res.result)([next(iter(res.result))])
        return res

    monkeypatch.setattr(bench, "run", lossy)
    first = tmp_path / "first.json"
    (tmp_path / "out" / "checkpointing_testbed.json").rename(first)
    with pytest.raises(SystemExit) as stop:
        _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "failure", "--mst-from", str(first))
    assert stop.value.code == 1
    assert "MISMATCH q1 unc" in capsys.readouterr().out


def test_the_msts_are_measured_for_the_selected_sections_workers_only(bench, monkeypatch, tmp_path):
    seen = {}

    def normal(args):
        seen["workers"] = list(args.workers)
        seen["of"] = dict(args.workers_of)
        return []

    monkeypatch.setattr(bench, "section_normal", normal)
    monkeypatch.setattr(bench, "section_cyclic", lambda args, rows: [])
    _main(bench, monkeypatch, tmp_path, "--queries", "q1,reach", "--sections", "normal,cyclic", "--failure-workers", "7",
          "--skew-workers", "8", "--cyclic-workers", "3")
    assert seen["workers"] == [1]
    assert seen["of"] == {"q1": [1], "reach": [1, 3]}          # the cyclic section's counts for its query only


def test_msts_are_probed_to_saturation_and_the_overhead_section_scales_them(bench, monkeypatch, tmp_path, capsys):
    _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "normal,overhead", "--probes", "8",
          "--protocols", "unc,cic-delta", "--overhead-workers", "2", "--overhead-load", "0.25", "--clock-skew", "0")
    out = capsys.readouterr().out
    data = json.loads((tmp_path / "out" / "checkpointing_testbed.json").read_text())
    normal = {r["protocol"]: r for r in data["normal"]}
    assert set(normal) == {"none", "unc", "cic-delta"}
    for r in normal.values():
        ok = [rate for rate, sustained, _ in r["probes"] if sustained]
        assert r["saturated"] and r["mst"] == max(ok) < r["upper"]
        assert r["rate"] == pytest.approx(0.8 * r["mst"])                # the metrics: a run at 80% of it
    over = {r["protocol"]: r for r in data["overhead"]}
    assert set(over) == {"unc", "cic-delta"}                             # not the checkpoint-free run: 1 by construction
    assert over["unc"]["workers"] == 2 and over["unc"]["rate"] == pytest.approx(0.25 * normal["unc"]["mst"] * 2)
    assert "(in step)" in out and "runs at 25% of the per-worker MST" in out and "not probed at these counts" in out
    monkeypatch.setattr(sys, "argv", ["checkpointing_testbed.py", "--markdown", "--out", str(tmp_path / "out")])
    bench.main()                                                         # the docs' tables, from the JSON alone
    text = capsys.readouterr().out
    assert "| q1 | cic-delta | 1 |" in text and "8 probes" not in text and "the timers in step" in text
    assert "| q1 | 2 | " in text and "| 2.10 |" in text                  # Table 3.2 beside the thesis's CIC at 10 workers
    assert "Table 3.2) at 25% of the per-worker MST at 1 workers times the workers" in text
    assert "MST probed to saturation, the metrics at 80% of it" in text and "| 80% |" in text


def test_an_overhead_load_outside_the_mst_fails_before_anything_runs(bench, monkeypatch, tmp_path, capsys):
    with pytest.raises(SystemExit, match="--overhead-load 0 must be in"):
        _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "normal,overhead", "--overhead-load", "0")
    assert "costs" not in capsys.readouterr().out


def test_saved_msts_feed_later_sections_and_other_settings_are_refused(bench, monkeypatch, tmp_path, capsys):
    msts = tmp_path / "msts.json"
    _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "normal", "--protocols", "unc",
          "--save-msts", str(msts))
    saved = json.loads(msts.read_text())
    assert {(r["query"], r["protocol"]) for r in saved["normal"]} == {("q1", "none"), ("q1", "unc")}
    assert all("timeline" not in r for r in saved["normal"]) and saved["settings"]["duration"] == 0.1
    measured = {r["protocol"]: r["mst"] for r in saved["normal"]}

    # a second file with another query merges with the first; the failure section runs at 80% of the saved MSTs
    other = tmp_path / "other.json"
    _main(bench, monkeypatch, tmp_path, "--queries", "q12", "--sections", "normal", "--protocols", "unc",
          "--save-msts", str(other))
    _main(bench, monkeypatch, tmp_path, "--queries", "q1,q12", "--sections", "failure", "--protocols", "unc",
          "--mst-from", f"{msts},{other}")
    rows = json.loads((tmp_path / "out" / "checkpointing_testbed.json").read_text())["failure"]
    assert {r["query"] for r in rows} == {"q1", "q12"}
    assert next(r for r in rows if r["query"] == "q1")["rate"] == pytest.approx(0.8 * measured["unc"])

    with pytest.raises(SystemExit, match=r"--duration 0.1 there, 0.2 here"):   # MSTs of a shorter run: refused
        _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "failure", "--mst-from", str(msts),
              "--duration", "0.2")
    changed = dict(saved, normal=[dict(r, mst=r["mst"] + 1) for r in saved["normal"]])
    (tmp_path / "changed.json").write_text(json.dumps(changed))
    with pytest.raises(SystemExit, match="two MSTs for"):                       # two files that disagree
        _main(bench, monkeypatch, tmp_path, "--queries", "q1", "--sections", "failure",
              "--mst-from", f"{msts},{tmp_path / 'changed.json'}")
