"""Checkpointing protocols behind one interface (:class:`~.base.Protocol`): the thesis's three
(``coor``, ``unc``, ``cic``: HMNR with full vectors on every message, as the thesis describes
it), CIC with its piggyback packed or sent as deltas (``cic-packed``, ``cic-delta``: same
protocol, fewer bytes), and the checkpoint-free reference (``none``)."""

from driftjoin.checkpointing.protocols.base import NoCheckpoints, Protocol
from driftjoin.checkpointing.protocols.cic import CommunicationInduced, CommunicationInducedDelta, CommunicationInducedPacked
from driftjoin.checkpointing.protocols.coor import Coordinated
from driftjoin.checkpointing.protocols.unc import Uncoordinated

PROTOCOLS: dict[str, type[Protocol]] = {
    "coor": Coordinated,
    "unc": Uncoordinated,
    "cic": CommunicationInduced,
    "cic-packed": CommunicationInducedPacked,
    "cic-delta": CommunicationInducedDelta,
    "none": NoCheckpoints,
}

__all__ = ["PROTOCOLS", "Protocol", "Coordinated", "Uncoordinated", "CommunicationInduced", "CommunicationInducedDelta",
           "CommunicationInducedPacked", "NoCheckpoints"]
