"""UNC: uncoordinated checkpointing with message logging and a recovery line (thesis 3.3.2).

- Every instance checkpoints on its own timer: every ``interval``. No markers, nothing blocks.
  Whose clock the timer follows (``clocks``): ``"worker"`` (the thesis: "every operator
  independently decides when to take a checkpoint based on its worker's clock") ticks every
  instance of a worker together; each worker's clock starts at a phase drawn from the run's
  seed, uniform in ``[0, clock_skew)``. A real worker starts its timer when it starts, and
  workers start seconds apart, so the phases of their timers are independent: the run's
  default (:class:`~driftjoin.checkpointing.run.RunConfig`) is ``clock_skew`` = the whole
  interval. ``clock_skew=0`` puts every worker's timer in step, which turns UNC into an
  accidentally coordinated protocol (every timer fires at the same instant, so few messages
  cross between the checkpoints of one round and almost none is invalid). ``"instance"`` gives every instance a phase of its own,
  uniform over the interval (clocks as far apart as they can be). On a cyclic query the
  phases decide whether checkpoints are taken across the cycle's traffic (Z-cycles, the
  domino effect) or at nearly the same instant.
- Every sent message is kept in the sender's in-flight log; the log since the last checkpoint
  is uploaded with the next checkpoint (upstream backup). A checkpoint also records, per
  channel, the sequence number of the last message sent and received, and that metadata goes
  to the coordinator once the checkpoint is durable.
- At a failure the coordinator builds the checkpoint graph from the metadata and runs rollback
  propagation (Algorithm 2, :mod:`driftjoin.checkpointing.recovery`) for the maximum
  consistent recovery line. Each instance restores its checkpoint in the line; for every
  channel i->j the messages i sent before its checkpoint that j had not received before its
  own (sequence numbers ``recv_j < q <= sent_i``) are re-sent from i's log; the receivers drop
  any sequence number they have already seen (deduplication). The sources resume from their
  restored offsets.
- Garbage collection: every interval the coordinator computes the current line; checkpoints
  below it and logged messages every receiver in the line has already received can never be
  needed again (lines only move forward) and are dropped. That is also when the dropped
  checkpoints are judged valid or *invalid* (part of no consistent line); at a failure the
  durable checkpoints above the line are discarded and counted invalid, as in the thesis.
"""

from __future__ import annotations

from typing import Any, Generator

import numpy as np

from driftjoin.checkpointing.protocols.base import Protocol
from driftjoin.checkpointing.recovery import CheckpointMeta, checkpoint_graph, recovery_line, rollback_propagation

METADATA_HEADER = 24   # instance, checkpoint index, location
METADATA_PER_CHANNEL = 12  # channel id + sequence number


def meta(ck: Any) -> CheckpointMeta:
    return CheckpointMeta(ck.inst, ck.index, ck.sent, ck.recv)


CLOCKS = ("worker", "instance")


