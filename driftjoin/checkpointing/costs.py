"""The testbed's cost model: what each simulated action costs, in seconds of simulated time.

The simulator runs the operators' real code on real records, but time is simulated: every
action advances the clock by a cost from this model, so a run is deterministic given its seed
and the protocols are compared on the same footing (the thesis's testbed isolates the protocols
the same way, section 3.4). The costs are *measured on this machine* by
``python -m driftjoin.checkpointing.calibrate`` (it times the operators' own ``process`` on
generated records, pickling, a loopback TCP socket and file writes with fsync); the defaults
below are the values it printed here (docs/checkpointing.md states them and the command).

- ``process[kind]``: CPU per record for an operator kind (measured on the operator code).
- ``ser_per_msg`` + ``ser_per_byte``: pickling one message at the sender (the receiver pays the
  same to unpickle); protocol bytes piggybacked on a message (CIC) are serialised too, which
  is how CIC's message overhead turns into lost throughput (thesis 3.7.2).
- ``net_per_msg`` + ``net_per_byte``: the wire: a per-message latency (one send on a loopback
  TCP socket) and the bandwidth (bytes/s on the same socket). The wire of a channel is busy
  ``net_per_byte * bytes`` per message (serial), the latency overlaps.
- ``snapshot_per_byte``: CPU to copy and serialise operator state when a checkpoint is taken
  (the operator is blocked meanwhile).
- ``upload_per_byte`` + ``upload_latency``: writing a checkpoint (state and logged messages) to
  durable storage; asynchronous, the operator goes on processing.
- ``log_per_msg`` + ``log_per_byte``: keeping a sent message in the in-flight log (UNC, CIC).
- ``download_per_byte``: reading state and logs back at restart; ``fetch_latency``: getting one
  stored object (a checkpoint's state, a channel's log) from the storage service: a file read
  plus a request's round trip on the loopback socket; ``restore_per_byte``:
  unpickling state back into an operator; ``sort_per_msg``: sorting a log's messages by
  sequence number, per message and ``log2`` of their count (the restart model:
  :func:`driftjoin.checkpointing.engine.restart_seconds`).
- ``recovery_line_per_checkpoint``: the coordinator's rollback-propagation time per checkpoint
  in the graph (measured on :mod:`driftjoin.checkpointing.recovery`).
- ``failure_detection``: from the crash to its detection (a heartbeat timeout). The thesis's
  restart and recovery times start at detection, so they exclude it; the simulated run includes
  it in the timeline.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

#: Per-record CPU (seconds) of each operator kind, measured by the calibration script.
DEFAULT_PROCESS: dict[str, float] = {
    "source": 0.09e-06,
    "map": 0.57e-06,
    "filter": 0.13e-06,
    "join": 0.51e-06,
    "window_join": 4.3e-06,
    "window_agg": 2.3e-06,
    "reach_join": 3.0e-06,
    "select": 0.26e-06,
    "project": 0.28e-06,
    "sink": 0.18e-06,
    "s3j_route": 82e-06,
    "s3j_formulate": 1316e-06,
    "s3j_compute": 721e-06,
}


@dataclass(frozen=True)
class CostModel:
    """Simulated costs in seconds (per record, per message, per byte)."""

    process: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_PROCESS))
    ser_per_msg: float = 1.65e-06
    ser_per_byte: float = 8.3e-09
    net_per_msg: float = 58e-06
    net_per_byte: float = 1.17e-09
    snapshot_per_byte: float = 42.7e-09
    upload_per_byte: float = 1.79e-09
    upload_latency: float = 10.4e-03
    log_per_msg: float = 0.28e-06
    log_per_byte: float = 0.012e-09
    download_per_byte: float = 0.51e-09
    fetch_latency: float = 30e-06
    restore_per_byte: float = 10e-09
    sort_per_msg: float = 0.1e-06
    recovery_line_per_checkpoint: float = 1.7e-06
    failure_detection: float = 0.0

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            values = value.values() if isinstance(value, dict) else [value]
            if any(v < 0 for v in values):
                raise ValueError(f"cost {name} must be >= 0, got {value}")

    def cpu(self, kind: str) -> float:
        try:
            return self.process[kind]
        except KeyError:
            raise ValueError(f"no processing cost for operator kind {kind!r}: add it to CostModel.process") from None

    def message(self, nbytes: int) -> float:
        """Sender-side (or receiver-side) serialisation time of one message."""
        return self.ser_per_msg + self.ser_per_byte * nbytes

    def scaled(self, factor: float) -> "CostModel":
        """Every CPU cost multiplied by ``factor`` (a slower or faster machine)."""
        return replace(
            self,
            process={k: v * factor for k, v in self.process.items()},
            ser_per_msg=self.ser_per_msg * factor,
            ser_per_byte=self.ser_per_byte * factor,
            snapshot_per_byte=self.snapshot_per_byte * factor,
            log_per_msg=self.log_per_msg * factor,
            log_per_byte=self.log_per_byte * factor,
        )

    def to_json(self, path: str | Path, measured: dict | None = None) -> None:
        """Write the costs (and ``measured``: when and under what load they were measured)."""
        Path(path).write_text(json.dumps(asdict(self) | ({"measured": measured} if measured else {}), indent=2))

    @staticmethod
    def from_json(path: str | Path) -> "CostModel":
        return CostModel.read(path)[0]

    @staticmethod
    def read(path: str | Path) -> tuple["CostModel", dict]:
        """The costs of a file :meth:`to_json` wrote, and its ``measured`` note ({} if none).
        Costs the file lacks (an older calibration) keep their defaults."""
        data = json.loads(Path(path).read_text())
        measured = data.pop("measured", {})
        process = dict(DEFAULT_PROCESS)
        process.update(data.pop("process", {}))
        return CostModel(process=process, **data), measured
