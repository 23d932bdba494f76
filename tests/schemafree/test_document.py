"""Document model: flattening, arrays, nulls, value equality and the join predicate."""

from __future__ import annotations

import math

import pytest

from driftjoin.schemafree.document import flatten, joinable, make_document, merged_document


def test_nested_objects_become_dotted_paths() -> None:
    assert flatten({"user": {"id": 7, "geo": {"city": "KL"}}, "ok": True}) == {
        "ok": "true",
        "user.geo.city": '"KL"',
        "user.id": "7",
    }


def test_json_text_is_accepted_and_non_objects_rejected() -> None:
    assert flatten('{"a": {"b": "x"}}') == {"a.b": '"x"'}
    with pytest.raises(ValueError):
        flatten("[1, 2]")


def test_dots_and_nul_in_keys_are_escaped_so_paths_never_collide() -> None:
    assert flatten({"a.b": 1}).keys() != flatten({"a": {"b": 1}}).keys()
    assert not any(attr.startswith("\x00") for attr in flatten({"\x00x": 1}))


def test_arrays_are_atomic_order_sensitive_values() -> None:
    a = flatten({"tags": [1, 2, {"k": None}]})
    assert a == {"tags": '[1,2,{"k":null}]'}  # nulls inside arrays are part of the value
    assert flatten({"tags": [1, 2]}) != flatten({"tags": [2, 1]})
    assert joinable(flatten({"tags": [1, 2], "x": 1}), flatten({"tags": [1, 2]}))
    assert not joinable(flatten({"tags": [1, 2], "x": 1}), flatten({"tags": [2, 1], "x": 1}))


def test_nulls_and_empty_objects_are_absent() -> None:
    assert flatten({"a": None, "b": {}, "c": {"d": None}, "e": 1}) == {"e": "1"}
    # an attribute that is null in one document neither joins nor conflicts
    assert joinable(flatten({"a": None, "e": 1}), flatten({"a": 5, "e": 1}))
    assert not joinable(flatten({"a": None}), flatten({"a": None}))


def test_scalar_equality_follows_json_types() -> None:
    assert flatten({"x": 1.0}) == flatten({"x": 1})
    assert flatten({"x": True}) != flatten({"x": 1})
    assert flatten({"x": "1"}) != flatten({"x": 1})
    with pytest.raises(ValueError):
        flatten({"x": math.nan})


def test_join_predicate_needs_a_shared_attribute_and_no_conflict() -> None:
    assert joinable({"a": "1", "b": "2"}, {"a": "1", "c": "3"})
    assert not joinable({"a": "1"}, {"b": "1"})  # nothing shared
    assert not joinable({"a": "1", "b": "2"}, {"a": "1", "b": "3"})  # conflict on b
    assert not joinable({}, {})


def test_time_attribute_is_taken_out_of_the_pairs() -> None:
    doc = make_document({"timestamp": 12.5, "a": 1}, 3, time_attribute="timestamp")
    assert doc.time == 12.5 and doc.avps == {"a": "1"} and doc.doc_id == 3
    with pytest.raises(ValueError):
        make_document({"a": 1}, 0, time_attribute="timestamp")


def test_merged_document_is_the_union_with_decoded_values() -> None:
    a = make_document({"a": 1, "n": {"x": [1]}}, 0)
    b = make_document({"a": 1, "b": "z"}, 1)
    assert merged_document(a, b) == {"a": 1, "b": "z", "n.x": [1]}
