"""The simulator: operator instances, channels, checkpoints and failures as simpy processes.

Time is simulated (seconds), costs come from :class:`~driftjoin.checkpointing.costs.CostModel`,
and everything else is real: operators run their code on the records, snapshots are copies of
their state, messages carry the records. One worker = one CPU that runs one instance of every
stage (thesis 3.7.1); an instance is a simpy process that takes one message at a time from its
mailbox, holds its worker's CPU for the message's cost (unpickle, process, pickle the outputs,
log them) and then puts the outputs on their channels. A channel is a FIFO wire: it is busy
``net_per_byte`` per byte (serial) and delivers ``net_per_msg`` later (overlapping). Sources
read their partition of a replayable input log at the records' arrival times (or later, when
behind: the end-to-end latency counts from the arrival). The protocol
(:mod:`driftjoin.checkpointing.protocols`) hooks in where the thesis's protocols act: on
control messages (timers, triggers), markers, before a message is delivered, on every send
(piggybacking, logging) and at recovery. A failure at time t stops every instance (a new
*epoch*: the old processes, their in-flight messages and queued work are dropped), waits for
detection, lets the protocol choose the recovery line, spends the restart time (the
coordinator's recovery-line computation, then per worker fetching and rebuilding its states and, for
UNC and CIC, fetching, unpickling and sorting the logs it re-sends: :func:`restart_seconds`), restores every
instance from its checkpoint in the line, re-sends the logged messages the line needs and
starts new processes; the sources resume from their restored offsets.

Determinism: no wall clock and no unseeded randomness, so a run is a function of its inputs.
With ``trace=True`` the engine records, per message, the checkpoint interval of its sender at
the send and of its receiver at the delivery: the tests check every recovery line against this
ground truth, independently of the protocols' own bookkeeping.
"""

from __future__ import annotations

import math
import pickle
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Generator

import simpy

from driftjoin.checkpointing.costs import CostModel
from driftjoin.checkpointing.dataflow import Dataflow, expand, hash_partition

DATA, MARKER, CONTROL = 0, 1, 2


class Msg:
    """A message on a channel (``ch = -1`` for control messages from timers or the coordinator)."""

    __slots__ = ("kind", "ch", "seq", "rec", "ts", "size", "meta", "meta_size")

    def __init__(self, kind: int, ch: int, seq: int, rec: Any, ts: float, size: int,
                 meta: Any = None, meta_size: int = 0) -> None:
        self.kind, self.ch, self.seq, self.rec, self.ts = kind, ch, seq, rec, ts
        self.size, self.meta, self.meta_size = size, meta, meta_size


class Mailbox:
    """An instance's input queue: a deque plus the event its process waits on when it is empty,
    or (a source waiting for its next record's arrival) the process to interrupt."""

    __slots__ = ("env", "items", "waiter", "sleeper")

    def __init__(self, env: simpy.Environment) -> None:
        self.env, self.items, self.waiter, self.sleeper = env, deque(), None, None

    def put(self, msg: Msg) -> None:
        self.items.append(msg)
        w = self.waiter
        if w is not None and not w.triggered:
            self.waiter = None
            w.succeed()
        elif self.sleeper is not None:
            sleeper, self.sleeper = self.sleeper, None
            sleeper.interrupt()

    def wait(self) -> simpy.Event:
        self.waiter = self.env.event()
        return self.waiter


class _Delivery:
    """A message's arrival at its receiver's mailbox, unless a failure came in between."""

    __slots__ = ("engine", "epoch", "box", "msg")

    def __init__(self, engine: "Engine", epoch: int, box: Mailbox, msg: Msg) -> None:
        self.engine, self.epoch, self.box, self.msg = engine, epoch, box, msg

    def __call__(self, _event: Any) -> None:
        if self.engine.epoch == self.epoch:
            self.box.put(self.msg)


