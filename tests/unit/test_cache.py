"""Tests of regression.store.cache: entries, their identity, and stored cases."""

from __future__ import annotations

import errno
import json
import os
import pickle
import stat
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import filelock
import pytest
import torch

from regression.store.cache import Entry, settled, stamp
from regression.store.record import ABSENT, RECORDED, CaseRecord, Collection, Output, \
    StoredHarness, case_id
from regression.store.cachedir import GITIGNORE, ensure_cache_root
from regression.compare.outputs import compare
from regression.errors import CacheError, NoSpaceError, ReadOnlyError, StoreError
from regression.store.files import dump_verified, load_verified, write_atomic
from regression.environment.fingerprint import digest
from regression.nodes import MAX_DEPTH

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
    entry.save_case(CaseRecord("t.py::absent", "h9", status=ABSENT, reason="skipped",
                               helpers={"tests/models.py": "d1"}))
    assert entry.valid_harness(NODEID) == StoredHarness("h1", {})
    assert entry.valid_harness("t.py::absent") == StoredHarness("h9", {"tests/models.py": "d1"})
    assert entry.load_case("t.py::absent").helpers == {"tests/models.py": "d1"}  # type: ignore[union-attr]


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
        assert lock.path == tmp_path / "new-cache" / f"{entry.key}.lock"
        assert lock.path.is_file()


def test_lock_can_be_taken_again_after_release(entry: Entry) -> None:
    lock = entry.lock()
    other = filelock.FileLock(lock.path, timeout=0)
    for _ in range(2):
        with lock:
            with pytest.raises(filelock.Timeout):
                other.acquire()
        with other:
            assert other.is_locked


def test_held_lock_excludes_another_holder(entry: Entry) -> None:
    other = filelock.FileLock(entry.lock().path, timeout=0)
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
    ("helpers", ["tests/models.py"], "helpers must map file names to digests"),
    ("helpers", {"tests/models.py": 3}, "helpers must map file names to digests"),
])
def test_record_with_valid_hash_but_bad_shape_is_never_trusted(
        tmp_path: Path, field: str, value: object, problem: str) -> None:
    from regression.store.files import dump_verified, load_verified

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


# a record is valid only if it decodes fully: gen (valid_harness) and test (load_case) agree


def nested_node(levels: int) -> dict[str, object]:
    node: dict[str, object] = {"int": "1"}
    for _ in range(levels):
        node = {"list": [node]}
    return node


def one_output(value: dict[str, object]) -> list[dict[str, object]]:
    return [{"name": "out", "value": value}]


MALFORMED_VALUES: dict[str, tuple[object, str]] = {
    "unknown kind": ({"list": [{"set": []}]}, r"at \[0\]: unknown node kind 'set'"),
    "two items": ({"int": "1", "str": "x"}, "exactly one item"),
    "not an object": ({"list": [3]}, r"at \[0\]: a node must be a JSON object"),
    "int with underscore": ({"int": "1_0"}, "ill-formed int node holding '1_0'"),
    "int with sign": ({"int": "+1"}, "ill-formed int node holding '\\+1'"),
    "float not hex": ({"float": "zz"}, "ill-formed float node holding 'zz'"),
    "float too short": ({"float": "00"}, "ill-formed float node holding '00'"),
    "bool not bool": ({"bool": 1}, "ill-formed bool node holding 1"),
    "none not true": ({"none": False}, "ill-formed none node holding False"),
    "str not str": ({"str": None}, "ill-formed str node holding None"),
    "list not list": ({"list": {"int": "1"}}, "a list node must hold a list"),
    "tensor not named": ({"tensor": 0}, "a tensor node must hold a tensor name"),
    "dict not pairs": ({"dict": [[{"str": "a"}]]}, r"\[key, value\] pairs"),
    "list as key": ({"dict": [[{"list": []}, {"none": True}]]}, "not a 'list' node"),
    "tensor as key": ({"dict": [[{"tensor": "t0"}, {"none": True}]]}, "not a 'tensor' node"),
    "one key twice": ({"dict": [[{"int": "1"}, {"none": True}], [{"bool": True}, {"none": True}]]},
                      "holds one key twice"),
    "too deep": (nested_node(MAX_DEPTH + 1), f"nested more than {MAX_DEPTH} levels deep"),
    "tensor not in file": ({"tensor": "t99"}, "names tensors its tensor file lacks: t99"),
}


