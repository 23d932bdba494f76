"""JSON lines read against a declared schema: each line is a row of the schema's columns, or a
dead letter with its text and the reason it cannot be one.

``driftjoin run`` reads JSON-lines files and Kafka values as text and parses them here, because
Spark's own JSON reader is lenient in a way a join must not be: a ``string`` column takes any
JSON value as its text (``"name": 12345`` becomes the name ``"12345"``, ``"name": {"a": 1}``
becomes ``'{"a": 1}'``), an ``array<string>`` column does the same to each element, and a
``double`` column takes the strings ``"NaN"`` and ``"Infinity"``; a value it cannot convert
becomes a silent null. Here every value must have the JSON type its column declares, the same
rule for every column type:

========================  =====================================================
column type               JSON value
========================  =====================================================
string (varchar, char)    a string
integers (int, long...)   an integer (``3``, not ``3.5`` nor ``"3"``)
double, float, decimal    a number
boolean                   ``true`` or ``false``
timestamp                 a string Spark parses as a timestamp, or an integer
                          number of seconds since 1970 (as Spark reads it)
date                      a string
binary                    a string (base64)
array<T>                  a list whose elements are each a T (or null)
struct<...>, map<...>     an object whose values each fit their type
========================  =====================================================

A JSON ``null`` or a missing key is a null value (the join decides what a null means: a missing
id or value is a dead letter there). A line that is not JSON, not a JSON object, or has a value
of the wrong type is a dead letter whose reason names the column, what it must be and what the
line holds, e.g. ``name is not a string: got an integer``; everything before the first ``": "``
is the same for every line with that fault, so reasons count together.

The JSON types come from Spark's ``VARIANT`` (``try_parse_json`` and ``schema_of_variant``, Spark
4.0), one parse per line, on the executors; nothing is collected.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

#: ``schema_of_variant`` names of JSON integers, and of every JSON number.
_INTEGER = r"^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL\(\d+,0\))$"
_NUMBER = r"^(TINYINT|SMALLINT|INT|BIGINT|DECIMAL\(\d+,\d+\)|FLOAT|DOUBLE)$"
#: At most this many characters of a value are quoted in a reason.
_QUOTE = 40


#: Column types in words, singular and plural, in the order they are tested (integers before numbers).
_WORDS = ((T.StringType, "a string", "strings"), (T.IntegralType, "an integer", "integers"),
          (T.NumericType, "a number", "numbers"), (T.BooleanType, "true or false", "true/false values"),
          ((T.TimestampType, T.TimestampNTZType), "a timestamp", "timestamps"), (T.DateType, "a date", "dates"),
          (T.BinaryType, "a base64 string", "base64 strings"))


def expected(dtype: T.DataType, plural: bool = False) -> str:
    """What a column of ``dtype`` must hold, as a reason says it (``"a list of numbers"``)."""
    for types, one, many in _WORDS:
        if isinstance(dtype, types):
            return many if plural else one
    if isinstance(dtype, T.ArrayType):
        return f"{'lists' if plural else 'a list'} of {expected(dtype.elementType, True)}"
    if isinstance(dtype, (T.StructType, T.MapType)):
        return f"{'objects' if plural else 'an object'} of type {dtype.simpleString()}"
    return f"{'values' if plural else 'a value'} of type {dtype.simpleString()}"


def _scalar_kind(t: Column, plural: bool) -> Column:
    """The kind of JSON value a ``schema_of_variant`` name ``t`` is, in words (singular or plural)."""
    i = 1 if plural else 0
    cases = ((t == "STRING", ("a string", "strings")), (t == "BOOLEAN", ("true or false", "true/false values")),
             (t.rlike(_INTEGER), ("an integer", "integers")), (t.rlike(_NUMBER), ("a number", "numbers")),
             (t.startswith("OBJECT"), ("an object", "objects")), (t.startswith("ARRAY"), ("a list", "lists")),
             (t == "VOID", ("null", "nulls")))
    out = F.when(cases[0][0], F.lit(cases[0][1][i]))
    for condition, words in cases[1:]:
        out = out.when(condition, F.lit(words[i]))
    return out.otherwise(t)


def json_kind(t: Column) -> Column:
    """The kind of a JSON value from its ``schema_of_variant`` name: ``"an integer"``, ``"a list of
    strings"``, ``"a list of mixed values"``..."""
    element = F.regexp_extract(t, r"^ARRAY<(.*)>$", 1)
    return (F.when(t == "ARRAY<VOID>", F.lit("an empty list"))
            .when(t == "ARRAY<VARIANT>", F.lit("a list of mixed values"))
            .when(t.startswith("ARRAY<"), F.concat(F.lit("a list of "), _scalar_kind(element, True)))
            .otherwise(_scalar_kind(t, False)))


