"""Person records with known duplicates: the input of entity resolution (``link``, ``entities``).

Every record belongs to an *entity* (a person). The first record of an entity is its *original*
(its fields are the person's true values); the others are *duplicates*: copies of the true values
with the errors real registers have, in the manner of FEBRL's generator (Christen 2005):

- typos in a name or the address (an inserted, deleted, substituted or transposed letter);
- given name and surname swapped;
- missing fields (given name, dob, address, postcode set to null);
- a date of birth with day and month swapped, or a few days off;
- a house number changed, an address word dropped, a postcode digit changed.

Each duplicate gets 1 to ``max_errors`` such modifications (geometric, mean about 1.6), so some
duplicates are caught by the name alone and others only through the date of birth, the address
or a token rule: the mix that makes a multi-rule set necessary.

Skew (what makes a blocking key hot): postcodes are drawn from a Zipf distribution over a
fixed vocabulary (``zipf`` is the exponent: weight of the k-th value ``1 / k^zipf``; at the
default 1.1 over 5,000 postcodes the first holds about 15% of the records), surnames and given
names from Zipf distributions of exponent ``name_zipf`` (default 0.8: the most common surname
about 3% of the records, the most common given name about 6%). The vocabularies are synthetic (syllables drawn with a fixed
seed), so they are the same for every ``seed`` and need no data files.

Determinism (what a replayable streaming source needs): records are made in chunks of
:data:`CHUNK`; chunk ``c`` of stream ``s`` is a pure function of ``(seed, s, c)`` and of the
entities born in chunks ``c - spread .. c`` of every stream (each a pure function of its own
``(seed, stream, chunk)``), so any index range is regenerated identically after a crash.
Duplicates refer to entities born in the same or the ``spread`` previous chunks of any stream:
at ``rate`` records per second per stream a duplicate follows its original by at most about
``(spread + 1) * CHUNK / rate`` seconds (about 2 s at the defaults and 1,000 records/s), so an
interval join over a minute (``within="1 minute"``) can meet every duplicate.

Ids: record ``k`` of stream ``s`` has id ``(s << 40) | k`` (stream 0: ``k``), unique across
streams; ``entity`` is the id of the entity's original record (the ground truth).

Example::

    >>> batch = person_records(seed=1, stream=0, start=0, count=5)
    >>> sorted(batch)
    ['address', 'dob', 'entity', 'given_name', 'id', 'postcode', 'surname']
    >>> batch["id"].tolist()
    [0, 1, 2, 3, 4]
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Records per chunk (the unit of determinism).
CHUNK = 1024
#: Bits of a record's index in its id (stream ``s`` record ``k`` has id ``(s << ID_BITS) | k``).
ID_BITS = 40
#: Seed of the synthetic vocabularies (fixed: the same names for every ``seed``).
VOCABULARY_SEED = 20_240_531

_ONSETS = ("b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z", "br", "ch", "cl",
           "dr", "fr", "gr", "kr", "pl", "sh", "st", "th", "tr")
_VOWELS = ("a", "e", "i", "o", "u", "ai", "ea", "ie", "ou", "y")
_CODAS = ("", "", "", "n", "r", "s", "l", "m", "t", "ck", "nd", "rt", "ll", "ss")
_STREET_TYPES = ("street", "road", "avenue", "place", "crescent", "drive", "lane", "court")
_LETTERS = "abcdefghijklmnopqrstuvwxyz"


@dataclass(frozen=True)
class PersonOptions:
    """How records are generated (the module docstring).

    ``dup_rate``: share of records that are duplicates of an earlier-born entity; ``spread``:
    chunks back a duplicate's entity may be born; ``max_errors``: most modifications per
    duplicate; ``zipf``: skew of postcodes, ``name_zipf`` of surnames and given names;
    ``postcodes``, ``surnames``, ``given_names``, ``streets``: vocabulary sizes;
    ``house_numbers``: house numbers run from 1 to it; ``streams``: the streams whose entities
    duplicates are drawn from.
    """

    dup_rate: float = 0.3
    spread: int = 1
    max_errors: int = 3
    zipf: float = 1.1
    name_zipf: float = 0.8
    postcodes: int = 5000
    surnames: int = 20000
    given_names: int = 2000
    streets: int = 3000
    house_numbers: int = 299
    streams: int = 2

    def __post_init__(self) -> None:
        if not 0.0 <= self.dup_rate < 1.0:
            raise ValueError(f"dup_rate must be in [0, 1), got {self.dup_rate!r}")
        if self.spread < 0 or self.max_errors < 1 or self.zipf < 0 or self.name_zipf < 0:
            raise ValueError("spread must be >= 0, max_errors >= 1, zipf and name_zipf >= 0")
        for name in ("postcodes", "surnames", "given_names", "streets", "house_numbers", "streams"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")


def _word(rng: np.random.Generator, syllables: int) -> str:
    parts = []
    for _ in range(syllables):
        parts.append(_ONSETS[rng.integers(len(_ONSETS))] + _VOWELS[rng.integers(len(_VOWELS))]
                     + _CODAS[rng.integers(len(_CODAS))])
    return "".join(parts)


@lru_cache(maxsize=16)
def vocabulary(kind: str, size: int) -> tuple[str, ...]:
    """``size`` distinct synthetic words of ``kind`` (``"surname"``, ``"given"``, ``"street"``),
    the same on every machine."""
    rng = np.random.default_rng([VOCABULARY_SEED, {"surname": 1, "given": 2, "street": 3}[kind]])
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < size:
        w = _word(rng, 2 + int(rng.integers(2)) if kind != "given" else 2)
        if kind == "given" and rng.random() < 0.3:
            w = _word(rng, 1) + _word(rng, 1)
        if w not in seen:
            seen.add(w)
            out.append(w)
    return tuple(out)


@lru_cache(maxsize=16)
def _zipf_cdf(size: int, exponent: float) -> np.ndarray:
    w = 1.0 / np.arange(1, size + 1, dtype=np.float64) ** exponent
    c = np.cumsum(w)
    return c / c[-1]


def zipf_draw(rng: np.random.Generator, size: int, exponent: float, count: int) -> np.ndarray:
    """``count`` ranks in ``[0, size)`` with weight ``1 / (rank + 1)^exponent``."""
    return np.minimum(np.searchsorted(_zipf_cdf(size, exponent), rng.random(count), side="right"), size - 1)


def postcode_text(rank: np.ndarray) -> list[str]:
    """The postcode of each rank: a 4-digit code, scattered so that neighbours are not similar."""
    return [f"{(r * 7919 + 1000) % 9000 + 1000:04d}" for r in np.asarray(rank).tolist()]


@dataclass(frozen=True)
class _Entities:
    """The entities born in one chunk of one stream: their positions in the chunk and true values."""

    position: np.ndarray
    given: list[str]
    surname: list[str]
    dob: np.ndarray  # days since 1970-01-01
    number: np.ndarray
    street: list[str]
    postcode: list[str]


def _rng(seed: int, stream: int, chunk: int, part: int) -> np.random.Generator:
    return np.random.default_rng([seed & 0xFFFFFFFF, stream, chunk, part])


@lru_cache(maxsize=64)
def _born(seed: int, stream: int, chunk: int, opts: PersonOptions) -> _Entities:
    """Which positions of chunk ``chunk`` are originals (born entities) and their true values."""
    rng = _rng(seed, stream, chunk, 0)
    position = np.nonzero(rng.random(CHUNK) >= opts.dup_rate)[0]
    if len(position) == 0:  # every chunk has an entity to copy from
        position = np.zeros(1, np.int64)
    n = len(position)
    given_v, surname_v, street_v = (vocabulary("given", opts.given_names), vocabulary("surname", opts.surnames),
                                    vocabulary("street", opts.streets))
    given = [given_v[i] for i in zipf_draw(rng, opts.given_names, opts.name_zipf, n).tolist()]
    surname = [surname_v[i] for i in zipf_draw(rng, opts.surnames, opts.name_zipf, n).tolist()]
    dob = rng.integers(-14600, 14600, n)  # 1930 to 2009
    number = rng.integers(1, opts.house_numbers + 1, n)
    street = [f"{street_v[i]} {_STREET_TYPES[t]}" for i, t in zip(rng.integers(opts.streets, size=n).tolist(),
                                                                     rng.integers(len(_STREET_TYPES), size=n).tolist())]
    postcode = postcode_text(zipf_draw(rng, opts.postcodes, opts.zipf, n))
    return _Entities(position, given, surname, dob, number, street, postcode)


def _typo(rng: np.random.Generator, text: str) -> str:
    """One insertion, deletion, substitution or transposition of a letter."""
    if not text:
        return _LETTERS[rng.integers(26)]
    i = int(rng.integers(len(text)))
    kind = int(rng.integers(4))
    letter = _LETTERS[rng.integers(26)]
    if kind == 0:
        return text[:i] + letter + text[i:]
    if kind == 1 and len(text) > 1:
        return text[:i] + text[i + 1:]
    if kind == 3 and i + 1 < len(text):
        return text[:i] + text[i + 1] + text[i] + text[i + 2:]
    return text[:i] + letter + text[i + 1:]


#: The modifications of a duplicate (module docstring), drawn with these weights.
ERRORS = ("given_typo", "surname_typo", "swap_names", "missing_given", "missing_dob", "dob_swap", "dob_shift",
          "address_typo", "address_number", "address_word", "missing_address", "postcode_typo", "missing_postcode")
_ERROR_WEIGHTS = np.array([10, 12, 4, 3, 3, 3, 4, 8, 4, 3, 2, 4, 2], dtype=np.float64)
_ERROR_WEIGHTS /= _ERROR_WEIGHTS.sum()


def _days_swap(days: int) -> int:
    d = np.datetime64(int(days), "D").astype(object)
    if d.day > 12 or d.day == d.month:
        return days + 1
    return int((np.datetime64(d.replace(day=d.month, month=d.day)) - np.datetime64("1970-01-01")).astype(np.int64))


def person_records(seed: int, stream: int, start: int, count: int, opts: PersonOptions | None = None) -> dict[str, object]:
    """Records ``start <= k < start + count`` of stream ``stream`` as columns.

    Returns a dict: ``id`` and ``entity`` (int64 arrays), ``given_name``, ``surname``,
    ``address``, ``postcode`` (lists of ``str`` or None), ``dob`` (a ``datetime64[D]`` array
    with ``NaT`` for a missing date).
    """
    opts = opts or PersonOptions()
    ids, entity, given, surname, dob, address, postcode = [], [], [], [], [], [], []
    k = start
    end = start + count
    while k < end:
        chunk = k // CHUNK
        lo, hi = k - chunk * CHUNK, min(end - chunk * CHUNK, CHUNK)
        cols = _chunk(seed, stream, chunk, opts)
        ids.append(np.arange(chunk * CHUNK + lo, chunk * CHUNK + hi, dtype=np.int64) | (np.int64(stream) << ID_BITS))
        entity.append(cols[0][lo:hi])
        for out, col in zip((given, surname, dob, address, postcode), cols[1:]):
            out.append(col[lo:hi])
        k = chunk * CHUNK + hi
    cat = (lambda parts: [x for p in parts for x in p])
    return {"id": np.concatenate(ids) if ids else np.zeros(0, np.int64),
            "entity": np.concatenate(entity) if entity else np.zeros(0, np.int64),
            "given_name": cat(given), "surname": cat(surname),
            "dob": np.concatenate(dob) if dob else np.zeros(0, "datetime64[D]"),
            "address": cat(address), "postcode": cat(postcode)}


@lru_cache(maxsize=8)
def _chunk(seed: int, stream: int, chunk: int, opts: PersonOptions) -> tuple:
    """All records of one chunk: (entity, given, surname, dob, address, postcode)."""
    born = _born(seed, stream, chunk, opts)
    rng = _rng(seed, stream, chunk, 1)
    entity = np.zeros(CHUNK, np.int64)
    is_orig = np.zeros(CHUNK, bool)
    is_orig[born.position] = True
    base = (np.int64(stream) << ID_BITS) + chunk * CHUNK
    # sources of duplicates: entities born in chunks chunk - spread .. chunk of every stream
    pools = [(s, c, _born(seed, s, c, opts)) for c in range(max(0, chunk - opts.spread), chunk + 1)
             for s in range(opts.streams)]
    sizes = np.array([len(p[2].position) for p in pools], dtype=np.int64)
    given: list = [None] * CHUNK
    surname: list = [None] * CHUNK
    dob = np.full(CHUNK, np.datetime64("NaT"), "datetime64[D]")
    address: list = [None] * CHUNK
    postcode: list = [None] * CHUNK
    for j, pos in enumerate(born.position.tolist()):
        entity[pos] = base + pos
        given[pos], surname[pos] = born.given[j], born.surname[j]
        dob[pos] = np.datetime64(int(born.dob[j]), "D")
        address[pos] = f"{born.number[j]} {born.street[j]}"
        postcode[pos] = born.postcode[j]
    dups = np.nonzero(~is_orig)[0]
    if len(dups) == 0:
        return entity, given, surname, dob, address, postcode
    pick = rng.integers(int(sizes.sum()), size=len(dups))
    which = np.searchsorted(np.cumsum(sizes), pick, side="right")
    n_errors = np.minimum(rng.geometric(0.6, size=len(dups)), opts.max_errors)
    for pos, w, p, n in zip(dups.tolist(), which.tolist(), pick.tolist(), n_errors.tolist()):
        s, c, src = pools[w]
        j = p - (int(sizes[:w].sum()) if w else 0)
        entity[pos] = (np.int64(s) << ID_BITS) + c * CHUNK + int(src.position[j])
        g, sn, d = src.given[j], src.surname[j], int(src.dob[j])
        number, street, pc = int(src.number[j]), src.street[j], src.postcode[j]
        missing: set[str] = set()
        for err in rng.choice(len(ERRORS), size=n, p=_ERROR_WEIGHTS).tolist():
            e = ERRORS[err]
            if e == "given_typo":
                g = _typo(rng, g)
            elif e == "surname_typo":
                sn = _typo(rng, sn)
            elif e == "swap_names":
                g, sn = sn, g
            elif e == "dob_swap":
                d = _days_swap(d)
            elif e == "dob_shift":
                d += int(rng.integers(1, 4)) * (1 if rng.random() < 0.5 else -1)
            elif e == "address_typo":
                street = _typo(rng, street)
            elif e == "address_number":
                number = max(1, number + int(rng.integers(1, 20)))
            elif e == "address_word":
                street = street.split(" ")[0]
            elif e == "postcode_typo":
                i = int(rng.integers(4))
                pc = pc[:i] + str(int(rng.integers(10))) + pc[i + 1:]
            else:
                missing.add(e[len("missing_"):])
        given[pos] = None if "given" in missing else g
        surname[pos] = sn
        dob[pos] = np.datetime64("NaT") if "dob" in missing else np.datetime64(d, "D")
        address[pos] = None if "address" in missing else f"{number} {street}"
        postcode[pos] = None if "postcode" in missing else pc
    return entity, given, surname, dob, address, postcode
