"""Tests of regression.cache: entries, their identity, and stored cases."""

from __future__ import annotations

import os
import pickle
import stat
from collections.abc import Callable
from pathlib import Path

import filelock
import pytest
import torch

from regression.cache import ABSENT, RECORDED, CaseRecord, Entry, Output, case_id
from regression.compare import compare
from regression.errors import CacheError, StoreError
from regression.files import dump_verified, load_verified, write_atomic
from regression.fingerprint import digest

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


# Entry.from_directory


def test_entry_read_from_its_folder_has_the_same_identity(entry: Entry) -> None:
    read = Entry.from_directory(entry.directory)
    assert (read.parts, read.key, read.directory) == (PARTS, entry.key, entry.directory)


def test_entry_read_from_a_renamed_folder_is_foreign(entry: Entry) -> None:
    renamed = entry.directory.parent / ("f" * 32)
    entry.directory.rename(renamed)
    with pytest.raises(CacheError, match="foreign"):
        Entry.from_directory(renamed)


def test_entry_read_from_a_folder_with_a_corrupt_identity_is_a_store_error(entry: Entry) -> None:
    (entry.directory / "entry.json").write_bytes(b"garbage")
    with pytest.raises(StoreError, match="corrupt or truncated"):
        Entry.from_directory(entry.directory)


def test_entry_read_from_an_identity_without_parts_is_a_store_error(entry: Entry) -> None:
    write_atomic(entry.directory / "entry.json", dump_verified({"format": 1}))
    with pytest.raises(StoreError, match="holds no fingerprint"):
        Entry.from_directory(entry.directory)


# touch, last_used, stored_cases


def test_last_used_of_an_untouched_entry_is_its_creation(entry: Entry) -> None:
    assert entry.last_used() == (entry.directory / "entry.json").stat().st_mtime


def test_last_used_of_an_entry_never_created_is_zero(tmp_path: Path) -> None:
    assert Entry(tmp_path, PARTS).last_used() == 0.0


def test_touch_marks_the_entry_used_now(entry: Entry) -> None:
    entry.touch()
    os.utime(entry.directory / "last-used", (1000.0, 1000.0))
    assert entry.last_used() == 1000.0
    entry.touch()
    assert entry.last_used() > 1000.0


def test_stored_cases_are_the_case_records_only(entry: Entry) -> None:
    assert entry.stored_cases() == []
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord("t.py::absent", "h", status=ABSENT))
    assert entry.stored_cases() == sorted([entry.case_path(NODEID),
                                           entry.case_path("t.py::absent")])


# faults


def flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def rewrite_case(entry: Entry, **changes: object) -> None:
    body = load_verified(entry.case_path(NODEID))
    write_atomic(entry.case_path(NODEID), dump_verified({**body, **changes}))


def pickled_tensor_file(entry: Entry) -> None:
    """A tensor file whose digest matches the case record but which is not safetensors."""
    payload = pickle.dumps({"t0": [1.0, 2.0]})
    tensor_file(entry).write_bytes(payload)
    body = load_verified(entry.case_path(NODEID))
    rewrite_case(entry, tensors={**body["tensors"], "digest": digest(payload)})


def identity_of_another_environment(entry: Entry) -> None:
    write_atomic(entry.directory / "entry.json",
                 dump_verified({"format": 1, "parts": {**PARTS, "torch": "9.9"}}))


DAMAGE: dict[str, tuple[Callable[[Entry], object], str]] = {
    "corrupt identity": (lambda e: flip_last_byte(e.directory / "entry.json"),
                         "corrupt or truncated"),
    "identity of another environment": (identity_of_another_environment,
                                        "belongs to another environment"),
    "corrupt case file": (lambda e: flip_last_byte(e.case_path(NODEID)), "corrupt or truncated"),
    "corrupt tensor file": (lambda e: flip_last_byte(tensor_file(e)), "corrupt or truncated"),
    "missing tensor file": (lambda e: tensor_file(e).unlink(), "is missing"),
    "tensor file not safetensors": (pickled_tensor_file, "not a valid safetensors file"),
    "case under another name": (
        lambda e: e.case_path(NODEID).rename(e.case_path("t.py::other")),
        "of another file name"),
    "case of another environment": (lambda e: rewrite_case(e, environment="0" * 32),
                                    "another case or environment"),
}


