"""Crash harness: SIGKILL the driver of a running join again and again, restart it from its
checkpoint, and check at the end that every result came out exactly once.

One harness for every operator (``--operator similarity|topk|natural|equi``, the window kinds
``similarity-sliding|similarity-within``, the metric join ``levenshtein|jaccard`` and ``link``; the adapters are in
``bench/crash_operators.py``: input producer, job, oracle comparison). A producer writes
JSON-lines input files at a steady rate until the last crash (each record carries its own time,
so windows do not depend on when a batch ran). The job (this file with ``--job``) runs the join
with a checkpoint into the Parquet sink. The harness kills the job's whole process group
(driver, JVM, Python workers) with SIGKILL at a random moment inside a micro-batch (up to 1.5 s
after one is planned in the offsets log), ``--crashes`` times, restarting it each time; then lets it drain the input (``availableNow``) and
compares the sink, read through Spark, with the oracle computed from the files written.

Per crash it reports the restart time (kill to the first micro-batch committed again) and the
recovery time (kill to the first committed batch whose lag, commit time minus the newest input
file's modification time, is back under twice the steady lag: the median lag of five batches
once the job has first caught up with the producer, before the first crash), both read from
the checkpoint (commits log and file-source log), the same way for every operator. When the
sink is not exact it lists, per micro-batch, the results lost, repeated or extra (by the input
file of their later record) next to the batches after which the job was killed.

    .venv/bin/python bench/crash_harness.py --operator topk --crashes 10
    .venv/bin/python bench/crash_harness.py --operator similarity --crashes 10 --balance greedy
    .venv/bin/python bench/crash_harness.py --operator similarity-within --crashes 10
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from crash_operators import OPERATORS, Adapter  # noqa: E402


def producer(adapter: Adapter, work: Path, interval: float, stop: threading.Event, done: threading.Event) -> None:
    """Write one file per source every ``interval`` seconds until ``stop`` is set."""
    f = 0
    while not stop.is_set():
        adapter.write(work, f, time.time())
        f += 1
        time.sleep(interval)
    done.set()


def job(adapter: Adapter, work: Path, final: bool, balance: str, files_per_batch: int) -> None:
    """The streaming join itself (run as a separate process by the harness)."""
    from driftjoin import local_session

    spark = local_session(3, f"driftjoin-crash-{adapter.name}")

    def read(source: str):
        # the final run drains whatever is left in one go
        return (spark.readStream.schema(adapter.schema(source))
                .option("maxFilesPerTrigger", 100_000 if final else files_per_batch)
                .json(str(work / "in" / source)))

    out = adapter.job(spark, read, str(work / "metrics"), balance)
    w = out.writeStream.format("parquet").option("path", str(work / "out")).option("checkpointLocation", str(work / "ck"))
    q = (w.trigger(availableNow=True) if final else w.trigger(processingTime="500 milliseconds")).start()
    q.awaitTermination()


def commits(work: Path) -> dict[int, float]:
    """Committed batch id -> commit time (the commit file's modification time)."""
    d = work / "ck" / "commits"
    if not d.exists():
        return {}
    out = {}
    for p in d.iterdir():
        if p.name.isdigit():
            try:
                out[int(p.name)] = p.stat().st_mtime
            except FileNotFoundError:
                pass
    return out


def last_commit(work: Path) -> int:
    return max(commits(work), default=-1)


def last_offset(work: Path) -> int:
    """The newest planned batch (offsets log): above the last commit while a batch runs."""
    d = work / "ck" / "offsets"
    return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.exists() else -1


def _source_log(work: Path) -> dict[int, set[tuple[str, float]]]:
    """The file source's own log: its batch -> (file name, modification time) of the files read."""
    out: dict[int, set[tuple[str, float]]] = {}
    for log in (work / "ck" / "sources" / "0").glob("*"):
        try:
            lines = log.read_text().splitlines()[1:]
        except (FileNotFoundError, UnicodeDecodeError):
            continue
        for line in lines:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            out.setdefault(int(e["batchId"]), set()).add((e["path"].rsplit("/", 1)[-1], e["timestamp"] / 1000.0))
    return out


def batch_files(work: Path) -> dict[int, set[tuple[str, float]]]:
    """Query batch -> (input file name, modification time) of the files it read.

    A query batch covers the file source's log entries after the previous batch's offset up to
    its own (offsets log); usually one entry, two after a crash between the source's log write
    and the query's offset write.
    """
    entries = _source_log(work)
    ends: dict[int, int] = {}
    for p in (work / "ck" / "offsets").glob("*"):
        if p.name.isdigit():
            try:
                ends[int(p.name)] = int(json.loads(p.read_text().splitlines()[2])["logOffset"])
            except (FileNotFoundError, IndexError, KeyError, ValueError):
                continue
    out: dict[int, set[tuple[str, float]]] = {}
    for b, end in ends.items():
        start = ends.get(b - 1, end - 1)
        out[b] = set().union(*(entries.get(x, set()) for x in range(start + 1, end + 1)))
    return out


def lags(work: Path) -> list[tuple[int, float, float]]:
    """(batch, commit time, lag) of every committed batch that read input."""
    files = batch_files(work)
    return sorted((b, t, t - max(m for _, m in files[b])) for b, t in commits(work).items() if files.get(b))


def start_job(args: argparse.Namespace, work: Path, final: bool, log) -> subprocess.Popen:
    cmd = [sys.executable, __file__, "--job", str(work), "--operator", args.operator, "--balance", args.balance,
           "--files-per-batch", str(args.files_per_batch)] + (["--final"] if final else [])
    return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def steady_lag(work: Path, args: argparse.Namespace, proc_ref: list) -> float:
    """Wait until the job has caught up with the producer (its first batches read a backlog),
    then return the median lag of the next five batches: the job's lag when it keeps up."""
    start = time.time()
    caught = None
    while time.time() - start < args.patience:
        keep_alive(args, work, proc_ref)
        done = lags(work)
        if caught is None:
            caught = next((b for b, _, lag in done[3:] if lag <= args.warm_lag), None)
        elif len([b for b, _, _ in done if b >= caught]) >= 5:
            return float(np.median([lag for b, _, lag in done if b >= caught][:5]))
        time.sleep(0.5)
    return float(np.median([lag for _, _, lag in lags(work)][-5:] or [args.warm_lag]))


def keep_alive(args: argparse.Namespace, work: Path, proc_ref: list) -> None:
    """Restart the job if it ended by itself (a failure, not a kill of ours); counted in the report."""
    proc, log = proc_ref[0], proc_ref[1]
    if proc.poll() is not None:
        proc_ref[2] += 1
        print(f"  the job exited by itself (code {proc.returncode}); restarted (see {work / 'jobs.log'})", flush=True)
        proc_ref[0] = start_job(args, work, False, log)


def crash_loop(args: argparse.Namespace, work: Path, log) -> tuple[subprocess.Popen, list[dict], float, int]:
    rnd = random.Random(args.seed)
    ref = [start_job(args, work, False, log), log, 0]
    steady = steady_lag(work, args, ref)
    normal = max(2.0 * steady, 5.0)
    print(f"steady lag {steady:.1f} s: recovered = a batch with lag <= {normal:.1f} s", flush=True)
    crashes = []
    for c in range(args.crashes):
        time.sleep(rnd.uniform(args.min_gap, args.max_gap))
        keep_alive(args, work, ref)
        # aim inside a micro-batch: wait (up to 10 s) for one to be planned, then a random moment
        wait = time.time() + 10
        while last_offset(work) <= last_commit(work) and time.time() < wait:
            time.sleep(0.05)
        time.sleep(rnd.uniform(0.0, 1.5))
        before = last_commit(work)
        in_flight = last_offset(work) > before
        t_kill = time.time()
        kill(ref[0])
        ref[0] = start_job(args, work, False, log)
        restart = recovery = None
        while time.time() - t_kill < args.patience and (restart is None or recovery is None):
            keep_alive(args, work, ref)
            if restart is None:
                committed = [t for b, t in commits(work).items() if b > before]
                restart = min(committed) - t_kill if committed else None
            after = [(b, t, lag) for b, t, lag in lags(work) if b > before]
            if recovery is None:
                ok = [t for _, t, lag in after if lag <= normal]
                if ok:
                    recovery = min(ok) - t_kill
            time.sleep(0.5)
        crashes.append({"crash": c + 1, "killed_after_batch": before, "in_batch": in_flight, "restart_s": restart,
                        "recovery_s": recovery})
        print(f"crash {c + 1:2d}: killed after batch {before}{' during batch %d' % (before + 1) if in_flight else ''}, "
              f"restart {restart or float('nan'):.1f} s, recovery {recovery or float('nan'):.1f} s", flush=True)
    return ref[0], crashes, normal, ref[2]


def explain(work: Path, diff: dict[str, list], file_of) -> dict[str, dict[int, int]]:
    """Per kind of difference, how many results each micro-batch (of the later record) had."""
    batch_of = {name: b for b, files in batch_files(work).items() for name, _ in files}
    out = {}
    for kind, items in diff.items():
        per = Counter(batch_of.get(f"f{file_of(item):05d}.json", -1) for item in items)
        out[kind] = dict(sorted(per.items()))
    return out


def harness(args: argparse.Namespace) -> int:
    adapter = OPERATORS[args.operator]()
    work = Path(args.work or f"bench/out/crash-{args.operator}")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = open(work / "jobs.log", "ab")
    stop, done = threading.Event(), threading.Event()
    threading.Thread(target=producer, args=(adapter, work, args.interval, stop, done), daemon=True).start()
    started = time.time()
    proc, crashes, normal, died = crash_loop(args, work, log)
    stop.set()
    done.wait()
    kill(proc)
    final = start_job(args, work, True, log)
    final.wait()
    from driftjoin import local_session

    spark = local_session(2, "driftjoin-crash-check")
    result = adapter.compare(spark, work)
    spark.stop()
    diff = result.differences()
    counts = {k: len(v) for k, v in diff.items()}
    exact = not any(counts.values())
    rs = [c["restart_s"] for c in crashes if c["restart_s"] is not None]
    rc = [c["recovery_s"] for c in crashes if c["recovery_s"] is not None]
    summary = {
        "operator": args.operator, "balance": args.balance, "crashes": crashes, "minutes": (time.time() - started) / 60,
        "recovered_lag_s": normal, "job_exits": died,
        "results": sum(result.got.values()), "expected": sum(result.expected.values()), **counts, **result.notes,
        "exact": exact, "passed": len(rs) if exact and not died else 0,
        "by_batch": explain(work, diff, result.file_of) if not exact else {},
        "examples": {k: [list(x) if isinstance(x, tuple) else x for x in v[:10]] for k, v in diff.items()},
    }
    print(f"\n{args.operator}: {summary['results']:,} results in the sink (oracle {summary['expected']:,}): "
          f"missing {counts['missing']}, duplicated {counts['duplicated']}, extra {counts['extra']}"
          + "".join(f", {k} {v}" for k, v in result.notes.items()))
    if rs:
        print(f"restart time: median {np.median(rs):.1f} s, max {max(rs):.1f} s", end="")
    if rc:
        print(f"; recovery time: median {np.median(rc):.1f} s, max {max(rc):.1f} s ({len(rc)} of {len(crashes)} reached)", end="")
    print()
    if not exact:
        print(f"NOT EXACT. killed after batches {[c['killed_after_batch'] for c in crashes]}; per batch of the later record: "
              f"{json.dumps(summary['by_batch'])}; examples: {json.dumps(summary['examples'])}")
    if died:
        print(f"the job exited by itself {died} time(s) (a query failure, not a kill): see {work / 'jobs.log'}")
    print(f"{summary['passed']}/{len(crashes)} crashes passed (restarted, nothing lost, nothing repeated)")
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    name = args.operator + ("" if args.balance == "none" else f"_{args.balance}")
    Path(f"bench/results/crash_harness_{name}.json").write_text(json.dumps(summary, indent=1, default=str))
    return 0 if summary["passed"] == len(crashes) else 1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--operator", choices=sorted(OPERATORS), default="similarity")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--final", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", default=None, help="working folder (default bench/out/crash-<operator>)")
    ap.add_argument("--crashes", type=int, default=10)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between input files")
    ap.add_argument("--files-per-batch", type=int, default=8, help="maxFilesPerTrigger of the crashing runs")
    ap.add_argument("--warm-lag", type=float, default=10.0, help="first crash once a batch's lag is below this (s)")
    ap.add_argument("--min-gap", type=float, default=4.0, help="seconds after recovery (or patience) before the next kill (min)")
    ap.add_argument("--max-gap", type=float, default=9.0, help="... (max)")
    ap.add_argument("--patience", type=float, default=300.0, help="seconds to wait for restart and recovery")
    ap.add_argument("--balance", choices=["none", "greedy", "s3j"], default="none", help="similarity only")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.balance != "none" and not args.operator.startswith("similarity"):
        ap.error("--balance applies to --operator similarity (any window kind)")
    if args.job:
        job(OPERATORS[args.operator](), Path(args.job), args.final, args.balance, args.files_per_batch)
    else:
        sys.exit(harness(args))


if __name__ == "__main__":
    main()
