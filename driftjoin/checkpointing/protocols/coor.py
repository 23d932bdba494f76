"""COOR: coordinated aligned checkpointing (thesis 3.3.1; Chandy-Lamport as adapted by Flink).

- Every ``interval`` the coordinator starts round r: it triggers the sources, each of which
  takes a checkpoint (its offset), sends a marker on every outgoing channel and goes on.
- An operator that receives the round's marker on a channel blocks that channel and buffers
  its traffic; when it has the marker from all its input channels it takes its checkpoint,
  unblocks its inputs (the buffered messages come first, in order) and forwards the marker on
  every outgoing channel.
- When every instance's checkpoint is durable (uploaded and acknowledged to the coordinator),
  round r is complete: it is the recovery line. The next round starts ``interval`` after the
  previous one started, or when it completes if it took longer (one round at a time).

The aligned checkpoints form a consistent cut with no message in flight (each channel's
marker separates what the sender sent before its checkpoint from what follows), so recovery
restores round r everywhere, rewinds the sources and replays from them: nothing is logged.
The checkpoint time reported is the round's duration, trigger to last acknowledgement, as in
the thesis (Figure 3.8). Cyclic dataflows deadlock (an operator on the cycle waits for a marker
that must pass through itself) and are refused before the run.
"""

from __future__ import annotations

from typing import Any, Generator

from driftjoin.checkpointing.protocols.base import Protocol

MARKER_BYTES = 16   # round number + kind
TRIGGER_BYTES = 16  # coordinator -> source
ACK_BYTES = 32      # instance -> coordinator: round, instance, location of the snapshot


class Coordinated(Protocol):
    name = "coor"
    supports_cycles = False

    def __init__(self, engine: Any, interval: float, seed: int) -> None:
        super().__init__(engine, interval, seed)
        self.completed = dict(self.initial)
        self.round = 0
        self.pending: dict[int, dict[int, Any]] = {}
        self.round_start: dict[int, float] = {}
        self.round_done = None
        self.seen: dict[int, int] = {}
        self.next_at = interval

    def start(self, epoch: int) -> None:
        self.env.process(self._coordinator(epoch))

    def _coordinator(self, epoch: int) -> Generator:
        env, engine = self.env, self.engine
        while True:
            yield env.timeout(max(0.0, self.next_at - env.now))
            if engine.epoch != epoch:
                return
            self.round += 1
            r = self.round
            self.pending[r] = {}
            self.round_start[r] = env.now
            self.round_done = env.event()
            for inst in engine.insts:
                if inst.source:
                    engine.control(inst, ("trigger", r), TRIGGER_BYTES)
            yield self.round_done
            if engine.epoch != epoch:
                return
            self.next_at = self.round_start[r] + self.interval

    def on_control(self, inst: Any, msg: Any) -> Generator:
        _, r = msg.rec
        epoch = self.engine.epoch
        yield from self.engine.checkpoint(inst, self._durable, round_=r)
        if self.engine.epoch == epoch:
            self.engine.send_marker(inst, r, MARKER_BYTES)

    def on_marker(self, inst: Any, msg: Any) -> Generator:
        inst.blocked.add(msg.ch)
        n = self.seen.get(inst.id, 0) + 1
        if n < len(inst.in_channels):
            self.seen[inst.id] = n
            return
        self.seen[inst.id] = 0
        epoch = self.engine.epoch
        yield from self.engine.checkpoint(inst, self._durable, round_=msg.rec)
        if self.engine.epoch != epoch:
            return
        inst.unblock_all()
        self.engine.send_marker(inst, msg.rec, MARKER_BYTES)

    def _durable(self, ck: Any) -> None:
        self.engine.bytes_protocol += ACK_BYTES
        self.taken.append(ck)
        got = self.pending.get(ck.round)
        if got is None:
            return
        got[ck.inst] = ck
        if len(got) == len(self.engine.insts):
            self.completed = got
            self.checkpoint_seconds.append(self.env.now - self.round_start[ck.round])
            for r in [r for r in self.pending if r <= ck.round]:
                del self.pending[r]
            self.round_done.succeed()

    def recovery_line(self) -> tuple[dict[int, Any], dict[int, list], float]:
        return dict(self.completed), {}, 0.0

    def after_recovery(self, line: dict[int, Any]) -> None:
        self.pending.clear()
        self.seen.clear()
        self.next_at = self.env.now + self.interval