def test_clean_entry_has_no_faults(entry: Entry) -> None:
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord("t.py::absent", "h", status=ABSENT))
    assert entry.faults() == []


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_each_kind_of_damage_is_one_fault(entry: Entry, damage: str) -> None:
    entry.save_case(recorded_case())
    damage_entry, message = DAMAGE[damage]
    damage_entry(entry)
    (fault,) = entry.faults()
    assert message in fault


def test_every_damaged_case_is_its_own_fault(entry: Entry) -> None:
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord("t.py::absent", "h", status=ABSENT))
    flip_last_byte(entry.case_path(NODEID))
    flip_last_byte(entry.case_path("t.py::absent"))
    assert len(entry.faults()) == 2


def test_case_with_malformed_tensor_reference_is_a_fault(entry: Entry) -> None:
    entry.save_case(recorded_case())
    rewrite_case(entry, tensors={"file": tensor_file(entry).name})
    (fault,) = entry.faults()
    assert "malformed" in fault


# save_case replacing tensors


def test_saving_a_case_again_keeps_only_its_new_tensor_file(entry: Entry) -> None:
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord("t.py::other", "h", outputs=(Output("y", torch.ones(2)),)))
    other_file = set(entry.cases.glob(f"{case_id('t.py::other')}.*.safetensors"))
    entry.save_case(CaseRecord(NODEID, "h", outputs=(Output("y", torch.full((2,), 7.0)),)))
    (kept,) = entry.cases.glob(f"{case_id(NODEID)}.*.safetensors")
    assert load_verified(entry.case_path(NODEID))["tensors"]["file"] == kept.name
    assert set(entry.cases.glob(f"{case_id('t.py::other')}.*.safetensors")) == other_file


def test_saving_a_case_again_without_tensors_removes_its_tensor_file(entry: Entry) -> None:
    entry.save_case(recorded_case())
    entry.save_case(CaseRecord(NODEID, "h", status=ABSENT))
    assert list(entry.cases.glob("*.safetensors")) == []


def test_saved_files_follow_the_umask(entry: Entry) -> None:
    previous = os.umask(0o022)
    try:
        entry.save_case(recorded_case())
    finally:
        os.umask(previous)
    modes = {stat.S_IMODE(p.stat().st_mode) for p in entry.cases.iterdir()}
    assert modes == {0o644}


# lock


def test_lock_file_sits_beside_the_entry_folder(tmp_path: Path) -> None:
    entry = Entry(tmp_path / "new-cache", PARTS)
    lock = entry.lock()
    with lock:
        assert Path(lock.lock_file) == tmp_path / "new-cache" / f"{entry.key}.lock"
        assert Path(lock.lock_file).is_file()


def test_lock_can_be_taken_again_after_release(entry: Entry) -> None:
    lock = entry.lock()
    for _ in range(2):
        with lock:
            assert lock.is_locked
        assert not lock.is_locked


def test_held_lock_excludes_another_holder(entry: Entry) -> None:
    other = filelock.FileLock(entry.lock().lock_file, timeout=0)
    with entry.lock():
        with pytest.raises(filelock.Timeout):
            other.acquire()
    with other:
        assert other.is_locked


@pytest.mark.parametrize(("field", "value", "problem"), [
    ("status", "maybe", "unknown status"),
    ("outputs", {"name": "x"}, "outputs must be a list"),
    ("tensors", {"file": "../../etc/passwd", "digest": "0"}, "bad tensors field"),
    ("harness", 3, "harness and reason must be strings"),
])
def test_record_with_valid_hash_but_bad_shape_is_never_trusted(
        tmp_path: Path, field: str, value: object, problem: str) -> None:
    from regression.files import dump_verified, load_verified

    entry = Entry(tmp_path / "cache", {"part": "1"})
    entry.create()
    entry.save_case(CaseRecord("t.py::x", harness="h",
                               outputs=(Output("out", torch.ones(2)),)))
    path = entry.case_path("t.py::x")
    body = load_verified(path)
    body[field] = value
    path.write_bytes(dump_verified(body))
    for read in (entry.valid_harness, entry.load_case):
        with pytest.raises(StoreError, match=problem):
            read("t.py::x")
    assert any(problem in fault for fault in entry.faults())