@pytest.mark.parametrize("kind", list(MALFORMED_VALUES))
def test_record_with_a_malformed_value_and_a_valid_hash_is_never_trusted(
        entry: Entry, kind: str) -> None:
    entry.save_case(recorded_case())
    value, problem = MALFORMED_VALUES[kind]
    rewrite_case(entry, outputs=one_output(value))  # dump_verified computes the hash again
    for read in (entry.valid_harness, entry.load_case):
        with pytest.raises(StoreError, match=f"is malformed: .*{problem}"):
            read(NODEID)
    (fault,) = entry.faults()
    assert "is malformed" in fault


def test_record_naming_a_tensor_without_a_tensor_file_is_never_trusted(entry: Entry) -> None:
    entry.save_case(CaseRecord(NODEID, "h", outputs=(Output("out", 1),)))
    rewrite_case(entry, outputs=one_output({"tensor": "t0"}))
    for read in (entry.valid_harness, entry.load_case):
        with pytest.raises(StoreError, match="names tensors its tensor file lacks: t0"):
            read(NODEID)


def test_record_with_two_outputs_of_one_name_is_never_trusted(entry: Entry) -> None:
    entry.save_case(CaseRecord(NODEID, "h", outputs=(Output("a", 1), Output("b", 2))))
    rewrite_case(entry, outputs=one_output({"int": "1"}) * 2)
    for read in (entry.valid_harness, entry.load_case):
        with pytest.raises(StoreError, match="two outputs have one name"):
            read(NODEID)


@pytest.mark.parametrize("levels", [400, 100_000])
def test_record_of_deeply_nested_json_is_never_trusted_and_never_a_recursion_error(
        entry: Entry, levels: int) -> None:
    entry.save_case(recorded_case())
    path = entry.case_path(NODEID)
    content = load_verified(path)
    content["outputs"] = one_output({"int": "1"})
    text = json.dumps(content).replace('{"int": "1"}', '{"list": [' * levels + '{"int": "1"}'
                                       + "]}" * levels)
    path.write_bytes(b"torch-regression " + digest(text.encode()).encode() + b"\n"
                     + text.encode())
    for read in (entry.valid_harness, entry.load_case):
        with pytest.raises(StoreError, match="nested more than|nests too deeply"):
            read(NODEID)


def test_value_nested_to_the_depth_limit_is_stored_trusted_and_read_back(entry: Entry) -> None:
    value: object = {"leaf": torch.ones(2)}
    for level in range(MAX_DEPTH - 1):
        value = {(level, 0.5): value} if level % 2 else [value]
    entry.save_case(CaseRecord(NODEID, "h", outputs=(Output("deep", value),)))
    assert entry.valid_harness(NODEID) == StoredHarness("h", {})
    record = entry.load_case(NODEID)
    assert record is not None
    assert compare(value, record.outputs[0].value) == []


# the cache folder: made here, or somebody else's


def test_a_cache_folder_made_here_gets_a_gitignore_with_our_header(tmp_path: Path) -> None:
    ensure_cache_root(tmp_path / "a" / "cache")
    text = (tmp_path / "a" / "cache" / ".gitignore").read_text()
    assert text.splitlines() == ["# Created by torch-regression.", "*"]


def test_an_existing_folder_never_gets_a_gitignore(tmp_path: Path) -> None:
    zoo = tmp_path / "zoo"  # a folder of the project, named as the cache by mistake
    zoo.mkdir()
    (zoo / "model.py").write_text("x = 1\n")
    entry = Entry(zoo, PARTS)
    with entry.lock():
        entry.create()
    entry.save_case(recorded_case())
    assert not (zoo / ".gitignore").exists()
    assert (zoo / "model.py").read_text() == "x = 1\n"


def test_taking_the_lock_makes_the_cache_folder_with_its_gitignore(tmp_path: Path) -> None:
    with Entry(tmp_path / "new", PARTS).lock():
        pass
    assert (tmp_path / "new" / ".gitignore").read_bytes() == GITIGNORE


