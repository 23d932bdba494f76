"""The interface every checkpointing protocol implements, and what they share.

The engine calls a protocol where the thesis's protocols act (section 3.3): ``start`` (timers,
the coordinator; again after each recovery), ``on_control`` (a timer tick or a coordinator
trigger reached the instance), ``on_marker`` (COOR), ``on_receive`` before a data message is
delivered (CIC's forced checkpoints), ``piggyback`` on every send (CIC), and at a failure
``recovery_line`` (the checkpoint per instance to restore, the logged messages to re-send, and
the coordinator's computing time), ``after_recovery`` and ``replayed`` (each logged message as
it is re-sent: CIC with deltas encodes it afresh). ``logs_messages`` turns on the
in-flight log of every sent message (kept with the sender's next checkpoint). Statistics
(checkpoint times, invalid checkpoints) are kept here so the bench reads them the same way for
every protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generator

if TYPE_CHECKING:
    from driftjoin.checkpointing.engine import Checkpoint, Engine, Inst, Msg


def nothing() -> Generator:
    """An empty simpy sub-process (``yield from nothing()``)."""
    yield from ()


class Protocol:
    name = "none"
    logs_messages = False
    piggybacks = False
    intercepts_receive = False
    supports_cycles = True
    meta_bytes = 0
    #: whether checkpoints follow timers whose clocks are a setting (``clocks``, ``clock_skew``)
    has_clocks = False

    def __init__(self, engine: "Engine", interval: float, seed: int) -> None:
        from driftjoin.checkpointing.engine import Checkpoint

        self.engine, self.env, self.interval, self.seed = engine, engine.env, interval, seed
        #: every instance's initial state: index 0 of every recovery line
        self.initial: dict[int, Checkpoint] = {
            i.id: Checkpoint(i.id, 0, 0.0, i.op.snapshot(), {}, {}, i.op.state_bytes, done=0.0)
            for i in engine.insts
        }
        self.taken: list[Checkpoint] = []
        self.checkpoint_seconds: list[float] = []
        self.invalid = 0
        self.judged = 0

    # hooks ------------------------------------------------------------------------------------
    def start(self, epoch: int) -> None:
        pass

    def on_control(self, inst: "Inst", msg: "Msg") -> Generator:
        yield from ()

    def on_marker(self, inst: "Inst", msg: "Msg") -> Generator:
        raise RuntimeError(f"protocol {self.name} got a marker")

    def on_receive(self, inst: "Inst", msg: "Msg") -> Generator:
        yield from ()

    def piggyback(self, inst: "Inst", ch: Any) -> tuple[Any, int]:
        return None, 0

    def piggyback_bytes(self, inst: "Inst", sends: list) -> int:
        """The bytes ``piggyback`` will add to ``sends`` (``(channel, record, size)`` each), before
        they are sent: the sender's CPU pays for serialising them."""
        return len(sends) * self.meta_bytes

    def replayed(self, ch: int, msg: "Msg") -> "Msg":
        """A logged message as it is re-sent at a recovery (after ``after_recovery``)."""
        return msg

    def recovery_line(self) -> tuple[dict[int, "Checkpoint"], dict[int, list["Msg"]], float]:
        return dict(self.initial), {}, 0.0

    def after_recovery(self, line: dict[int, "Checkpoint"]) -> None:
        pass

    def finish(self) -> None:
        """Called once at the end of a run (judge the checkpoints still undecided)."""


class NoCheckpoints(Protocol):
    """Checkpoint-free execution: the reference the thesis normalises MST by (Figure 3.7).

    A failure restarts the query from its beginning (the initial states, sources at offset 0).
    """

    name = "none"
