"""One grid worker: the records of its cells per open window, joined with block kernels.

A worker holds the cells the layout gives it (:mod:`driftjoin.grid.layout`) and, per open
window, every record routed to it (once, even when several of its cells need it) with its
bucket. When new records arrive, each of its cells ``(i, j)`` joins

- self-join, diagonal ``(i, i)``: the new records of bucket ``i`` with each other and with
  the stored ones of bucket ``i``;
- self-join, ``i < j`` (and two streams: left bucket ``i``, right bucket ``j``):
  new ``i`` x (stored and new ``j``), and stored ``i`` x new ``j``;

so every pair of the window is joined once, in the batch where its later record arrives, in
the one cell of its two buckets. Pairs come from :class:`driftjoin.blockjoin.BlockJoin`: the
accept test is the exact distance of the metric on the records' float64 values, prepared
as the oracle prepares them. Vectors are stored as the user gave them (float32 stays float32:
half the state), and prepared in float64 when a batch is joined.

The pair rules are the oracle's: a self-join reports each unordered pair once with
``left_id < right_id`` and never pairs a record with itself or two records with the same id; a
two-stream join reports ``(left, right)``. Records are window copies (:mod:`driftjoin.windows`):
each window is joined on its own, and in an interval join a candidate pair must also be one the
window accepts (never two ghost copies, times at most ``within`` apart), so the copies of a
record never pair twice.

Each record is prepared for the metric once, when it arrives: a window's table keeps the
prepared float64 matrix beside the raw vectors, so a batch prepares only its own records.
:attr:`GridWorker.added` lists what each batch stored (per window) for a runtime that persists
state incrementally; ``Table.chunks`` is free for that runtime (the ids of the chunks the table
holds).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from driftjoin.blockjoin import BlockJoin, BlockStats
from driftjoin.distance import Metric
from driftjoin.grid.layout import GridLayout
from driftjoin.s3j.compute import Pairs
from driftjoin.s3j.records import Records, keeps_times
from driftjoin.windows import Windowing

#: Format of the worker state (a checkpoint written with another format is refused).
GRID_STATE_FORMAT = 3


@dataclass
class CellCounters:
    """Per-cell statistics of one step: new records, pairs screened by products, pairs out."""

    records: dict[int, int] = field(default_factory=dict)
    comparisons: dict[int, int] = field(default_factory=dict)
    candidates: dict[int, int] = field(default_factory=dict)
    pairs: dict[int, int] = field(default_factory=dict)

    def add(self, cell: int, stats: BlockStats) -> None:
        for bucket, value in ((self.comparisons, stats.screened), (self.candidates, stats.candidates), (self.pairs, stats.pairs)):
            bucket[cell] = bucket.get(cell, 0) + value


@dataclass
class Table:
    """The records of one window on this worker, with their buckets and prepared vectors."""

    records: Records
    bucket: np.ndarray
    prepared: np.ndarray
    chunks: list[int] = field(default_factory=list)

    def nbytes(self) -> int:
        return self.records.nbytes() + int(self.bucket.nbytes) + int(self.prepared.nbytes)

    def extended(self, new: Records, bucket: np.ndarray, prepared: np.ndarray) -> "Table":
        return Table(Records.concat([self.records, new]), np.concatenate([self.bucket, bucket]).astype(np.int32),
                     np.concatenate([self.prepared, prepared]), list(self.chunks))


class GridWorker:
    """The state of one grid worker: its cells and the records of its open windows.

    ``windows``: the join's windowing (None: tumbling); an interval join's records keep their
    times and ghost flags and only accepted pairs join.
    """

    def __init__(self, layout: GridLayout, worker: int, metric: Metric, threshold: float, *,
                 block_bytes: int | None = None, windows: Windowing | None = None) -> None:
        self.layout = layout
        self.worker = worker
        self.metric = metric
        self.threshold = threshold
        self.windowing = windows
        self.interval = keeps_times(windows)
        self.kernel = BlockJoin(metric, threshold) if block_bytes is None else BlockJoin(metric, threshold, block_bytes)
        self.cells = layout.worker_cells(worker)
        self.windows: dict[int, Table] = {}
        #: records stored since the runtime last emptied this list: (window, records, buckets)
        self.added: list[tuple[int, Records, np.ndarray]] = []

    @property
    def self_join(self) -> bool:
        return self.layout.self_join

    def expire_before(self, window: int) -> None:
        for w in [w for w in self.windows if w < window]:
            del self.windows[w]

    def state_bytes(self) -> int:
        return sum(t.nbytes() for t in self.windows.values())

    def cell_id(self, cell: tuple[int, int]) -> int:
        return cell[0] * self.layout.cols + cell[1]

    def add(self, records: Records, bucket: np.ndarray, counters: CellCounters | None = None) -> Pairs:
        """Join new records (``records.vec`` raw, as given) with the stored ones and each other; store them."""
        if self.interval and not records.timed:
            raise ValueError("an interval join's records need their times and ghost flags")
        if not self.interval and records.timed:
            records = records.without_times()
        out = []
        for w in np.unique(records.window):
            sel = np.nonzero(records.window == w)[0]
            out.append(self._add_window(int(w), records.take(sel), np.asarray(bucket)[sel], counters))
        return Pairs.concat(out, records.id.dtype)

    def prepare(self, rec: Records) -> np.ndarray:
        """The records' vectors prepared for the metric in float64 (as the oracle prepares them)."""
        return self.metric.prepare(rec.vec.astype(np.float64))

    def load(self, window: int, new: Records, bucket: np.ndarray) -> Table:
        """Add stored records to a window's table without joining them (rebuilding state)."""
        table = self.windows.get(window)
        prepared = self.prepare(new)
        bucket = bucket.astype(np.int32)
        self.windows[window] = Table(new, bucket, prepared) if table is None else table.extended(new, bucket, prepared)
        return self.windows[window]

    def _add_window(self, window: int, new: Records, new_bucket: np.ndarray, counters: CellCounters | None) -> Pairs:
        table = self.windows.get(window)
        old = table.records if table is not None else None
        prep_new = self.prepare(new)
        prep_old = table.prepared if table is not None and len(old) else None
        old_bucket = table.bucket if table is not None else np.zeros(0, np.int32)
        left_side = 0
        right_side = 0 if self.self_join else 1

        def part(rec: Records | None, prep: np.ndarray | None, buckets: np.ndarray, side: int, b: int) -> np.ndarray:
            if rec is None or prep is None:
                return np.zeros(0, dtype=np.int64)
            return np.nonzero((buckets == b) & (rec.side == side))[0]

        out: list[Pairs] = []
        for cell in self.cells:
            i, j = cell
            cid = self.cell_id(cell)
            ni, nj = part(new, prep_new, new_bucket, left_side, i), part(new, prep_new, new_bucket, right_side, j)
            oi, oj = part(old, prep_old, old_bucket, left_side, i), part(old, prep_old, old_bucket, right_side, j)
            if counters is not None:
                counters.records[cid] = counters.records.get(cid, 0) + len(ni) + (len(nj) if i != j or not self.self_join else 0)
            if self.self_join and i == j:  # (a, a_prep, ia, b, b_prep, ib); b None: pairs within a
                jobs = [(new, prep_new, ni, None, None, ni), (new, prep_new, ni, old, prep_old, oi)]
            else:
                jobs = [(new, prep_new, ni, new, prep_new, nj), (new, prep_new, ni, old, prep_old, oj),
                        (old, prep_old, oi, new, prep_new, nj)]
            for a_rec, a_prep, ia, b_rec, b_prep, ib in jobs:
                if len(ia) == 0 or len(ib) == 0:
                    continue
                if b_rec is None:
                    res = self.kernel.join(a_prep[ia])
                    b_rec = a_rec
                else:
                    res = self.kernel.join(a_prep[ia], b_prep[ib])
                pa, pb, dist = ia[res.ia], ib[res.ib], res.dist
                if self.interval:
                    ok = self.windowing.accept(a_rec.time[pa], a_rec.ghost[pa], b_rec.time[pb], b_rec.ghost[pb])
                    pa, pb, dist = pa[ok], pb[ok], dist[ok]
                    res.stats.pairs = len(pa)
                if counters is not None:
                    counters.add(cid, res.stats)
                out.append(self._pairs(a_rec, pa, b_rec, pb, dist, cid))
        self._store(window, new, new_bucket, prep_new, table)
        return Pairs.concat(out, new.id.dtype)

    def _pairs(self, a: Records, ia: np.ndarray, b: Records, ib: np.ndarray, dist: np.ndarray, cid: int) -> Pairs:
        left, right = a.id[ia], b.id[ib]
        if self.self_join:
            keep = left != right
            ia, ib, dist, left, right = ia[keep], ib[keep], dist[keep], left[keep], right[keep]
            swap = right < left
            left, right = np.where(swap, right, left), np.where(swap, left, right)
        return Pairs(left_id=left, right_id=right, distance=dist, window=a.window[ia],
                     ingest=np.maximum(a.ingest[ia], b.ingest[ib]), workset=np.full(len(ia), cid, dtype=np.int64))

    def _store(self, window: int, new: Records, bucket: np.ndarray, prepared: np.ndarray, table: Table | None) -> None:
        bucket = bucket.astype(np.int32)
        self.windows[window] = Table(new, bucket, prepared) if table is None else table.extended(new, bucket, prepared)
        self.added.append((window, new, bucket))


def layout_fingerprint(layout: GridLayout) -> tuple:
    return (layout.rows, layout.cols, layout.self_join, layout.cell_worker)


def grid_state(w: GridWorker) -> dict:
    """The worker's tables as plain arrays (what the Spark operator checkpoints)."""
    return {
        "format": GRID_STATE_FORMAT,
        "layout": layout_fingerprint(w.layout),
        "windows": {k: (t.bucket, t.records.arrays()) for k, t in w.windows.items()},
    }


def restore_grid(w: GridWorker, state: dict) -> GridWorker:
    """Load :func:`grid_state` output into ``w``, refusing another format or another grid."""
    if state.get("format") != GRID_STATE_FORMAT:
        raise ValueError(f"this checkpoint holds grid state format {state.get('format')!r}, this driftjoin writes "
                         f"{GRID_STATE_FORMAT}: start the query from a new checkpoint location")
    if tuple(state["layout"]) != layout_fingerprint(w.layout):
        raise ValueError("this checkpoint was written with another grid (parallelism or join type changed): "
                         "restart with the same settings or from a new checkpoint location")
    w.windows = {}
    for k, (bucket, rec) in state["windows"].items():
        w.load(k, Records(*rec), bucket)
    return w
