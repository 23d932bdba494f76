"""The columns a job file declares, read without Spark, and the ``[join]`` columns checked against them.

``driftjoin run`` promises that a mistake in the job file costs no session start (about 7 s) and
is named as the file writes it. The column keys of ``[join]`` (``id_col``, ``value_col`` or
``vector_col``, ``time_col``, ``ingest_col``) can only name columns of the input, and a files or
Kafka source declares those columns in ``[source] schema`` (a generator's are fixed), so they are
checked here, before Spark: a name the schema lacks, an id that is neither an integer nor a
string, a compared column that the metric cannot compare (a string under ``angular``, an array of
numbers under ``levenshtein``), a time column of a type that holds no time. A ``[link]`` table's
match rules are checked the same way (:func:`check_link_columns`): every rule's columns against
the schema, every condition against its column's declared type, with the message ``link`` gives.

PySpark parses DDL only through a JVM (``StructType.fromDDL`` needs a running Spark), so
:func:`parse_schema` reads the top level of the schema itself: ``name type`` (or ``name: type``)
entries separated by commas, names optionally in backticks, types with their ``<...>`` and
``(...)`` parts. The types it knows (the primitive names, ``decimal(p, s)``, ``array<...>``) become
``pyspark.sql.types`` objects; any other type (a struct, a map) is kept as text and its column is
checked by name only, leaving the rest to the operator, which checks every column again when it
sees the input. Spark parses the schema when the job starts, so a schema this reader accepts
but Spark does not still fails before any query runs.

Example::

    >>> [(c.name, c.dtype.simpleString()) for c in parse_schema("id long, `my name` string, v array<double>")]
    [('id', 'bigint'), ('my name', 'string'), ('v', 'array<double>')]
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import types as T

from driftjoin.distance import METRICS
from driftjoin.spark.runtime.settings import SettingError

#: Primitive type names of Spark's DDL (case-insensitive) and their types.
_PRIMITIVES: dict[str, Callable[[], T.DataType]] = {
    "string": T.StringType, "varchar": T.StringType, "char": T.StringType,
    "boolean": T.BooleanType, "bool": T.BooleanType,
    "tinyint": T.ByteType, "byte": T.ByteType, "smallint": T.ShortType, "short": T.ShortType,
    "int": T.IntegerType, "integer": T.IntegerType, "bigint": T.LongType, "long": T.LongType,
    "float": T.FloatType, "real": T.FloatType, "double": T.DoubleType,
    "date": T.DateType, "timestamp": T.TimestampType, "timestamp_ltz": T.TimestampType,
    "timestamp_ntz": T.TimestampNTZType, "binary": T.BinaryType,
}
#: The generator source's columns (``driftjoin.spark.sources.generator.SCHEMA``).
GENERATOR_SCHEMA = "id long, vector array<double>, ts timestamp, stream int"
#: The person source's columns (``driftjoin.spark.sources.persons.SCHEMA``).
PERSONS_SCHEMA = ("id long, entity long, given_name string, surname string, dob date, address string, postcode string, "
                  "ts timestamp, stream int")


@dataclass(frozen=True)
class Column:
    """One declared column: its name, its type (None when this reader does not know the type) and the type as written."""

    name: str
    dtype: T.DataType | None
    text: str


def _split(text: str) -> list[str]:
    """``text`` split at the commas outside ``<...>``, ``(...)`` and backticks."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "`":
            quoted = not quoted
        elif not quoted and ch in "<(":
            depth += 1
        elif not quoted and ch in ">)":
            depth -= 1
        elif not quoted and depth == 0 and ch == ",":
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_type(text: str) -> T.DataType | None:
    """The type a DDL type string names, or None for a type this reader leaves to Spark."""
    t = text.strip().lower()
    base = re.sub(r"\s*\(.*\)$", "", t)  # varchar(50), char(3)
    if base in _PRIMITIVES:
        return _PRIMITIVES[base]()
    decimal = re.fullmatch(r"(decimal|dec|numeric)\s*(?:\(\s*(\d+)\s*(?:,\s*(\d+)\s*)?\))?", t)
    if decimal:
        return T.DecimalType(int(decimal.group(2) or 10), int(decimal.group(3) or 0))
    array = re.fullmatch(r"array\s*<(.*)>", t, flags=re.S)
    if array:
        element = parse_type(array.group(1))
        return None if element is None else T.ArrayType(element)
    return None


def parse_schema(ddl: str, name: str = "[source] schema") -> list[Column]:
    """The top-level columns of a DDL schema (``"id long, name string"``), in order."""
    columns = []
    for entry in _split(ddl):
        entry = re.sub(r"(?i)\s+(not\s+null|comment\s+'.*')\s*$", "", entry.strip())
        if not entry:
            raise SettingError(name, "has an empty entry (two commas, or a comma at the end)", ddl)
        m = re.fullmatch(r"(`[^`]+`|[^\s:`]+)(?:\s*:\s*|\s+)(.+)", entry, flags=re.S)
        if m is None:
            raise SettingError(name, f"entry {entry!r} is not 'name type' (e.g. \"id long, name string\")",
                               show_value=False)
        column, text = m.group(1).strip("`"), m.group(2).strip()
        columns.append(Column(column, parse_type(text), text))
    names = [c.name.lower() for c in columns]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise SettingError(name, f"declares {', '.join(map(repr, twice))} twice", show_value=False)
    return columns


def _kind_text(dtype: T.DataType) -> str:
    if isinstance(dtype, T.ArrayType):
        return f"array<{dtype.elementType.simpleString()}>"
    return dtype.simpleString()


def _declared(source: Mapping[str, Any]) -> tuple[list[Column], str]:
    """The columns a source declares and where they are declared (for messages)."""
    if source["kind"] == "generator":
        return parse_schema(GENERATOR_SCHEMA), "a generator source's columns"
    if source["kind"] == "persons":
        return parse_schema(PERSONS_SCHEMA), "a persons source's columns"
    return parse_schema(source["schema"]), "[source] schema"


def check_columns(source: Mapping[str, Any], join: Mapping[str, Any], table: str = "join") -> None:
    """Check the ``[join]`` (or ``[link]``) column keys against the columns the source declares
    (module docstring).

    A Parquet, JSON-lines or Kafka source declares them in ``[source] schema``; a generator's are
    :data:`GENERATOR_SCHEMA`, a persons source's :data:`PERSONS_SCHEMA`. Raises
    :class:`SettingError` naming the key. A ``[link]`` table's rules are checked by
    :func:`check_link_columns`."""
    declared, where = _declared(source)
    by_name = {c.name: c for c in declared}
    listing = ", ".join(c.name for c in declared)

    def find(key: str, default: str | None) -> Column | None:
        given = join.get(key)
        name = default if given is None else given
        if name is None:
            return None
        if name in by_name:
            return by_name[name]
        close = [c.name for c in declared if c.name.lower() == name.lower()]
        hint = f" (names are case-sensitive: {close[0]!r})" if close else ""
        if given is None:
            raise SettingError(f"[{table}] {key}", f"is not set, and its default {name!r} is not a column of the input; "
                                                f"{where}: {listing}: set [{table}] {key} to one of them{hint}",
                               show_value=False)
        raise SettingError(f"[{table}] {key}", f"{name!r} is not a column of the input; {where}: {listing}{hint}",
                           show_value=False)

    ident = find("id_col", "id")
    if ident.dtype is not None and not isinstance(ident.dtype, (T.IntegralType, T.StringType)):
        raise SettingError(f"[{table}] id_col", f"{ident.name!r} is declared {ident.text} in {where}; ids must be integers or "
                                            f"strings (a {ident.text} id would change its form): declare it as "
                                            "long or string", show_value=False)
    for key in ("time_col", "ingest_col"):
        col = find(key, None)
        if col is not None and col.dtype is not None and not isinstance(
                col.dtype, (T.TimestampType, T.TimestampNTZType, T.DateType, T.NumericType, T.StringType)):
            raise SettingError(f"[{table}] {key}", f"{col.name!r} is declared {col.text} in {where}, which holds no time: use a "
                                                "timestamp, date, number of seconds or timestamp string column",
                               show_value=False)
    if table != "join":
        return
    key = "value_col" if join.get("value_col") is not None else "vector_col"
    value = find(key, "vector")
    metric = join.get("metric", "angular")
    if value.dtype is None or not isinstance(metric, str):
        return
    wanted = _wanted(metric.strip().lower())
    if wanted is not None and not wanted[0](value.dtype):
        raise SettingError(f"[{table}] {key}", f"{value.name!r} is declared {_kind_text(value.dtype)} in {where}, which metric "
                                            f"{metric!r} cannot compare: it compares {wanted[1]}", show_value=False)


def _wanted(metric: str) -> tuple[Callable[[T.DataType], bool], str] | None:
    """What a named metric compares: a test of a column type and its description (None: unknown name,
    which the settings check reports)."""
    if metric == "levenshtein":
        return (lambda t: isinstance(t, T.StringType)), "strings (a string column)"
    if metric == "jaccard":
        return (lambda t: isinstance(t, T.ArrayType) and isinstance(t.elementType, (T.StringType, T.IntegralType)),
                "token sets (array<string>, array<int> or array<bigint>)")
    if metric in METRICS:
        return (lambda t: isinstance(t, T.ArrayType) and isinstance(t.elementType, T.NumericType),
                "vectors (array<double> or array<float>)")
    return None


def rule_kind(dtype: T.DataType | None) -> str | None:
    """The kind a match rule sees in a column of a declared type, as ``link`` reads it
    (:func:`driftjoin.spark.link.inputs.spark_kind`); None for a type this reader keeps as text
    or an array of values rules cannot compare, both left to ``link``, which checks the input.

    >>> [rule_kind(c.dtype) for c in parse_schema("a date, b array<string>, c struct<x: int>")]
    ['date', 'set', None]
    """
    from driftjoin.spark.link.inputs import spark_kind

    if dtype is None:
        return None
    kind = spark_kind(dtype)
    return None if kind == "other-array" else kind


def check_link_columns(source: Mapping[str, Any], link: Mapping[str, Any]) -> None:
    """Check a ``[link]`` table against the columns the source declares: ``id_col``, ``time_col``
    and ``ingest_col`` as :func:`check_columns` does, and every rule's columns and conditions
    against the declared types (a column the schema lacks, levenshtein on a date, ...), with the
    message ``link`` itself gives, named ``[link] rules[0]['surname']``. Columns of a type this
    reader does not know are left to ``link``, which checks them again when it sees the input:
    when a rule names one, the rules are checked here for what needs no input only (``link``'s
    settings check did that already), as a rule set is resolved whole.

    Parameters
    ----------
    source : the ``[source]`` table (its ``kind`` and, for files or Kafka, ``schema``).
    link : the ``[link]`` table as ``link``'s keyword arguments (``rules``, ``id_col``, ...).

    Raises :class:`SettingError`.

    Example::

        >>> check_link_columns({"kind": "files", "schema": "id long, dob date, name string"},
        ...                    {"rules": [{"dob": ("levenshtein", 1)}]})
        Traceback (most recent call last):
        ...
        driftjoin.spark.runtime.settings.SettingError: [link] rules[0]['dob'] compares dates with levenshtein, which needs strings; for dates use 'equal' or ('within', '2 days')
    """
    from driftjoin.linkage.rules import RuleError, check_rules

    check_columns(source, link, "link")
    declared, _ = _declared(source)
    kinds = {c.name: rule_kind(c.dtype) for c in declared}
    rules = link["rules"]
    named = {c for r in rules if isinstance(r, Mapping) for c in r}
    if any(kinds.get(c, "") is None for c in named):
        return
    try:
        check_rules(rules, {c: k for c, k in kinds.items() if k is not None})
    except RuleError as e:
        raise SettingError(f"[link] {e.name}", e.problem, show_value=False) from None