@dataclass
class Checkpoint:
    """One instance's checkpoint: a copy of its state, its channel counters, logged messages."""

    inst: int
    index: int
    start: float
    state: Any
    sent: dict[int, int]
    recv: dict[int, int]
    state_bytes: int
    log: dict[int, list[Msg]] = field(default_factory=dict)
    log_bytes: int = 0
    forced: bool = False
    round: int | None = None
    extra: Any = None
    done: float | None = None  # when its upload finished (None: not durable yet)


class Inst:
    """Runtime of one operator instance."""

    def __init__(self, engine: "Engine", iid: int, stage: str, index: int, op: Any, source: bool, sink: bool) -> None:
        self.id, self.stage, self.index, self.worker = iid, stage, index, index
        self.op, self.source, self.sink = op, source, sink
        self.kind = op.kind
        self.in_channels = engine.plan.inputs[iid]
        self.out = engine.plan.out[iid]
        self.sent: dict[int, int] = {}
        self.recv: dict[int, int] = {}
        self.ckpt_index = 0
        self.unlogged: dict[int, list[Msg]] = defaultdict(list)
        self.reset(engine.env)

    def reset(self, env: simpy.Environment) -> None:
        self.mailbox = Mailbox(env)
        self.blocked: set[int] = set()
        self.buffered: dict[int, deque] = defaultdict(deque)
        self.ready: deque = deque()
        self.exhausted = False

    def unblock_all(self) -> None:
        for ch in sorted(self.blocked):
            self.ready.extend(self.buffered.pop(ch, ()))
        self.blocked.clear()


@dataclass
class Failure:
    time: float
    worker: int
    detected: float = float("nan")
    restarted: float = float("nan")
    line: dict[int, int] = field(default_factory=dict)
    rolled_back: int = 0
    replayed_messages: int = 0
    replayed_records: int = 0


@dataclass
class TraceAtFailure:
    """Ground truth at a recovery: per (channel, seq) the sender's and receiver's intervals."""

    line: dict[int, int]
    sends: dict[tuple[int, int], int]
    recvs: dict[tuple[int, int], int]
    replayed: dict[int, list[int]]
    channels: dict[int, tuple[int, int]]
    available: dict[int, list[int]]  # per instance, the checkpoint indices durable at the failure


def restart_seconds(costs: CostModel, workers: int, states: list[tuple[int, int]],
                    logs: list[tuple[int, int, int]]) -> list[float]:
    """Each worker's time to prepare a restart, from the measured costs (the workers in parallel).

    ``states``: per instance in the recovery line, its worker and its checkpoint's state bytes:
    fetched (one object: ``fetch_latency`` plus ``download_per_byte``) and rebuilt
    (``restore_per_byte``: unpickling). ``logs``: per channel with messages to re-send (UNC,
    CIC), the sender's worker, the messages and their bytes: the channel's log fetched (one
    object), its messages unpickled (``ser_per_msg`` and ``ser_per_byte`` each) and sorted by
    sequence number (``sort_per_msg`` times ``n log2 n``) for the replay and its deduplication.
    COOR has no logs: a restart is its states alone; UNC and CIC fetch a log per channel with
    messages in flight at the line, which grows with the channels (the workers squared on a
    shuffle), which is why they restart slower at scale (thesis Figure 3.11).

    >>> c = CostModel(fetch_latency=1e-3, download_per_byte=0.0, restore_per_byte=0.0, ser_per_msg=0.0,
    ...               ser_per_byte=0.0, sort_per_msg=0.0)
    >>> restart_seconds(c, 2, [(0, 100), (1, 100)], []), restart_seconds(c, 2, [(0, 100), (1, 100)], [(0, 5, 400), (0, 2, 80)])
    ([0.001, 0.001], [0.003, 0.001])
    """
    out = [0.0] * workers
    for w, nbytes in states:
        out[w] += costs.fetch_latency + (costs.download_per_byte + costs.restore_per_byte) * nbytes
    for w, n, nbytes in logs:
        out[w] += (costs.fetch_latency + (costs.download_per_byte + costs.ser_per_byte) * nbytes + costs.ser_per_msg * n
                   + costs.sort_per_msg * n * math.log2(max(n, 2)))
    return out


