"""Figures 4 and 5 of the Streaming HyperCube paper, on the core simulator (no Spark).

Fig. 4: Zipf join keys, alpha from 0 to 2 at a fixed input size; Fig. 5: growing input size at a
fixed alpha. SHC, the parallel hash join (PHJ) and Join-Biclique (JB, best of several subgroup
counts, as the paper reports its best setting) on p = 48 workers, full-stream joins. A third
experiment moves the hot set four times during the stream, which makes SHC migrate state.

The paper measures Flink execution time. A single-process simulator has no parallel time, so
the table reports the per-worker quantities that decide it:

* ``max_load``: the most tuples any worker received (routed copies + migrated tuples), the
  HyperCube load measure; ``mean_load`` its mean over workers;
* ``max_work``: the most tuples received plus pairs produced by any worker, the modelled parallel
  time (one unit per input tuple handled and per result produced);
* ``moved``: tuples copied by SHC's state migrations; ``wall_s``: simulator wall time (the total
  work of all workers on one core, not a parallel time).

Run: ``.venv/bin/python bench/hypercube_core.py`` (about two to three minutes on two cores);
``--scale 0.25`` for a quick look. Writes ``bench/results/hypercube_core.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from driftjoin.hypercube import ZipfStreamSpec, run_join, zipf_stream

RESULTS = Path(__file__).resolve().parent / "results"
ALPHAS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0)
SIZES = (10_000, 20_000, 40_000, 80_000, 160_000)
BICLIQUE_GROUPS = (1, 6, 24)
FIG5_ALPHA = 1.0
DOMAIN = 10_000
BATCH = 1_000


def run_point(spec: ZipfStreamSpec, p: int) -> dict[str, Any]:
    """SHC, PHJ and every JB setting on one stream; JB's best setting by modelled time."""
    stream = zipf_stream(spec)
    rows: dict[str, Any] = {}
    for name, algorithm, options in [
        ("shc", "shc", {}),
        ("phj", "phj", {}),
        *[(f"jb-y{g}", "biclique", {"groups": g}) for g in BICLIQUE_GROUPS],
    ]:
        rows[name] = run_join(stream, algorithm, p, batch_size=BATCH, collect_pairs=False, **options).metrics.summary()
    best = min((k for k in rows if k.startswith("jb-")), key=lambda k: rows[k]["max_work"])
    rows["jb"] = dict(rows[best], setting=best)
    outputs = {r["output"] for r in rows.values()}
    if len(outputs) != 1:
        raise RuntimeError(f"algorithms disagree on the output size: {outputs}")
    return rows


def table(title: str, xname: str, points: list[tuple[Any, dict[str, Any]]]) -> None:
    print(f"\n{title}")
    head = f"{xname:>8} {'algo':>9} {'output':>14} {'max_load':>9} {'mean_load':>9} {'max_work':>12} {'moved':>7} {'wall_s':>7}"
    print(head)
    print("-" * len(head))
    for x, rows in points:
        for name in ("shc", "phj", "jb"):
            r = rows[name]
            label = r.get("setting", name)
            print(f"{x!s:>8} {label:>9} {r['output']:>14,} {r['max_load']:>9,} {r['mean_load']:>9.0f} "
                  f"{r['max_work']:>12,} {r['moved']:>7,} {r['wall_seconds']:>7.2f}")


def plot(fig4: list, fig5: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    for col, (points, xlabel) in enumerate([(fig4, "Zipf alpha"), (fig5, f"input tuples (alpha = {FIG5_ALPHA})")]):
        xs = [x for x, _ in points]
        for name, style in (("shc", "o-"), ("phj", "s--"), ("jb", "^:")):
            label = {"shc": "SHC", "phj": "PHJ", "jb": "JB (best y)"}[name]
            for row, metric, ylabel in ((0, "max_work", "max work per worker (tuples + pairs)"),
                                        (1, "max_load", "max load per worker (tuples)")):
                ax = axes[row][col]
                ax.plot(xs, [rows[name][metric] for _, rows in points], style, label=label)
                ax.set_yscale("log")
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_title("Fig. 4: Zipf, varying alpha")
    axes[0][1].set_title("Fig. 5: Zipf, varying input size")
    axes[0][1].set_xscale("log")
    axes[1][1].set_xscale("log")
    axes[0][0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--p", type=int, default=48, help="workers (the paper: 48)")
    parser.add_argument("--fig4-size", type=int, default=40_000, help="input tuples (R + S) for Fig. 4")
    parser.add_argument("--scale", type=float, default=1.0, help="multiply every input size")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    start = time.perf_counter()

    def spec(total: int, alpha: float | tuple[float, ...], phases: int = 1) -> ZipfStreamSpec:
        n = max(int(total * args.scale) // 2, 1)
        return ZipfStreamSpec(n, n, domain=DOMAIN, alpha_r=alpha, alpha_s=alpha, phases=phases, seed=args.seed)

    fig4 = [(a, run_point(spec(args.fig4_size, a), args.p)) for a in ALPHAS]
    table(f"Fig. 4: Zipf, varying alpha (p = {args.p}, IN = {int(args.fig4_size * args.scale):,})", "alpha", fig4)
    fig5 = [(2 * (int(n * args.scale) // 2), run_point(spec(n, FIG5_ALPHA), args.p)) for n in SIZES]
    table(f"Fig. 5: Zipf, varying IN (p = {args.p}, alpha = {FIG5_ALPHA})", "IN", fig5)
    moving = [("4 phases", run_point(spec(80_000, 1.5, phases=4), args.p))]
    table(f"Moving hot set: alpha = 1.5, hot set redrawn 4 times (p = {args.p}, IN = {int(80_000 * args.scale):,})",
          "stream", moving)

    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "p": args.p,
        "domain": DOMAIN,
        "batch_size": BATCH,
        "seed": args.seed,
        "scale": args.scale,
        "fig4": [{"alpha": a, **rows} for a, rows in fig4],
        "fig5": [{"input": n, "alpha": FIG5_ALPHA, **rows} for n, rows in fig5],
        "moving_hot_set": [{"alpha": 1.5, "phases": 4, **rows} for _, rows in moving],
        "seconds": time.perf_counter() - start,
    }
    (RESULTS / "hypercube_core.json").write_text(json.dumps(out, indent=1))
    plot(fig4, fig5, RESULTS / "hypercube_core.png")
    print(f"\nwrote {RESULTS / 'hypercube_core.json'} and .png in {out['seconds']:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
