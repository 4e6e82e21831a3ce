"""Tests of regression.store.strictjson: JSON parsed within bounds, every excess a ValueError."""

from __future__ import annotations

import json

import pytest

from regression.store.strictjson import loads, nesting


@pytest.mark.parametrize(("text", "depth"), [
    (b"1", 0), (b"{}", 1), (b"[[[1]]]", 3), (b'{"a": [{"b": []}]}', 4),
    (b'["[[[[", "]]]]{{"]', 1), (b'["\\"[[", "\\\\", [2]]', 2), (b'{"\\\\\\"[": []}', 2),
])
def test_nesting_counts_arrays_and_objects_but_nothing_inside_strings(
        text: bytes, depth: int) -> None:
    assert nesting(text) == depth
    json.loads(text)  # each is valid JSON


def test_values_within_the_bounds_read_as_the_standard_parser_reads_them() -> None:
    text = b'{"a": [1, -2.5, "x", null, true, {"b": 18446744073709551615}], "c": 1e300}'
    assert loads(text, 3) == json.loads(text)


@pytest.mark.parametrize(("text", "message"), [
    (b"[" * 5 + b"]" * 5, "nests too deeply (5 levels, more than 4)"),
    (b'{"a": 1, "a": 2}', "names the key 'a' twice in one object"),
    (b"123456789012345678901", "holds an integer of 21 digits, more than 20"),
    (b"-123456789012345678901", "holds an integer of 21 digits, more than 20"),
    (b"1e309", "holds the number 1e309, out of range"),
    (b"[NaN]", "holds NaN, which is not a JSON number"),
    (b"-Infinity", "holds -Infinity, which is not a JSON number"),
    (b'"\xff"', "is not UTF-8 text"),
])
def test_what_exceeds_the_bounds_is_a_value_error_saying_what(text: bytes, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        loads(text, 4)
    assert str(caught.value).startswith(message)


def test_text_that_is_not_json_is_a_decode_error() -> None:
    with pytest.raises(json.JSONDecodeError):
        loads(b"{not json", 4)


@pytest.mark.parametrize(("text", "limit", "deep"), [
    (b"[[[[]]]]", 4, False), (b"[[[[[]]]]]", 4, True), (b'[{"a": [{}]}]', 4, False),
    (b'[{"a": [{"b": []}]}]', 4, True), (b'["[[[[[[", {"x": "{{{{"}]', 4, False),
    (b"[" * 300 + b"]" * 300, 299, True), (b"[" * 300 + b"]" * 300, 300, False),
])
def test_only_nesting_deeper_than_the_limit_is_refused_however_many_brackets(
        text: bytes, limit: int, deep: bool) -> None:
    if deep:
        with pytest.raises(ValueError, match="nests too deeply"):
            loads(text, limit)
    else:
        assert loads(text, limit) == json.loads(text)