class Engine:
    """Runs one dataflow under one protocol; see the module docstring."""

    def __init__(self, flow: Dataflow, parallelism: int, protocol_factory: Callable[["Engine"], Any],
                 costs: CostModel, failures: list[tuple[float, int]], seed: int, drain_limit: float,
                 trace: bool = False) -> None:
        self.env = simpy.Environment()
        self.flow, self.costs, self.seed, self.trace = flow, costs, seed, trace
        self.plan = expand(flow, parallelism)
        self.parallelism = parallelism
        self.channels = self.plan.channels
        self.channel_ends = {c.id: (c.src, c.dst) for c in self.channels}
        self.insts: list[Inst] = []
        for iid, (stage_name, index) in enumerate(self.plan.instances):
            stage = flow.stage(stage_name)
            op = stage.make(len(self.plan.inputs[iid]), index)
            self.insts.append(Inst(self, iid, stage_name, index, op, stage.source, stage.sink))
        self.inputs = []
        for part in flow.inputs:
            times = [float(t) for t, _ in part]
            recs = [r for _, r in part]
            self.inputs.append((times, recs, [len(pickle.dumps(r, 5)) for r in recs]))
        if sum(1 for s in flow.stages if s.source) != 1 or len(self.inputs) != parallelism:
            raise ValueError(f"dataflow {flow.name} needs one source stage and one input partition per worker "
                             f"({parallelism}), got {len(self.inputs)} partitions")
        self.input_end = max((t[-1] for t, _, _ in self.inputs if t), default=0.0)
        self.drain_limit = drain_limit
        self.failures = [Failure(t, w) for t, w in sorted(failures)]
        self.epoch = 0
        self.cpu_busy = [0.0] * parallelism
        self.cpu_used = [0.0] * parallelism
        self.wire_busy = [0.0] * len(self.channels)
        self.upload_busy = [0.0] * parallelism
        self.inflight = 0
        self.recovering = False
        self.recovered = self.env.event()
        self.done = self.env.event()
        # measurements
        self.bytes_data = 0
        self.bytes_protocol = 0
        self.messages = 0
        self.duplicates = 0
        self.ingested = 0
        self.sink_times: list[float] = []
        self.sink_latency: list[float] = []
        self.durable: dict[int, dict[int, Msg]] = defaultdict(dict)  # channel -> seq -> logged message
        self.trace_send: dict[tuple[int, int], int] = {}
        self.trace_recv: dict[tuple[int, int], int] = {}
        self.traces: list[TraceAtFailure] = []
        self.durable_index: dict[int, list[int]] = {i.id: [0] for i in self.insts}
        self.protocol = protocol_factory(self)

    # --- running ------------------------------------------------------------------------------

    def run(self) -> None:
        self._start()
        for f in self.failures:
            self.env.process(self._fail(f))
        self.env.run(until=self.done | self.env.timeout(self.input_end + self.drain_limit))
        self.end_time = self.env.now
        self.drained = self.done.triggered

    def _start(self) -> None:
        epoch = self.epoch
        for inst in self.insts:
            self.env.process(self._source(inst, epoch) if inst.source else self._work(inst, epoch))
        self.protocol.start(epoch)

    def _check_done(self) -> None:
        if self.inflight == 0 and not self.recovering and not self.done.triggered and all(
                i.exhausted for i in self.insts if i.source):
            self.done.succeed()

    def cpu(self, inst: Inst, cost: float) -> simpy.Event:
        """Hold the worker's CPU for ``cost`` (FIFO with the other instances of the worker)."""
        w = inst.worker
        now = self.env.now
        start = self.cpu_busy[w] if self.cpu_busy[w] > now else now
        self.cpu_busy[w] = start + cost
        self.cpu_used[w] += cost
        return self.env.timeout(start + cost - now)

    def _source(self, inst: Inst, epoch: int) -> Generator:
        env, mb, proto, costs = self.env, inst.mailbox, self.protocol, self.costs
        times, recs, sizes = self.inputs[inst.index]
        n = len(recs)
        base = costs.cpu("source")
        while True:
            while mb.items:
                yield from proto.on_control(inst, mb.items.popleft())
                if self.epoch != epoch:
                    return
            off = inst.op.offset
            if off >= n:
                inst.exhausted = True
                self._check_done()
                yield mb.wait()
                if self.epoch != epoch:
                    return
                continue
            t = times[off]
            if t > env.now:
                # until the record arrives, or a control message (the mailbox interrupts)
                mb.sleeper = env.active_process
                try:
                    yield env.timeout(t - env.now)
                except simpy.Interrupt:
                    pass
                mb.sleeper = None
                if self.epoch != epoch:
                    return
                continue
            rec = recs[off]
            outs = inst.op.process(0, 0, rec, sizes[off])
            sends = self._route(inst, outs)
            yield self.cpu(inst, base + self._send_cost(inst, sends))
            if self.epoch != epoch:
                return
            self.ingested += 1
            self._emit(inst, sends, t)

    def _work(self, inst: Inst, epoch: int) -> Generator:
        """An operator instance: one message at a time from its mailbox (blocked channels'
        messages wait in ``buffered``; ``ready`` holds those released by an unblock)."""
        env, mb, proto, costs = self.env, inst.mailbox, self.protocol, self.costs
        intercept = proto.intercepts_receive
        ready, items, blocked, recv = inst.ready, mb.items, inst.blocked, inst.recv
        channels, trace, sink = self.channels, self.trace, inst.sink
        op, w = inst.op, inst.worker
        process_cost = costs.cpu(inst.kind) + costs.ser_per_msg
        ser_per_byte = costs.ser_per_byte
        while True:
            if ready:
                msg = ready.popleft()
            elif items:
                msg = items.popleft()
            else:
                yield mb.wait()
                if self.epoch != epoch:
                    return
                continue
            ch = msg.ch
            if ch in blocked:
                inst.buffered[ch].append(msg)
                continue
            kind = msg.kind
            if kind == DATA:
                seq = msg.seq
                if seq <= recv.get(ch, 0):  # deduplication of replayed messages
                    self.duplicates += 1
                    self.inflight -= 1
                    self._check_done()
                    continue
                if intercept:
                    yield from proto.on_receive(inst, msg)
                    if self.epoch != epoch:
                        return
                # deliver: process the record, hold the CPU (unpickle, process, pickle and send)
                channel = channels[ch]
                recv[ch] = seq
                if trace:
                    self.trace_recv[(ch, seq)] = inst.ckpt_index
                outs = op.process(channel.port, channel.pos, msg.rec, msg.size)
                sends = self._route(inst, outs) if outs else ()
                cost = process_cost + ser_per_byte * (msg.size + msg.meta_size) + (self._send_cost(inst, sends) if sends else 0.0)
                now = env.now
                busy = self.cpu_busy[w]
                busy = (busy if busy > now else now) + cost
                self.cpu_busy[w] = busy
                self.cpu_used[w] += cost
                yield env.timeout(busy - now)
                if self.epoch != epoch:
                    return
                if sink:
                    self.sink_times.append(busy)
                    self.sink_latency.append(busy - msg.ts)
                if sends:
                    self._emit(inst, sends, msg.ts)
                self.inflight -= 1
                if self.inflight == 0:
                    self._check_done()
            elif kind == MARKER:
                yield from proto.on_marker(inst, msg)
            else:
                yield from proto.on_control(inst, msg)
            if self.epoch != epoch:
                return

    def _route(self, inst: Inst, outs: list) -> list[tuple[Any, Any, int]]:
        sends = []
        p = self.parallelism
        dumps = pickle.dumps
        for rec in outs:
            size = 0
            for edge, chans in inst.out:
                accepts = edge.accepts
                if accepts is not None and not accepts(rec):
                    continue
                if not size:
                    size = len(dumps(rec, 5))
                part = edge.partition
                if part == "forward":
                    sends.append((chans[0], rec, size))
                elif part == "hash":
                    key = edge.key(rec)
                    sends.append((chans[key % p if type(key) is int else hash_partition(key, p)], rec, size))
                else:
                    sends.extend((c, rec, size) for c in chans)
        return sends

    def _send_cost(self, inst: Inst, sends: list) -> float:
        c, proto = self.costs, self.protocol
        per_msg = c.ser_per_msg + (c.log_per_msg if proto.logs_messages else 0.0)
        per_byte = c.ser_per_byte + (c.log_per_byte if proto.logs_messages else 0.0)
        meta = proto.piggyback_bytes(inst, sends) if proto.piggybacks else 0
        return len(sends) * per_msg + per_byte * (meta + sum(x[2] for x in sends))

    def _emit(self, inst: Inst, sends: list, ts: float) -> None:
        proto = self.protocol
        logs = proto.logs_messages
        pig = proto.piggybacks
        trace = self.trace
        sent, unlogged = inst.sent, inst.unlogged
        meta, meta_size = None, 0
        data_bytes = protocol_bytes = 0
        for ch, rec, size in sends:
            cid = ch.id
            seq = sent.get(cid, 0) + 1
            sent[cid] = seq
            if pig:
                meta, meta_size = proto.piggyback(inst, ch)
            msg = Msg(DATA, cid, seq, rec, ts, size, meta, meta_size)
            if logs:
                unlogged[cid].append(msg)
            if trace:
                self.trace_send[(cid, seq)] = inst.ckpt_index
            data_bytes += size
            protocol_bytes += meta_size
            self.wire(cid, ch.dst, msg)
        self.bytes_data += data_bytes
        self.bytes_protocol += protocol_bytes
        self.messages += len(sends)
        self.inflight += len(sends)

    def wire(self, ch: int, dst: int, msg: Msg) -> None:
        """Put ``msg`` on channel ``ch``: FIFO, busy per byte, delivered after the latency."""
        env, c = self.env, self.costs
        now = env.now
        busy = self.wire_busy[ch]
        busy = (busy if busy > now else now) + c.net_per_byte * (msg.size + msg.meta_size)
        self.wire_busy[ch] = busy
        ev = env.timeout(busy + c.net_per_msg - now)
        ev.callbacks.append(_Delivery(self, self.epoch, self.insts[dst].mailbox, msg))

    def send_marker(self, inst: Inst, round_: int, size: int) -> None:
        for _edge, chans in inst.out:
            for ch in chans:
                self.bytes_protocol += size
                self.messages += 1
                self.wire(ch.id, ch.dst, Msg(MARKER, ch.id, 0, round_, self.env.now, 0, None, size))

    def control(self, inst: Inst, payload: Any, size: int = 0) -> None:
        """A control message (timer tick, coordinator trigger) into an instance's mailbox."""
        self.bytes_protocol += size
        inst.mailbox.put(Msg(CONTROL, -1, 0, payload, self.env.now, 0))

    # --- checkpoints --------------------------------------------------------------------------

    def checkpoint(self, inst: Inst, on_durable: Callable[[Checkpoint], None], *, forced: bool = False,
                   round_: int | None = None, extra: Any = None) -> Generator:
        """Snapshot ``inst`` (holding its CPU for the copy), then upload it asynchronously.

        The snapshot includes the messages sent since the last checkpoint (the in-flight log,
        for the protocols that log). Returns the :class:`Checkpoint` (its ``done`` is set and
        ``on_durable`` called when the upload ends).
        """
        c = self.costs
        inst.ckpt_index += 1
        log = dict(inst.unlogged) if self.protocol.logs_messages else {}
        inst.unlogged = defaultdict(list)
        log_bytes = sum(m.size + m.meta_size for msgs in log.values() for m in msgs)
        ck = Checkpoint(inst.id, inst.ckpt_index, self.env.now, inst.op.snapshot(), dict(inst.sent),
                        dict(inst.recv), inst.op.state_bytes, log, log_bytes, forced, round_, extra)
        epoch = self.epoch
        yield self.cpu(inst, c.snapshot_per_byte * ck.state_bytes)
        if self.epoch != epoch:
            return ck
        now = self.env.now
        w = inst.worker
        start = self.upload_busy[w] if self.upload_busy[w] > now else now
        self.upload_busy[w] = start + c.upload_per_byte * (ck.state_bytes + log_bytes)
        ev = self.env.timeout(self.upload_busy[w] + c.upload_latency - now)

        def durable(_e: Any) -> None:
            if self.epoch != epoch:
                return
            ck.done = self.env.now
            self.durable_index[ck.inst].append(ck.index)
            for ch, msgs in ck.log.items():
                store = self.durable[ch]
                for m in msgs:
                    store[m.seq] = m
            on_durable(ck)

        ev.callbacks.append(durable)
        return ck

    # --- failures -----------------------------------------------------------------------------

    def _fail(self, f: Failure) -> Generator:
        env, c = self.env, self.costs
        yield env.timeout(max(0.0, f.time - env.now))
        while self.recovering:  # a failure during a restart is taken once the restart is over
            yield self.recovered
        self.epoch += 1
        self.recovering = True
        self.recovered = env.event()
        offsets = sum(i.op.offset for i in self.insts if i.source)
        yield env.timeout(c.failure_detection)
        f.detected = env.now
        line, replay, algo_seconds = self.protocol.recovery_line()
        f.line = {i: ck.index for i, ck in line.items()}
        if self.trace:
            self.traces.append(TraceAtFailure(dict(f.line), dict(self.trace_send), dict(self.trace_recv),
                                              {ch: [m.seq for m in msgs] for ch, msgs in replay.items()},
                                              dict(self.channel_ends),
                                              {i: list(x) for i, x in self.durable_index.items()}))
        yield env.timeout(algo_seconds + max(restart_seconds(c, self.parallelism, [
            (self.insts[iid].worker, ck.state_bytes) for iid, ck in line.items()], [
            (self.insts[self.channel_ends[ch][0]].worker, len(msgs), sum(m.size + m.meta_size for m in msgs))
            for ch, msgs in replay.items() if msgs])))
        # restore every instance from the line
        for inst in self.insts:
            ck = line[inst.id]
            f.rolled_back += inst.ckpt_index - ck.index
            inst.op.restore(ck.state)
            inst.sent, inst.recv = dict(ck.sent), dict(ck.recv)
            inst.ckpt_index = ck.index
            self.durable_index[inst.id] = [x for x in self.durable_index[inst.id] if x <= ck.index]
            inst.unlogged = defaultdict(list)
            inst.reset(env)
        if self.trace:
            self._rollback_trace(f.line)
        now = env.now
        self.cpu_busy = [now] * self.parallelism
        self.wire_busy = [now] * len(self.channels)
        self.upload_busy = [now] * self.parallelism
        self.inflight = 0
        self.epoch += 1
        self.protocol.after_recovery(line)
        for ch, msgs in replay.items():
            for m in msgs:
                self.inflight += 1
                f.replayed_messages += 1
                self.wire(ch, self.channel_ends[ch][1], self.protocol.replayed(ch, m))
        f.restarted = env.now
        f.replayed_records = offsets - sum(i.op.offset for i in self.insts if i.source)
        self.recovering = False
        self.recovered.succeed()
        self._start()

    def _rollback_trace(self, line: dict[int, int]) -> None:
        ends = self.channel_ends
        self.trace_send = {k: x for k, x in self.trace_send.items() if x < line[ends[k[0]][0]]}
        self.trace_recv = {k: y for k, y in self.trace_recv.items() if y < line[ends[k[0]][1]]}

    # --- results ------------------------------------------------------------------------------

    def outputs(self) -> list[tuple]:
        """Every sink instance's surviving output, concatenated in instance order."""
        return [r for inst in self.insts if inst.sink for r in inst.op.log]
