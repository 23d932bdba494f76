"""Checkpointing protocols behind one interface (:class:`~.base.Protocol`): the thesis's three."""

from driftjoin.checkpointing.protocols.base import NoCheckpoints, Protocol
from driftjoin.checkpointing.protocols.cic import CommunicationInduced
from driftjoin.checkpointing.protocols.coor import Coordinated
from driftjoin.checkpointing.protocols.unc import Uncoordinated

PROTOCOLS: dict[str, type[Protocol]] = {
    "coor": Coordinated,
    "unc": Uncoordinated,
    "cic": CommunicationInduced,
    "none": NoCheckpoints,
}

__all__ = ["PROTOCOLS", "Protocol", "Coordinated", "Uncoordinated", "CommunicationInduced", "NoCheckpoints"]
