"""Measure the testbed's costs on this machine: ``python -m driftjoin.checkpointing.calibrate``.

Each cost of :class:`~driftjoin.checkpointing.costs.CostModel` is timed here on the real thing:
the operators' ``process`` on generated records (per record), ``pickle`` of a message and back
(per message and per byte, a least-squares line over sizes), a TCP socket on 127.0.0.1 (half a
ping-pong round trip per message; bytes per second of a bulk send), copying and pickling state
(per byte), writing a checkpoint file with fsync and reading it back (per byte and per file),
appending to an in-flight log, reading small stored objects back, unpickling state, sorting a
log, and Algorithm 2 on a synthetic checkpoint graph. CPU work takes the least of several
repetitions in the thread's own CPU time (other jobs on a shared machine take the core away,
not the work's CPU time), waits (fsync, a socket round trip) the median of wall times. ``--out costs.json`` writes a file that
``CostModel.from_json`` (and the bench's ``--costs``) reads; the defaults in ``costs.py`` are
the values printed on the machine the docs were written on.
"""

from __future__ import annotations

import argparse
import os
import pickle
import socket
import statistics
import tempfile
import threading
import time
from typing import Callable

import numpy as np

from driftjoin.checkpointing.costs import CostModel
from driftjoin.checkpointing.generators import nexmark, reachability, vectors
from driftjoin.checkpointing.queries import QUERIES
from driftjoin.checkpointing.recovery import CheckpointMeta, recovery_line


def _median_time(fn: Callable[[], None], reps: int = 5) -> float:
    """Median of ``reps`` timings: for waits that vary by nature (fsync, a socket round trip)."""
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _least_time(fn: Callable[[], None], reps: int = 5) -> float:
    """Least of ``reps`` timings of CPU work, in this thread's CPU time: other jobs on a shared
    machine take the core away (wall time) but not the work's own CPU time; the least of
    several still drops the passes they slowed through the caches."""
    times = []
    for _ in range(reps):
        t = time.thread_time()
        fn()
        times.append(time.thread_time() - t)
    return min(times)


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    slope, icpt = np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), 1)
    return max(float(icpt), 0.0), max(float(slope), 0.0)


def operator_costs(n: int = 4000, reps: int = 5) -> dict[str, float]:
    """Per-record CPU of every operator kind: the least of ``reps`` passes (the machine is shared)."""
    runs = [_operator_pass(n) for _ in range(reps)]
    return {k: min(r[k] for r in runs) for k in runs[0]}


def _operator_pass(n: int) -> dict[str, float]:
    """One pass of each query's records through fresh instances of its operators."""
    out: dict[str, float] = {}
    inputs = {
        "q1": nexmark("B", 4000, n / 4000, 1, 1), "q12": nexmark("B", 4000, n / 4000, 1, 1),
        "q3": nexmark("PA", 4000, n / 4000, 1, 1), "q8": nexmark("PA", 4000, n / 4000, 1, 1),
        "reach": reachability(2000, n / 2000, 1, 1, nodes=n), "s3j": vectors(2000, min(n, 600) / 2000, 1, 1),
    }
    for name, query in QUERIES.items():
        flow = query.build(1, seed=1)
        recs = [r for _, r in inputs[name][0]]
        # push the records stage by stage through one instance of each operator, timing each stage
        ops = {s.name: s.make(sum(1 for e in flow.edges if e.dst == s.name), 0) for s in flow.stages}
        pending = {s.name: [] for s in flow.stages}
        pending["source"] = [(0, r) for r in recs]
        order = [s.name for s in flow.stages]
        for _round in range(3 if name == "reach" else 1):  # the cycle feeds derived sources back
            for stage in order:
                batch, pending[stage] = pending[stage], []
                if not batch:
                    continue
                op = ops[stage]
                produced: list = []
                t = time.thread_time()
                for port, rec in batch:
                    produced.append(op.process(port, 0, rec, 40))
                dt = (time.thread_time() - t) / len(batch)
                out[op.kind] = min(out.get(op.kind, dt), dt) if op.kind == "source" else max(out.get(op.kind, 0.0), dt)
                for recs_out in produced:
                    for r in recs_out:
                        for e in flow.edges:
                            if e.src == stage and (e.accepts is None or e.accepts(r)):
                                pending[e.dst].append((e.port, r))
    return out


