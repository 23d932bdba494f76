"""Soak run: a similarity join at a steady rate for a long time; state size and process memory
over time must stay flat after the first windows (state bounded by the window).

Samples every ``--every`` seconds: the operators' own state bytes (the member tables of the open
windows, from the statistics files), Spark's state-store figures (rows and memory used by each
stateful operator), and the resident memory of the whole process tree (driver, JVM, Python
workers). Writes bench/results/soak.json and soak.png and prints the curve.

    .venv/bin/python bench/soak.py --minutes 30
    .venv/bin/python bench/soak.py --minutes 10 --within "30 seconds"      # an interval join
    .venv/bin/python bench/soak.py --minutes 10 --slide "10 seconds"       # sliding windows
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    rss: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                parts = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(parts[1]), []).append(int(d))
            rss[int(d)] = int(parts[21]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, IndexError, ValueError):
            continue
    total, stack = 0, [pid]
    while stack:
        p = stack.pop()
        total += rss.get(p, 0)
        stack.extend(children.get(p, []))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=30.0)
    ap.add_argument("--rate", type=int, default=300, help="records/s per stream")
    ap.add_argument("--window", default="30 seconds")
    ap.add_argument("--slide", default=None, help="sliding windows: a window starts every SLIDE")
    ap.add_argument("--within", default=None, help="an interval join instead of windows (--window is then unused)")
    ap.add_argument("--every", type=float, default=30.0)
    ap.add_argument("--out", default="bench/out/soak")
    args = ap.parse_args()
    from driftjoin import local_session, similarity_join
    from driftjoin.spark.runtime.stats import read_stats
    from driftjoin.spark.runtime.progress import ProgressLog

    out = Path(args.out)
    shutil.rmtree(out, ignore_errors=True)
    spark = local_session(2, "driftjoin-soak")

    def stream(i: int):
        return (spark.readStream.format("driftjoin").option("stream", i).option("rate", args.rate).option("dim", 2)
                .option("max_records_per_batch", 4 * args.rate).load())

    metrics = str(out / "metrics")
    windows = {"within": args.within} if args.within else {"window": args.window, "slide": args.slide}
    pairs = similarity_join(stream(0), stream(1), threshold=0.002, metric="angular", **windows,
                            parallelism=2, dim=2, ingest_col="ts", metrics_dir=metrics)
    q = (pairs.writeStream.format("noop").option("checkpointLocation", str(out / "ck"))
         .trigger(processingTime="1 second").start())
    start = time.time()
    samples = []
    log = ProgressLog(q)
    while time.time() - start < args.minutes * 60:
        time.sleep(args.every)
        latest: dict[int, dict] = {}
        for s in read_stats(metrics, "computation"):
            if s["worker"] not in latest or s["seq"] > latest[s["worker"]]["seq"]:
                latest[s["worker"]] = s
        prog = q.lastProgress or {}
        ops = prog.get("stateOperators", [])
        sample = {
            "t": round(time.time() - start, 1),
            "member_state_bytes": sum(s["state_bytes"] for s in latest.values()),
            "state_rows": sum(o.get("numRowsTotal", 0) for o in ops),
            "state_memory_bytes": sum(o.get("memoryUsedBytes", 0) for o in ops),
            "process_tree_rss_bytes": tree_rss(os.getpid()),
            "records_in": log.poll(),
        }
        samples.append(sample)
        print(f"t={sample['t']:7.0f}s  member state {sample['member_state_bytes'] / 1e6:7.2f} MB  "
              f"state store {sample['state_memory_bytes'] / 1e6:7.2f} MB  RSS {sample['process_tree_rss_bytes'] / 1e9:5.2f} GB", flush=True)
    q.stop()
    spark.stop()
    res = Path("bench/results")
    res.mkdir(parents=True, exist_ok=True)
    (res / "soak.json").write_text(json.dumps({"args": vars(args), "samples": samples}, indent=1))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(11, 3.5))
    t = [s["t"] / 60 for s in samples]
    ax[0].plot(t, [s["member_state_bytes"] / 1e6 for s in samples], label="member tables (operators)")
    ax[0].plot(t, [s["state_memory_bytes"] / 1e6 for s in samples], label="state store memory (Spark)")
    ax[0].set_ylabel("MB")
    ax[0].legend(fontsize="small")
    ax[1].plot(t, [s["process_tree_rss_bytes"] / 1e9 for s in samples])
    ax[1].set_ylabel("process tree RSS (GB)")
    for a in ax:
        a.set_xlabel("minutes")
        a.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(res / "soak.png", dpi=100)


if __name__ == "__main__":
    main()