class Uncoordinated(Protocol):
    name = "unc"
    logs_messages = True
    has_clocks = True

    def __init__(self, engine: Any, interval: float, seed: int, *, clocks: str = "worker", clock_skew: float = 0.0) -> None:
        super().__init__(engine, interval, seed)
        if clocks not in CLOCKS:
            raise ValueError(f"clocks={clocks!r}: choose 'worker' (a worker's instances tick together) or 'instance'")
        if not 0.0 <= clock_skew <= interval:
            raise ValueError(f"clock_skew={clock_skew!r} must be in [0, interval={interval}] seconds")
        rng = np.random.default_rng(seed)
        if clocks == "worker":
            offset = [float(rng.uniform(0.0, clock_skew)) if clock_skew > 0 else 0.0 for _ in range(engine.parallelism)]
            self.phase = {i.id: offset[i.worker] for i in engine.insts}
        else:
            self.phase = {i.id: float(rng.uniform(0.0, interval)) for i in engine.insts}
        self.stable: dict[int, list[Any]] = {i: [ck] for i, ck in self.initial.items()}
        self.forced = 0
        self.discarded = 0
        self._judged: set[int] = set()

    def _judge(self, ck: Any, valid: bool) -> None:
        if ck.index == 0 or id(ck) in self._judged:
            return
        self._judged.add(id(ck))
        self.judged += 1
        self.invalid += not valid

    def start(self, epoch: int) -> None:
        for inst in self.engine.insts:
            self.env.process(self._timer(inst, epoch))
        self.env.process(self._collect(epoch))

    def _timer(self, inst: Any, epoch: int) -> Generator:
        env, iv = self.env, self.interval
        phase = self.phase[inst.id]
        k = int(np.floor((env.now - phase) / iv)) + 1  # the next tick on this instance's clock
        while True:
            yield env.timeout(max(0.0, phase + k * iv - env.now))
            if self.engine.epoch != epoch:
                return
            self.engine.control(inst, "checkpoint")
            k += 1

    def on_control(self, inst: Any, msg: Any) -> Generator:
        yield from self.take(inst, forced=False)

    def take(self, inst: Any, forced: bool) -> Generator:
        start = self.env.now
        ck = yield from self.engine.checkpoint(inst, self._durable, forced=forced, extra=self.extra(inst))
        ck.start = start
        self.taken.append(ck)

    def extra(self, inst: Any) -> Any:
        return None

    def _durable(self, ck: Any) -> None:
        self.engine.bytes_protocol += METADATA_HEADER + METADATA_PER_CHANNEL * (len(ck.sent) + len(ck.recv))
        self.stable[ck.inst].append(ck)
        self.checkpoint_seconds.append(ck.done - ck.start)

    # recovery line --------------------------------------------------------------------------
    def _line(self, judge: bool) -> tuple[dict[int, Any], Any]:
        metas = {i: [meta(ck) for ck in cks] for i, cks in self.stable.items()}
        rl = recovery_line(metas, self.engine.channel_ends, count_invalid=judge)
        line = {i: next(ck for ck in cks if ck.index == rl.line[i]) for i, cks in self.stable.items()}
        return line, rl

    def _collect(self, epoch: int) -> Generator:
        while True:
            yield self.env.timeout(self.interval)
            if self.engine.epoch != epoch:
                return
            self.gc()

    def gc(self) -> None:
        """Drop what the current line makes useless; judge the dropped checkpoints."""
        metas = {i: [meta(ck) for ck in cks] for i, cks in self.stable.items()}
        graph = checkpoint_graph(metas, self.engine.channel_ends)
        indices = {i: [m.index for m in ms] for i, ms in metas.items()}
        line = rollback_propagation(graph, {i: idx[-1] for i, idx in indices.items()}, indices)
        for i, cks in self.stable.items():
            old = [ck for ck in cks if ck.index < line[i]]
            for ck in old:
                if ck.index == 0 or id(ck) in self._judged:
                    continue
                lowered = dict(line)
                lowered[i] = ck.index
                self._judge(ck, rollback_propagation(graph, lowered, indices)[i] == ck.index)
            self.stable[i] = [ck for ck in cks if ck.index >= line[i]]
        self._truncate_logs({i: next(ck for ck in cks if ck.index == line[i]) for i, cks in self.stable.items()})

    def _truncate_logs(self, line: dict[int, Any]) -> None:
        for ch, (_src, dst) in self.engine.channel_ends.items():
            store = self.engine.durable.get(ch)
            if store:
                upto = line[dst].recv.get(ch, 0)
                for q in [q for q in store if q <= upto]:
                    del store[q]

    def recovery_line(self) -> tuple[dict[int, Any], dict[int, list], float]:
        line, rl = self._line(judge=True)
        for i, cks in self.stable.items():
            for ck in cks:
                self._judge(ck, (i, ck.index) not in rl.invalid)
        self.discarded += sum(1 for i, x in rl.invalid if x > rl.line[i])
        # judged now: keep only the line's checkpoints and what may still serve a later line
        replay: dict[int, list] = {}
        durable = self.engine.durable
        for ch, (src, dst) in self.engine.channel_ends.items():
            lo, hi = line[dst].recv.get(ch, 0), line[src].sent.get(ch, 0)
            if hi > lo:
                store = durable[ch]
                replay[ch] = [store[q] for q in range(lo + 1, hi + 1)]
        seconds = self.engine.costs.recovery_line_per_checkpoint * sum(len(c) for c in self.stable.values())
        return line, replay, seconds

    def after_recovery(self, line: dict[int, Any]) -> None:
        for i in self.stable:
            self.stable[i] = [line[i]]  # everything else was judged at the failure
        for ch, (src, _dst) in self.engine.channel_ends.items():
            store = self.engine.durable.get(ch)
            if store:
                hi = line[src].sent.get(ch, 0)
                for q in [q for q in store if q > hi]:
                    del store[q]  # sent after the sender's restored checkpoint: it sends them again
        self._truncate_logs(line)

    def finish(self) -> None:
        """Judge the checkpoints below the final line (those above it may still become valid)."""
        self.gc()