def serialisation() -> tuple[float, float]:
    """Pickle one way, per message and per byte, on records that grow by fields (as records do)."""
    sizes, per = [], []
    for k in (1, 4, 16, 64, 256):
        rec = ("B",) + tuple(range(1000, 1000 + k)) + tuple(float(x) for x in range(k))
        size = len(pickle.dumps(rec, 5))
        reps = 20000

        def go() -> None:
            for _ in range(reps):
                pickle.loads(pickle.dumps(rec, 5))

        sizes.append(size)
        per.append(_least_time(go, 3) / reps / 2)  # one side: pickle or unpickle
    return _line(sizes, per)


def network() -> tuple[float, float]:
    """Half a ping-pong round trip (per message) and the bulk byte rate of a loopback TCP socket."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]

    def echo() -> None:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while True:
            data = conn.recv(1 << 20)
            if not data or data == b"q":
                break
            if len(data) <= 64:
                conn.sendall(data)
        conn.close()

    th = threading.Thread(target=echo, daemon=True)
    th.start()
    cli = socket.create_connection(("127.0.0.1", port))
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"x" * 48
    rounds = 3000

    def pingpong() -> None:
        for _ in range(rounds):
            cli.sendall(msg)
            cli.recv(64)

    per_msg = _median_time(pingpong, 3) / rounds / 2
    blob = b"y" * (1 << 20)

    def bulk() -> None:
        for _ in range(64):
            cli.sendall(blob)

    per_byte = _median_time(bulk, 3) / (64 << 20)
    cli.sendall(b"q")
    cli.close()
    srv.close()
    return per_msg, per_byte


def fetching() -> float:
    """Opening and reading one small stored object (a log, a state) written earlier: per object."""
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for k in range(200):
            path = os.path.join(d, f"log{k}")
            with open(path, "wb") as f:
                f.write(os.urandom(256))
            paths.append(path)

        def read_all() -> None:
            for path in paths:
                with open(path, "rb") as f:
                    f.read()

        return _least_time(read_all, 5) / len(paths)


def restoring() -> float:
    """Unpickling operator state back (per byte of the pickle)."""
    state = {k: [("P", k, f"person{k}", "Boise", "ID", 0.5)] * 4 for k in range(20000)}
    blob = pickle.dumps(state, 5)
    return _least_time(lambda: pickle.loads(blob), 5) / len(blob)


def sorting() -> float:
    """Sorting logged messages by (channel, sequence number): per message and log2 of the count."""
    rng = np.random.default_rng(0)
    n = 50_000
    keys = list(zip(rng.integers(0, 64, n).tolist(), rng.integers(0, 1 << 30, n).tolist()))
    return _least_time(lambda: sorted(keys), 5) / (n * np.log2(n))


def storage() -> tuple[float, float, float]:
    """File write + fsync (latency, per byte) and read back (per byte), in a temporary directory."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ckpt")
        sizes, write_t, read_t = [], [], []
        for size in (1 << 10, 1 << 16, 1 << 20, 8 << 20):
            data = os.urandom(size)

            def write() -> None:
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())

            def read() -> None:
                with open(path, "rb") as f:
                    f.read()

            sizes.append(size)
            write_t.append(_median_time(write, 5))
            read_t.append(_median_time(read, 5))
    latency, per_byte = _line(sizes, write_t)
    return latency, per_byte, _line(sizes, read_t)[1]


