"""Ground-truth checks of recovery lines from the engine's message trace, not the protocols' metadata.

The engine records for every message (channel, seq) the checkpoint interval of its sender at
the send (x: sent after checkpoint x) and of its receiver at the delivery (y: delivered after
checkpoint y, before y + 1). A line L is consistent iff no message is an orphan (delivered
before the receiver's L_j, i.e. y < L_j, but sent after the sender's L_i, i.e. x >= L_i); the
messages to replay are those sent before L_i and not delivered before L_j.
"""

from __future__ import annotations


def orphans(tr) -> list[tuple[int, int]]:
    bad = []
    for key, y in tr.recvs.items():
        i, j = tr.channels[key[0]]
        x = tr.sends[key]  # a delivered message was sent: a missing send is a bug too (KeyError)
        if y < tr.line[j] and x >= tr.line[i]:
            bad.append(key)
    return bad


def in_flight(tr) -> dict[int, list[int]]:
    """Per channel, the messages the line needs re-sent (sent before L_i, not delivered before L_j)."""
    out: dict[int, list[int]] = {}
    for (ch, seq), x in tr.sends.items():
        i, j = tr.channels[ch]
        y = tr.recvs.get((ch, seq))
        if x < tr.line[i] and not (y is not None and y < tr.line[j]):
            out.setdefault(ch, []).append(seq)
    return {ch: sorted(s) for ch, s in out.items()}


def max_consistent_line(tr) -> dict[int, int]:
    """The largest consistent line among the durable checkpoints, by fixpoint on the orphan rule."""
    line = {i: max(idx) for i, idx in tr.available.items()}
    changed = True
    while changed:
        changed = False
        for key, y in tr.recvs.items():
            i, j = tr.channels[key[0]]
            if y < line[j] and tr.sends[key] >= line[i]:
                line[j] = max(x for x in tr.available[j] if x <= y)
                changed = True
    return line
