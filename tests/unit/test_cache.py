"""Tests of regression.cache: entries, their identity, and stored cases."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from regression.cache import ABSENT, RECORDED, CaseRecord, Entry, Output, case_id
from regression.compare import compare
from regression.errors import CacheError, StoreError
from regression.files import dump_verified, load_verified, write_atomic

PARTS = {"format": "1", "reference": "abc123", "torch": "2.x", "threads": "1"}
NODEID = "tests/test_model.py::test_forward[small]"


@pytest.fixture
def entry(tmp_path: Path) -> Entry:
    created = Entry(tmp_path / "cache", PARTS)
    created.create()
    return created


def recorded_case() -> CaseRecord:
    return CaseRecord(
        nodeid=NODEID,
        harness="h1",
        outputs=(
            Output("logits", torch.randn(2, 3, generator=torch.Generator().manual_seed(0))),
            Output("aux", {"loss": torch.tensor(0.25, dtype=torch.float64), "steps": [1, 2]}),
            Output("ids", torch.tensor([1, 2, 3], dtype=torch.int32)),
            Output("plain", ("text", None, -0.0)),
        ),
    )


def test_create_makes_the_entry_folder_and_identity_file(entry: Entry, tmp_path: Path) -> None:
    assert entry.exists()
    assert entry.directory == tmp_path / "cache" / entry.key
    assert load_verified(entry.directory / "entry.json")["parts"] == PARTS


def test_cache_root_is_ignored_by_git(entry: Entry, tmp_path: Path) -> None:
    lines = (tmp_path / "cache" / ".gitignore").read_text().splitlines()
    assert "*" in lines


def test_create_twice_keeps_the_identity_file(entry: Entry) -> None:
    before = (entry.directory / "entry.json").read_bytes()
    Entry(entry.directory.parent, PARTS).create()
    assert (entry.directory / "entry.json").read_bytes() == before


def test_entry_key_depends_on_the_parts(tmp_path: Path) -> None:
    other = Entry(tmp_path, {**PARTS, "threads": "2"})
    assert other.key != Entry(tmp_path, PARTS).key


def test_recorded_case_round_trips_with_every_output(entry: Entry) -> None:
    record = recorded_case()
    entry.save_case(record)
    loaded = entry.load_case(NODEID)
    assert loaded is not None
    assert (loaded.nodeid, loaded.harness, loaded.status, loaded.reason) == (
        NODEID, "h1", RECORDED, "")
    assert [o.name for o in loaded.outputs] == ["logits", "aux", "ids", "plain"]
    for stored, original in zip(loaded.outputs, record.outputs):
        assert compare(original.value, stored.value, name=stored.name) == []


def test_absent_case_round_trips_with_its_reason(entry: Entry) -> None:
    entry.save_case(CaseRecord(NODEID, "h2", status=ABSENT, reason="failed at the reference"))
    loaded = entry.load_case(NODEID)
    assert loaded == CaseRecord(NODEID, "h2", status=ABSENT, reason="failed at the reference")


def test_case_without_tensors_writes_no_tensor_file(entry: Entry) -> None:
    entry.save_case(CaseRecord(NODEID, "h", outputs=(Output("n", 3),)))
    assert [p.suffix for p in entry.cases.iterdir()] == [".json"]


def test_saving_again_replaces_the_case(entry: Entry) -> None:
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord(NODEID, "h3", outputs=(Output("only", torch.zeros(1)),)))
    loaded = entry.load_case(NODEID)
    assert loaded is not None
    assert loaded.harness == "h3"
    assert [o.name for o in loaded.outputs] == ["only"]


def test_missing_case_loads_as_none(entry: Entry) -> None:
    assert entry.load_case("tests/test_model.py::test_never_recorded") is None


def test_case_files_are_named_by_case_id(entry: Entry) -> None:
    entry.save_case(recorded_case())
    assert entry.case_path(NODEID) == entry.cases / f"{case_id(NODEID)}.json"
    assert entry.case_path(NODEID).is_file()
    assert case_id(NODEID) != case_id(NODEID + "x")


def test_corrupt_case_json_is_a_store_error(entry: Entry) -> None:
    entry.save_case(recorded_case())
    path = entry.case_path(NODEID)
    data = bytearray(path.read_bytes())
    data[-10] ^= 0x20
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt or truncated"):
        entry.load_case(NODEID)


def tensor_file(entry: Entry) -> Path:
    (path,) = entry.cases.glob("*.safetensors")
    return path


def test_corrupt_tensor_file_is_a_store_error(entry: Entry) -> None:
    entry.save_case(recorded_case())
    path = tensor_file(entry)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError, match="corrupt or truncated"):
        entry.load_case(NODEID)


def test_missing_tensor_file_is_a_store_error(entry: Entry) -> None:
    entry.save_case(recorded_case())
    tensor_file(entry).unlink()
    with pytest.raises(StoreError, match="is missing"):
        entry.load_case(NODEID)


def test_case_of_another_nodeid_is_a_store_error(entry: Entry) -> None:
    entry.save_case(recorded_case())
    other = "tests/test_model.py::test_other"
    entry.case_path(NODEID).rename(entry.case_path(other))
    with pytest.raises(StoreError, match="another case or environment"):
        entry.load_case(other)


def test_case_of_another_environment_is_a_store_error(entry: Entry, tmp_path: Path) -> None:
    entry.save_case(recorded_case())
    other = Entry(tmp_path / "cache", {**PARTS, "torch": "3.x"})
    other.create()
    other.cases.mkdir(parents=True)
    entry.case_path(NODEID).rename(other.case_path(NODEID))
    with pytest.raises(StoreError, match="another case or environment"):
        other.load_case(NODEID)


def test_case_json_without_required_fields_is_a_store_error(entry: Entry) -> None:
    body = {"nodeid": NODEID, "environment": entry.key, "tensors": None}
    write_atomic(entry.case_path(NODEID), dump_verified(body))
    with pytest.raises(StoreError, match="is malformed"):
        entry.load_case(NODEID)


def test_identity_of_another_environment_names_the_differing_part(entry: Entry) -> None:
    foreign = {**PARTS, "torch": "9.9"}
    write_atomic(entry.directory / "entry.json",
                 dump_verified({"format": 1, "parts": foreign, "created": 0}))
    with pytest.raises(CacheError, match="belongs to another environment") as info:
        entry.verify_identity()
    message = str(info.value)
    assert "torch: recorded '9.9', now '2.x'" in message
    assert "threads" not in message and "reference" not in message


def test_create_checks_the_identity_of_an_existing_entry(entry: Entry) -> None:
    write_atomic(entry.directory / "entry.json",
                 dump_verified({"format": 1, "parts": {**PARTS, "threads": "8"}}))
    with pytest.raises(CacheError, match="threads: recorded '8', now '1'"):
        Entry(entry.directory.parent, PARTS).create()


def test_identity_without_parts_names_every_part(entry: Entry) -> None:
    write_atomic(entry.directory / "entry.json", dump_verified({"format": 1}))
    with pytest.raises(CacheError) as info:
        entry.verify_identity()
    assert all(f"{name}: recorded '<absent>'" in str(info.value) for name in PARTS)


def test_corrupt_identity_file_is_a_store_error(entry: Entry) -> None:
    path = entry.directory / "entry.json"
    path.write_bytes(path.read_bytes()[:-3])
    with pytest.raises(StoreError):
        entry.verify_identity()


def test_valid_harness_of_a_stored_case(entry: Entry) -> None:
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord("t.py::absent", "h9", status=ABSENT, reason="skipped"))
    assert entry.valid_harness(NODEID) == "h1"
    assert entry.valid_harness("t.py::absent") == "h9"


def test_valid_harness_of_a_missing_case_is_none(entry: Entry) -> None:
    assert entry.valid_harness(NODEID) is None


def test_valid_harness_checks_the_tensor_file(entry: Entry) -> None:
    entry.save_case(recorded_case())
    path = tensor_file(entry)
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(StoreError, match="corrupt or truncated"):
        entry.valid_harness(NODEID)


def test_valid_harness_checks_the_case_file(entry: Entry) -> None:
    entry.save_case(recorded_case())
    path = entry.case_path(NODEID)
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(StoreError, match="corrupt or truncated"):
        entry.valid_harness(NODEID)