def snapshot_per_byte() -> float:
    state = {k: [("P", k, f"person{k}", "Boise", "ID", 0.5)] * 4 for k in range(20000)}
    size = len(pickle.dumps(state, 5))
    return _least_time(lambda: pickle.dumps({k: list(v) for k, v in state.items()}, 5), 5) / size


def logging_costs() -> tuple[float, float]:
    sizes, per = [], []
    for k in (40, 400, 4000):
        blob = b"z" * k
        reps = 50000

        def go() -> None:
            log: list[bytes] = []
            for _ in range(reps):
                log.append(bytes(blob))

        sizes.append(k)
        per.append(_least_time(go, 3) / reps)
    return _line(sizes, per)


def recovery_line_cost(instances: int = 40, per_instance: int = 20) -> float:
    rng = np.random.default_rng(0)
    channels = {c: (c % instances, (c * 7 + 3) % instances) for c in range(instances * 3)}
    metas = {}
    for i in range(instances):
        out = [c for c, (s, _) in channels.items() if s == i]
        inn = [c for c, (_, r) in channels.items() if r == i]
        metas[i] = [CheckpointMeta(i, x, {c: 10 * x for c in out}, {c: int(10 * x - rng.integers(0, 12)) if x else 0 for c in inn})
                    for x in range(per_instance)]
    return _least_time(lambda: recovery_line(metas, channels, count_invalid=False), 3) / (instances * per_instance)


def calibrate() -> CostModel:
    ser_msg, ser_byte = serialisation()
    net_msg, net_byte = network()
    up_latency, up_byte, down_byte = storage()
    log_msg, log_byte = logging_costs()
    return CostModel(
        process=operator_costs(), ser_per_msg=ser_msg, ser_per_byte=ser_byte, net_per_msg=net_msg,
        net_per_byte=net_byte, snapshot_per_byte=snapshot_per_byte(), upload_per_byte=up_byte,
        upload_latency=up_latency, log_per_msg=log_msg, log_per_byte=log_byte, download_per_byte=down_byte,
        # a stored object comes from a storage service (the thesis: Minio): a read plus a request's round trip
        fetch_latency=fetching() + 2 * net_msg, restore_per_byte=restoring(), sort_per_msg=sorting(),
        recovery_line_per_checkpoint=recovery_line_cost(),
    )


def describe(costs: CostModel) -> str:
    """The costs as a table (what the bench prints before it runs)."""
    lines = [f"{'cost':<30} {'value':>12}"]
    for kind, v in sorted(costs.process.items()):
        lines.append(f"{'process[' + kind + ']':<30} {v * 1e6:>9.2f} us")
    for name in ("ser_per_msg", "net_per_msg", "log_per_msg", "fetch_latency", "recovery_line_per_checkpoint"):
        lines.append(f"{name:<30} {getattr(costs, name) * 1e6:>9.2f} us")
    for name in ("ser_per_byte", "net_per_byte", "snapshot_per_byte", "upload_per_byte", "log_per_byte",
                 "download_per_byte", "restore_per_byte", "sort_per_msg"):
        lines.append(f"{name:<30} {getattr(costs, name) * 1e9:>9.3f} ns")
    lines.append(f"{'upload_latency':<30} {costs.upload_latency * 1e3:>9.3f} ms")
    return "\n".join(lines)


def measured_now() -> tuple[CostModel, dict]:
    """A calibration on this machine now, and when and under what load it was taken."""
    load0 = os.getloadavg()[0]
    started = time.time()
    costs = calibrate()
    return costs, {"when": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "load_average": [load0, os.getloadavg()[0]],
                   "host": socket.gethostname(), "seconds": round(time.time() - started, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write the measured costs to this JSON file")
    args = ap.parse_args()
    costs, meta = measured_now()
    print(describe(costs))
    print(f"measured {meta['when']} on {meta['host']} in {meta['seconds']} s, load average {meta['load_average'][0]:.1f} "
          f"-> {meta['load_average'][1]:.1f}")
    if args.out:
        costs.to_json(args.out, meta)
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