def test_a_gitignore_that_cannot_be_written_leaves_no_folder_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(path: Path, data: bytes) -> None:
        raise NoSpaceError(str(path), f"no space left on device: cannot write {path.name}")

    monkeypatch.setattr("regression.store.cachedir.write_atomic", full)
    with pytest.raises(NoSpaceError, match="cannot create the cache .*no space left"):
        ensure_cache_root(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # so the next run makes it, .gitignore and all
    monkeypatch.undo()
    ensure_cache_root(tmp_path / "cache")
    assert (tmp_path / "cache" / ".gitignore").read_bytes() == GITIGNORE


# links in the cache are never followed for writing or deleting


def elsewhere(tmp_path: Path, name: str) -> Path:
    """A folder outside the cache holding a file that must survive."""
    folder = tmp_path / "elsewhere" / name
    folder.mkdir(parents=True)
    (folder / "precious.txt").write_text("keep me\n")
    return folder


def test_an_entry_that_is_a_link_is_foreign_and_discarding_it_keeps_its_target(
        tmp_path: Path) -> None:
    target = elsewhere(tmp_path, "target")
    entry = Entry(tmp_path / "cache", PARTS)
    entry.directory.parent.mkdir()
    entry.directory.symlink_to(target, target_is_directory=True)
    with pytest.raises(CacheError, match="is a symbolic link"):
        entry.create()
    with pytest.raises(CacheError, match="is a symbolic link"):
        entry.save_case(recorded_case())
    entry.discard()
    assert not entry.directory.is_symlink() and not entry.directory.exists()
    assert sorted(p.name for p in target.iterdir()) == ["precious.txt"]
    entry.create()
    assert entry.directory.is_dir() and not entry.directory.is_symlink()


def test_an_entry_read_through_a_link_is_foreign(entry: Entry, tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    entry.directory.rename(moved)
    entry.directory.symlink_to(moved, target_is_directory=True)
    with pytest.raises(CacheError, match="symbolic link"):
        Entry.from_directory(entry.directory)
    with pytest.raises(CacheError, match="symbolic link"):
        entry.verify_identity()


def test_a_cases_folder_that_is_a_link_is_foreign_and_never_written_through(
        entry: Entry, tmp_path: Path) -> None:
    target = elsewhere(tmp_path, "cases")
    entry.cases.symlink_to(target, target_is_directory=True)
    with pytest.raises(CacheError, match="cases is a symbolic link"):
        entry.verify_identity()
    with pytest.raises(CacheError, match="cases is a symbolic link"):
        entry.save_case(recorded_case())
    assert any("cases is a symbolic link" in fault for fault in entry.faults())
    entry.discard()
    assert not entry.directory.exists()
    assert sorted(p.name for p in target.iterdir()) == ["precious.txt"]


def test_a_file_in_place_of_an_entry_folder_is_foreign_and_discarded(tmp_path: Path) -> None:
    entry = Entry(tmp_path / "cache", PARTS)
    entry.directory.parent.mkdir()
    entry.directory.write_text("not a folder")
    with pytest.raises(CacheError, match="is not a folder"):
        entry.create()
    entry.discard()
    entry.create()
    assert entry.exists()


def test_a_lock_file_that_is_a_link_is_replaced_and_its_target_kept(
        entry: Entry, tmp_path: Path) -> None:
    target = elsewhere(tmp_path, "lock") / "precious.txt"
    lock = entry.lock()
    lock.path.unlink(missing_ok=True)
    lock.path.symlink_to(target)
    with lock:
        assert not lock.path.is_symlink()
    assert target.read_text() == "keep me\n"


def test_touch_never_follows_a_link(entry: Entry, tmp_path: Path) -> None:
    target = elsewhere(tmp_path, "used") / "precious.txt"
    os.utime(target, (1000.0, 1000.0))
    (entry.directory / "last-used").symlink_to(target)
    assert entry.touch()
    assert not (entry.directory / "last-used").is_symlink()
    assert target.stat().st_mtime == 1000.0 and target.read_text() == "keep me\n"


def test_touch_never_makes_the_entry_folder(tmp_path: Path) -> None:
    entry = Entry(tmp_path / "cache", PARTS)
    assert entry.touch() is False
    assert not (tmp_path / "cache").exists()


# read-only and full caches


def test_touch_of_a_cache_that_cannot_be_written_is_skipped(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    def read_only(*args: object, **kwargs: object) -> int:
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("regression.store.cache.os.open", read_only)
    assert entry.touch() is False


def test_the_lock_of_a_read_only_cache_is_an_error_that_names_the_folder(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("regression.store.cache.os.access", lambda *args, **kwargs: False)
    with pytest.raises(ReadOnlyError) as raised:
        with entry.lock():
            pass
    assert str(raised.value).startswith(f"the cache folder {entry.directory.parent} is read-only")


def test_a_full_disk_while_creating_an_entry_names_the_folder_and_leaves_no_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    entry = Entry(tmp_path / "cache", PARTS)
    ensure_cache_root(entry.directory.parent)

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("regression.store.files.os.replace", full)
    with pytest.raises(NoSpaceError) as raised:
        entry.create()
    message = str(raised.value)
    assert f"cannot create the cache entry {entry.directory}: no space left on device" in message
    assert "REGRESSION_CACHE_DIR" in message  # the fix
    assert not entry.exists()


def test_a_full_disk_while_writing_tensors_is_not_blamed_on_the_dtypes(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("regression.store.codec._write", full)
    with pytest.raises(NoSpaceError) as raised:
        entry.save_case(recorded_case())
    message = str(raised.value)
    assert f"cannot store the reference of {NODEID}: no space left on device" in message
    assert str(entry.cases) in message and "dtype" not in message
    assert entry.load_case(NODEID) is None  # nothing reads as valid
    assert list(entry.cases.iterdir()) == []


def test_a_full_disk_while_writing_a_case_record_leaves_the_case_missing(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(path: Path, data: bytes) -> None:
        raise NoSpaceError(str(path), f"no space left on device: cannot write {path.name}")

    monkeypatch.setattr("regression.store.cache.write_atomic", full)
    with pytest.raises(NoSpaceError) as raised:
        entry.save_case(recorded_case())
    assert f"cannot store the reference of {NODEID}: no space left" in str(raised.value)
    assert entry.load_case(NODEID) is None and entry.valid_harness(NODEID) is None


def test_a_staged_case_is_not_read_until_committed_with_its_helpers(entry: Entry) -> None:
    """A recording writes each case's tensors as it ends; only the record, written once the
    recording is proven the reference's, makes the case valid."""
    staged = entry.stage_case(recorded_case())
    assert staged.tensor_file and (entry.cases / staged.tensor_file).is_file()
    assert entry.load_case(NODEID) is None
    entry.commit_case(staged, {"tests/helpers.py": "d1"})
    loaded = entry.load_case(NODEID)
    assert loaded is not None and loaded.helpers == {"tests/helpers.py": "d1"}
    assert not compare(recorded_case().outputs[0].value, loaded.outputs[0].value)


def test_a_dropped_staging_removes_only_the_tensor_file_it_made(entry: Entry) -> None:
    entry.save_case(recorded_case())
    again = entry.stage_case(recorded_case())  # the same bytes: the stored record's file
    assert not again.fresh
    entry.drop_staged(again)
    assert entry.load_case(NODEID) is not None
    other = CaseRecord(NODEID, "h1", outputs=(Output("logits", torch.ones(2)),))
    fresh = entry.stage_case(other)
    assert fresh.fresh and fresh.tensor_file
    entry.drop_staged(fresh)
    assert not (entry.cases / fresh.tensor_file).exists()
    assert len(list(entry.cases.glob("*.safetensors"))) == 1


def _aged(path: Path) -> None:
    """Give a file old times (its ctime still moves: see `clock_ahead`)."""
    os.utime(path, (1_000_000_000, 1_000_000_000))


def _counted_reads(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    """The files the cache reads as records from now on, in order."""
    reads: list[Path] = []
    real = load_verified

    def counted(path: Path, mode: int | None = None) -> dict[str, object]:
        reads.append(path)
        return real(path, mode)

    for module in ("regression.store.cache", "regression.store.record"):
        monkeypatch.setattr(f"{module}.load_verified", counted)
    return reads


class _Later:
    """The cache's clock, 10 s ahead."""

    time = staticmethod(time.time)

    @staticmethod
    def time_ns() -> int:
        return time.time_ns() + 10_000_000_000


@pytest.fixture
def clock_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the test writes counts as written before the racy window (as a warm run finds
    what an earlier one wrote): the cache's clock runs 10 s ahead, since the file's ctime,
    which `settled()` reads too, cannot be set back."""
    monkeypatch.setattr("regression.store.cache.time", _Later)


def test_a_file_copied_with_its_old_times_is_not_settled_till_its_ctime_is(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    """cp -p, rsync -t and tar keep the source's mtime: the file was still written now, and
    another such write within the same tick would leave its stamp as it was."""
    entry.save_case(recorded_case())
    path = entry.case_path(NODEID)
    _aged(path)
    found = stamp(path)
    assert found is not None and not settled(found)
    assert entry.valid_harness(NODEID) is not None
    reads = _counted_reads(monkeypatch)
    assert entry.load_case(NODEID) is not None
    assert reads == [path]  # its stamp was not trusted: read again
    monkeypatch.setattr("regression.store.cache.time", _Later)
    assert settled(found)


@pytest.mark.usefixtures("clock_ahead")
def test_a_case_planned_then_checked_reads_its_record_once(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    entry.save_case(recorded_case())
    _aged(entry.case_path(NODEID))
    _aged(entry.directory / "entry.json")
    entry.verify_identity()
    assert entry.valid_harness(NODEID) is not None
    reads = _counted_reads(monkeypatch)
    entry.verify_identity()
    record = entry.load_case(NODEID)
    assert record is not None and record.outputs[0].name == "logits"
    assert reads == []
    entry.load_case(NODEID)  # once checked, the record is not kept: read again
    assert reads == [entry.case_path(NODEID)]


@pytest.mark.usefixtures("clock_ahead")
def test_a_tensor_file_the_plan_verified_is_read_by_the_check_and_not_hashed_again(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    entry.save_case(recorded_case())
    path = tensor_file(entry)
    _aged(path)
    _aged(entry.case_path(NODEID))  # the record too: neither is hashed again
    assert entry.valid_harness(NODEID) == StoredHarness("h1", {})
    hashed: list[int] = []
    real = digest

    def counted(data: bytes | bytearray) -> str:
        hashed.append(len(data))
        return real(data)

    monkeypatch.setattr("regression.store.files.digest", counted)
    record = entry.load_case(NODEID)
    assert record is not None and compare(record.outputs[0].value,
                                          recorded_case().outputs[0].value) == []
    assert hashed == []
    entry.load_case(NODEID)  # not planned since: both hashed again
    assert sorted(hashed) == sorted([path.stat().st_size, len(entry.case_path(NODEID)
                                                            .read_bytes().partition(b"\n")[2])])


@pytest.mark.usefixtures("clock_ahead")
def test_a_tensor_file_edited_since_the_plan_verified_it_is_refused(entry: Entry) -> None:
    entry.save_case(recorded_case())
    path = tensor_file(entry)
    _aged(path)
    entry.valid_harness(NODEID)
    last = path.read_bytes()[-1]
    with open(path, "r+b") as stream:  # the same size, in place, its mtime then set back
        stream.seek(-1, os.SEEK_END)
        stream.write(bytes([last ^ 0xFF]))
    _aged(path)
    with pytest.raises(StoreError, match="corrupt or truncated"):
        entry.load_case(NODEID)


@pytest.mark.usefixtures("clock_ahead")
@pytest.mark.parametrize("change", ["rewritten", "edited in place", "just written"])
def test_a_record_that_changed_since_it_was_planned_is_read_again(entry: Entry, change: str
                                                                  ) -> None:
    entry.save_case(recorded_case())
    path = entry.case_path(NODEID)
    _aged(path)
    assert entry.valid_harness(NODEID) is not None
    if change == "rewritten":
        entry.save_case(CaseRecord(NODEID, "h2"))
        _aged(path)
    elif change == "edited in place":
        data = path.read_bytes()
        path.write_bytes(data.replace(b'"h1"', b'"h9"'))
        _aged(path)  # even with its old times: its ctime moved
    else:
        entry.save_case(CaseRecord(NODEID, "h2"))  # its times may not have ticked yet
    if change == "edited in place":
        with pytest.raises(StoreError, match="content hash does not match"):
            entry.load_case(NODEID)
    else:
        record = entry.load_case(NODEID)
        assert record is not None and record.harness == "h2"


def test_storing_many_cases_lists_the_cases_folder_once(
        entry: Entry, monkeypatch: pytest.MonkeyPatch) -> None:
    """A suite of thousands of cases: listing the folder per case stored costs time in the
    square of the cases (30 ms a case at 2,000)."""
    entry.save_case(recorded_case())
    listings: list[object] = []
    for name in ("scandir", "listdir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name,
                            lambda *a, real=real, **k: listings.append(a) or real(*a, **k))
    fresh = Entry(entry.directory.parent, PARTS)
    for number in range(30):
        fresh.save_case(CaseRecord(f"t.py::t[{number}]", "h", outputs=(
            Output("x", torch.full((3,), float(number))),)))
    fresh.save_case(replace(recorded_case(), outputs=(Output("x", torch.zeros(2)),)))
    assert len(listings) <= 1
    tensor_files = sorted(entry.cases.glob(f"{case_id(NODEID)}.*.safetensors"))
    assert len(tensor_files) == 1  # the earlier recording's file was removed all the same
    record = fresh.load_case(NODEID)
    assert record is not None and torch.equal(record.outputs[0].value, torch.zeros(2))


# A check run's plan keeps the bytes it verified for the case that loads them, within a budget.

def _three_cases(entry: Entry) -> list[str]:
    nodeids = [f"{NODEID[:-1]}{i}]" for i in range(3)]
    for nodeid in nodeids:
        entry.save_case(replace(recorded_case(), nodeid=nodeid))
    for path in entry.cases.iterdir():  # settled: written before the racy window
        os.utime(path, (path.stat().st_atime - 10, path.stat().st_mtime - 10))
    return nodeids


@pytest.mark.usefixtures("clock_ahead")
def test_kept_bytes_are_loaded_unread_and_given_back_to_the_budget(entry: Entry) -> None:
    nodeids = _three_cases(entry)
    size = next(entry.cases.glob("*.safetensors")).stat().st_size  # the same for the three
    planned = Entry(entry.directory.parent, PARTS, keep=2 * size)  # room for two of three
    for nodeid in nodeids:
        planned.valid_harness(nodeid)
    for nodeid in nodeids:
        planned.valid_harness(nodeid)  # planned again (under the lock): nothing is lost
    assert planned._keep == 0 and len(planned._kept) == 2
    for path in entry.cases.glob("*.safetensors"):
        path.write_bytes(b"")  # what was kept is what was verified: no second read
    kept = [planned.load_case(nodeid) for nodeid in nodeids if nodeid in planned._kept]
    values = [o.value for o in recorded_case().outputs]
    assert all(case is not None and compare(values, [o.value for o in case.outputs]) == []
               for case in kept)
    assert len(kept) == 2 and planned._keep == 2 * size and not planned._kept


@pytest.mark.usefixtures("clock_ahead")
def test_a_case_to_record_again_lets_go_of_its_kept_bytes(entry: Entry) -> None:
    nodeid = _three_cases(entry)[0]
    planned = Entry(entry.directory.parent, PARTS, keep=1 << 20)
    planned.valid_harness(nodeid)
    assert planned._keep < 1 << 20
    planned.release(nodeid)
    assert planned._keep == 1 << 20 and not planned._kept and not planned._layouts
    nothing_kept = Entry(entry.directory.parent, PARTS)  # gen, a worker: no budget
    nothing_kept.valid_harness(nodeid)
    assert not nothing_kept._kept


FILE = "tests/test_model.py"
COLLECTION = Collection(FILE, "h1", {"tests/util.py": "d1"}, (NODEID, f"{FILE}::test_b"))


def test_a_collection_round_trips_and_none_is_stored_at_first(entry: Entry) -> None:
    assert entry.collection(FILE) is None
    entry.save_collection(COLLECTION)
    assert entry.collection(FILE) == replace(COLLECTION, cases=tuple(sorted(COLLECTION.cases)))
    assert entry.collection("tests/test_other.py") is None
    assert entry.faults() == []


@pytest.mark.parametrize(("change", "words"), [
    ({"file": "tests/test_other.py"}, "belongs to another test file or environment"),
    ({"environment": "0" * 16}, "belongs to another test file or environment"),
    ({"cases": ["tests/test_other.py::test_a"]}, "is malformed"),  # another file's case
    ({"cases": "tests/test_model.py::test_a"}, "is malformed"),
    ({"helpers": {"tests/util.py": 1}}, "is malformed"),
    ({"harness": None}, "is malformed"),
])
def test_a_collection_that_cannot_be_trusted_is_a_store_error_and_a_fault(
        entry: Entry, change: dict[str, object], words: str) -> None:
    entry.save_collection(COLLECTION)
    (path,) = (entry.directory / "collections").iterdir()
    write_atomic(path, dump_verified({**load_verified(path), **change}))
    with pytest.raises(StoreError, match=words):
        entry.collection(FILE)
    assert len(entry.faults()) == 1


def test_a_collection_is_never_written_through_a_link(entry: Entry, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (entry.directory / "collections").symlink_to(elsewhere)
    with pytest.raises(CacheError, match="never writes through a link"):
        entry.save_collection(COLLECTION)
    assert list(elsewhere.iterdir()) == [] and entry.collection(FILE) is None
