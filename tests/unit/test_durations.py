"""Tests of regression.store.durations: the JSON file of seconds per case."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from regression.store.durations import read_durations, store_durations
from regression.errors import ShardError

FIX = "invoke test --store-durations"


def test_missing_file_reads_as_no_durations(tmp_path: Path) -> None:
    assert read_durations(tmp_path / "absent.json") == {}


def test_stored_durations_read_back(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    store_durations(path, {"t.py::b": 2.5, "t.py::a": 0.125})
    assert read_durations(path) == {"t.py::a": 0.125, "t.py::b": 2.5}


def test_store_merges_with_existing_entries_and_later_values_win(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    store_durations(path, {"t.py::a": 1.0, "t.py::b": 2.0})
    store_durations(path, {"t.py::b": 3.0, "t.py::c": 4.0})
    assert read_durations(path) == {"t.py::a": 1.0, "t.py::b": 3.0, "t.py::c": 4.0}


def test_store_rounds_to_four_decimals(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    store_durations(path, {"t.py::a": 0.123456, "t.py::b": 1.99999})
    assert read_durations(path) == {"t.py::a": 0.1235, "t.py::b": 2.0}


def test_store_writes_keys_sorted(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    store_durations(path, {"t.py::c": 1.0, "t.py::a": 1.0})
    store_durations(path, {"t.py::b": 1.0})
    text = path.read_text(encoding="utf-8")
    assert list(json.loads(text)) == ["t.py::a", "t.py::b", "t.py::c"]
    assert text.index("t.py::a") < text.index("t.py::b") < text.index("t.py::c")
    assert text.endswith("}\n")


def test_store_with_nothing_measured_keeps_the_file(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    store_durations(path, {"t.py::a": 1.0})
    store_durations(path, {})
    assert read_durations(path) == {"t.py::a": 1.0}


def test_store_leaves_no_temporary_file_behind(tmp_path: Path) -> None:
    store_durations(tmp_path / "durations.json", {"t.py::a": 1.0})
    assert [p.name for p in tmp_path.iterdir()] == ["durations.json"]


@pytest.mark.parametrize(
    "content",
    ["not json", "[1, 2]", '"text"', "3", '{"t.py::a": "fast"}', '{"t.py::a": null}',
     '{"t.py::a": [1]}', '{"t.py::a": {"s": 1}}', ""],
    ids=["not-json", "list", "string", "number", "word-value", "null-value", "list-value",
         "object-value", "empty"],
)
def test_corrupt_file_names_the_file_and_the_fix(tmp_path: Path, content: str) -> None:
    path = tmp_path / "durations.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ShardError) as info:
        read_durations(path)
    message = str(info.value)
    assert str(path) in message
    assert "delete it" in message
    assert FIX in message


def test_file_that_is_not_utf8_is_a_corrupt_file(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    path.write_bytes(b'{"caf\xe9": 1}')
    with pytest.raises(ShardError, match="delete it"):
        read_durations(path)


def test_store_over_a_corrupt_file_refuses_rather_than_losing_it(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    path.write_text("not json", encoding="utf-8")
    with pytest.raises(ShardError):
        store_durations(path, {"t.py::a": 1.0})
    assert path.read_text(encoding="utf-8") == "not json"


@pytest.mark.parametrize(
    "content",
    ['{"t.py::a": true}', '{"t.py::a": "2"}', '{"t.py::a": NaN}', '{"t.py::a": Infinity}'],
    ids=["boolean", "numeric-string", "nan", "infinity"],
)
def test_value_that_is_not_a_json_number_is_a_corrupt_file(tmp_path: Path, content: str) -> None:
    path = tmp_path / "durations.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ShardError):
        read_durations(path)
