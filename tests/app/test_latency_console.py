"""The run/demo summary's table of where a pair's latency goes, and the hint for its largest part."""

from __future__ import annotations

import math

import pandas as pd
from rich.console import Console

from driftjoin.app.console import SPLIT_HINTS, print_latency_split
from driftjoin.app.report import SPLIT_COLUMNS


def _frame(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=SPLIT_COLUMNS)


def _printed(frame: pd.DataFrame) -> str:
    console = Console(record=True, width=200)
    print_latency_split(console, frame)
    return console.export_text()


def _row(worker: int, wait: float, work: float, handover: float) -> dict:
    return {"worker": worker, "pairs": 10, "wait_p50_s": wait / 2, "wait_p99_s": wait, "work_p50_s": work / 2,
            "work_p99_s": work, "handover_p50_s": handover / 2, "handover_p99_s": handover, "batch_p50_s": 1.0}


def test_each_worker_gets_a_row_and_the_hint_names_the_largest_part_over_all_workers():
    text = _printed(_frame([_row(0, 0.4, 0.3, 0.2), _row(1, 0.5, 2.5, 0.1)]))
    assert "where a pair's latency goes" in text
    assert "1.250 / 2.500" in text and "0.200 / 0.400" in text  # worker 1's work, worker 0's wait
    assert f"largest part of the p99: {SPLIT_HINTS['work']}" in text
    text = _printed(_frame([_row(0, 0.4, 0.3, 3.0)]))
    assert SPLIT_HINTS["handover"] in text and SPLIT_HINTS["work"] not in text


def test_workers_without_batch_timings_are_left_out_and_nothing_is_printed_without_any():
    untimed = {**_row(2, 9.0, 9.0, 9.0), "wait_p50_s": math.nan, "wait_p99_s": math.nan}
    text = _printed(_frame([_row(0, 3.0, 0.3, 0.2), untimed]))
    assert SPLIT_HINTS["wait"] in text and "9.000" not in text
    assert _printed(_frame([untimed])) == ""
