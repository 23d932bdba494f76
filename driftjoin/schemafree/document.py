"""The document model: schema-free JSON objects as sets of attribute-value pairs.

The paper (Section I-A) treats a document as an unordered set of attribute-value
pairs ``{a1: v1, a2: v2, ...}``. JSON objects are richer than that, so this module fixes
how they map onto the model:

* **Nesting.** Nested objects are flattened into dotted attribute paths:
  ``{"user": {"id": 7}}`` has the attribute ``user.id``. A ``.`` or ``\\`` inside a key
  is escaped with a backslash, so ``{"a.b": 1}`` (attribute ``a\\.b``) and
  ``{"a": {"b": 1}}`` (attribute ``a.b``) never collide. A NUL character is escaped as
  ``\\0``, so no attribute of a document starts with NUL.
* **Arrays.** An array is one atomic value, compared as its canonical JSON (order
  matters, nested objects inside it keep their structure): ``[1, 2]`` equals ``[1, 2]``
  but not ``[2, 1]``. Arrays are not unnested because a natural join needs a single
  value per attribute to decide "same value or conflict".
* **Nulls.** An attribute whose value is ``null`` is dropped, i.e. it is *absent*: it
  neither joins nor conflicts. Empty objects likewise contribute no attribute. Nulls
  *inside* arrays are part of the array value and are kept.
* **Scalars.** Values are compared by their canonical JSON text. ``true`` differs from
  ``1`` and ``"1"`` differs from ``1``; an integral float equals the integer
  (``1.0 == 1``) because JSON has a single number type. NaN and infinities are rejected
  since they are not JSON.

Two documents *join* when they share at least one attribute and agree on the value of
every attribute they share (equivalently: they share at least one attribute-value pair
and have no conflicting value).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Attribute = str
Value = str  # canonical JSON text of the value
AVPair = tuple[Attribute, Value]
RawDocument = Mapping[str, Any] | str | bytes


def _escape_key(key: str) -> str:
    # NUL is escaped too: attribute names starting with NUL are reserved for the
    # synthetic attributes of attribute expansion (driftjoin.schemafree.expansion).
    return key.replace("\\", "\\\\").replace(".", "\\.").replace("\x00", "\\0")


def _normalise(value: Any) -> Any:
    """Return ``value`` with integral floats turned into ints (recursively)."""
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError(f"{value!r} is not a JSON number")
        return int(value) if value.is_integer() else value
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _normalise(v) for k, v in value.items()}
    raise TypeError(f"unsupported JSON value of type {type(value).__name__}")


def canonical_value(value: Any) -> Value:
    """Canonical JSON text of an atomic value (scalar or array)."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def flatten(raw: RawDocument) -> dict[Attribute, Value]:
    """Flatten a JSON object into ``{dotted attribute path: canonical value}``.

    Raises ``ValueError`` if ``raw`` is not a JSON object.
    """
    obj = json.loads(raw) if isinstance(raw, (str, bytes)) else raw
    if not isinstance(obj, Mapping):
        raise ValueError("a document must be a JSON object")
    out: dict[Attribute, Value] = {}
    stack: list[tuple[str, Mapping[str, Any]]] = [("", obj)]
    while stack:
        prefix, node = stack.pop()
        for key, value in node.items():
            path = prefix + _escape_key(str(key))
            if value is None:
                continue
            if isinstance(value, Mapping):
                stack.append((path + ".", value))
            else:
                out[path] = canonical_value(value)
    return dict(sorted(out.items()))


def decode_value(value: Value) -> Any:
    """Python value of a canonical JSON value."""
    return json.loads(value)


@dataclass(frozen=True, slots=True)
class Document:
    """A stream element: id, flat attribute-value pairs and an optional event time.

    ``doc_id`` must be unique within the stream (the single-process driver uses the
    position in the input). ``avps`` maps attribute to canonical value.
    """

    doc_id: int
    avps: Mapping[Attribute, Value]
    time: float | None = None


def make_document(raw: RawDocument, doc_id: int, time_attribute: str | None = None) -> Document:
    """Build a :class:`Document`, optionally taking its event time from an attribute.

    The time attribute (a flattened path) is removed from the attribute-value pairs:
    it is window metadata, and keeping it would make documents of different instants
    conflict and never join.
    """
    avps = flatten(raw)
    time: float | None = None
    if time_attribute is not None:
        if time_attribute not in avps:
            raise ValueError(f"document {doc_id} has no time attribute {time_attribute!r}")
        stamp = decode_value(avps.pop(time_attribute))
        if isinstance(stamp, bool) or not isinstance(stamp, (int, float)):
            raise ValueError(f"time attribute of document {doc_id} is not a number")
        time = float(stamp)
    return Document(doc_id, avps, time)


def joinable(a: Mapping[Attribute, Value], b: Mapping[Attribute, Value]) -> bool:
    """Natural-join predicate: shared attributes exist and all agree."""
    if len(a) > len(b):
        a, b = b, a
    shared = False
    for attr, value in a.items():
        other = b.get(attr)
        if other is not None:
            if other != value:
                return False
            shared = True
    return shared


def merged_document(a: Document, b: Document) -> dict[Attribute, Any]:
    """The joined document: union of both flat documents with decoded values."""
    merged = {**a.avps, **b.avps}
    return {attr: decode_value(merged[attr]) for attr in sorted(merged)}