def _at(v: Column, key: str) -> Column:
    return F.try_variant_get(v, f"$['{key}']", "variant")


def fits(v: Column, dtype: T.DataType) -> Column:
    """Whether the JSON value ``v`` (a variant; null when missing) has a JSON type a column of
    ``dtype`` takes (module docstring); true for a null or missing value."""
    t = F.schema_of_variant(v)
    if isinstance(dtype, (T.StringType, T.DateType, T.BinaryType)):
        ok = t == "STRING"
    elif isinstance(dtype, T.BooleanType):
        ok = t == "BOOLEAN"
    elif isinstance(dtype, T.IntegralType):
        ok = t.rlike(_INTEGER)
    elif isinstance(dtype, T.NumericType):
        ok = t.rlike(_NUMBER)
    elif isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        ok = (t == "STRING") | t.rlike(_INTEGER)
    elif isinstance(dtype, T.ArrayType):
        items = F.try_variant_get(v, "$", "array<variant>")
        ok = t.startswith("ARRAY") & F.forall(items, lambda x: fits(x, dtype.elementType))
    elif isinstance(dtype, T.StructType):
        ok = t.startswith("OBJECT")
        for f in dtype.fields:
            if "'" not in f.name:
                ok = ok & fits(_at(v, f.name), f.dataType)
    elif isinstance(dtype, T.MapType):
        values = F.map_values(F.try_variant_get(v, "$", "map<string,variant>"))
        ok = t.startswith("OBJECT") & F.forall(values, lambda x: fits(x, dtype.valueType))
    else:
        ok = F.lit(True)
    return F.coalesce(t.isNull() | (t == "VOID") | ok, F.lit(True))


def parse_json_lines(lines: Any, schema: str) -> Any:
    """JSON text (column ``value``) as the schema's columns plus ``_raw`` (the text) and
    ``_reason``: why the line cannot be read (null when it can), e.g. ``not valid JSON`` or
    ``name is not a string: got an integer`` (module docstring)."""
    struct = T.StructType.fromDDL(schema)
    parsed = F.from_json(F.col("value"), struct, {"mode": "PERMISSIVE"})
    variant = F.try_parse_json(F.col("value"))
    reason = (F.when(F.get_json_object(F.col("value"), "$").isNull(), F.lit("not valid JSON"))
              .when(~F.ltrim(F.col("value")).startswith("{"), F.lit("not a JSON object")))
    for f in struct.fields:
        quotable = "'" not in f.name
        prefix = F.lit(f"{f.name} is not {expected(f.dataType)}: got ")
        if quotable:
            value = _at(variant, f.name)
            reason = reason.when(~fits(value, f.dataType), F.concat(prefix, json_kind(F.schema_of_variant(value))))
        # a value of the right JSON type that Spark still cannot convert (a timestamp string it cannot
        # parse, an integer beyond the column's range): quoted as the line has it
        given = F.get_json_object(F.col("value"), f"$['{f.name}']" if quotable else f"$.{f.name}")
        shown = F.when(F.length(given) > _QUOTE, F.concat(F.substring(given, 1, _QUOTE), F.lit("..."))).otherwise(given)
        reason = reason.when(given.isNotNull() & parsed[f.name].isNull(), F.concat(prefix, shown))
    return lines.select(parsed.alias("_row"), F.col("value").alias("_raw"), reason.alias("_reason")).select(
        "_row.*", "_raw", "_reason")
