"""Tests of regression.store.files: atomic writes and self-verifying files."""

from __future__ import annotations

import errno
import os
import pickle
import stat
import tempfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from crafted_files import CRAFTED, craft, entry
from regression.errors import CacheWriteError, NoSpaceError, ReadOnlyError, StoreError
from regression.store.files import (
    dump_verified,
    load_verified,
    read_tensor_file,
    verified_layout,
    write_atomic,
)
from regression.environment.fingerprint import digest
from regression.store.regular import fill, opened_regular


def test_verified_body_round_trips(tmp_path: Path) -> None:
    body = {"format": 1, "nested": {"list": [1, "two", None, 3.5]}, "text": "ünï"}
    write_atomic(tmp_path / "case.json", dump_verified(body))
    assert load_verified(tmp_path / "case.json") == body


def test_verified_file_starts_with_the_hash_of_its_json() -> None:
    data = dump_verified({"a": 1})
    header, _, content = data.partition(b"\n")
    assert header == b"torch-regression " + digest(content).encode()


def flip(data: bytes, at: int) -> bytes:
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


@pytest.mark.parametrize("where", ["header", "body", "last"])
def test_flipped_byte_in_verified_file_is_detected(tmp_path: Path, where: str) -> None:
    data = dump_verified({"a": 1, "b": "text"})
    at = {"header": 20, "body": data.index(b"\n") + 3, "last": len(data) - 1}[where]
    (tmp_path / "case.json").write_bytes(flip(data, at))
    with pytest.raises(StoreError, match="corrupt or truncated"):
        load_verified(tmp_path / "case.json")


@pytest.mark.parametrize("keep", [0, 10, -1])
def test_truncated_verified_file_is_detected(tmp_path: Path, keep: int) -> None:
    data = dump_verified({"a": 1, "b": "text"})
    (tmp_path / "case.json").write_bytes(data[:keep])
    with pytest.raises(StoreError, match="corrupt or truncated"):
        load_verified(tmp_path / "case.json")


@pytest.mark.parametrize(("content", "message"), [
    (b"[1, 2]", "does not hold a JSON object"),
    (b"{not json", "not valid JSON"),
])
def test_verified_file_with_matching_hash_but_bad_content_is_refused(
        tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "case.json").write_bytes(b"torch-regression " + digest(content).encode()
                                         + b"\n" + content)
    with pytest.raises(StoreError, match=message):
        load_verified(tmp_path / "case.json")


def test_verified_file_nested_too_deeply_for_json_is_a_store_error(tmp_path: Path) -> None:
    content = b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"
    (tmp_path / "deep.json").write_bytes(b"torch-regression " + digest(content).encode() + b"\n"
                                         + content)
    with pytest.raises(StoreError, match="deep.json is not a record this tool wrote: its JSON "
                                         "nests too deeply"):
        load_verified(tmp_path / "deep.json")


def test_missing_verified_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is missing"):
        load_verified(tmp_path / "absent.json")


def test_read_tensor_file_returns_bytes_with_the_expected_digest(tmp_path: Path) -> None:
    (tmp_path / "data.bin").write_bytes(b"payload")
    assert read_tensor_file(tmp_path / "data.bin", digest(b"payload"))[0] == b"payload"


@pytest.mark.parametrize("stored", [b"payloaD", b"payloa", b"payload!"],
                         ids=["flipped", "truncated", "extended"])
def test_read_tensor_file_refuses_other_bytes(tmp_path: Path, stored: bytes) -> None:
    (tmp_path / "data.bin").write_bytes(stored)
    with pytest.raises(StoreError, match="corrupt or truncated"):
        read_tensor_file(tmp_path / "data.bin", digest(b"payload"))


def test_read_tensor_file_of_a_missing_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is missing"):
        read_tensor_file(tmp_path / "absent.bin", digest(b""))


def test_unreadable_path_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    with pytest.raises(StoreError, match="cannot be read"):
        load_verified(tmp_path / "folder")


def test_write_atomic_creates_folders_and_leaves_no_temporary_files(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "er" / "file.bin"
    write_atomic(path, b"first")
    assert path.read_bytes() == b"first"
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.bin"]


def test_write_atomic_replaces_existing_content(tmp_path: Path) -> None:
    path = tmp_path / "file.bin"
    write_atomic(path, b"a much longer first content")
    write_atomic(path, b"short")
    assert path.read_bytes() == b"short"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


def test_write_atomic_removes_its_temporary_file_on_failure(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "file.bin"
    write_atomic(path, b"old")

    def fail(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("regression.store.files.os.replace", fail)
    with pytest.raises(NoSpaceError):
        write_atomic(path, b"new")
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["file.bin"]


@pytest.mark.parametrize(("code", "kind", "words"), [
    (errno.ENOSPC, NoSpaceError, "no space left on device: cannot write file.bin in "),
    (errno.EDQUOT, NoSpaceError, "no space left (Disk quota exceeded): cannot write file.bin"),
    (errno.EROFS, ReadOnlyError, " is read-only (Read-only file system): cannot write file.bin"),
    (errno.EACCES, ReadOnlyError, " is read-only (Permission denied): cannot write file.bin"),
    (errno.EIO, CacheWriteError, "cannot write "),
])
@pytest.mark.parametrize("step", ["make", "write", "rename"])
def test_a_failed_write_says_why_in_words_and_names_file_and_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, code: int, kind: type, words: str,
        step: str) -> None:
    def fail(*args: object, **kwargs: object) -> None:
        raise OSError(code, os.strerror(code))

    target = {"make": (tempfile, "mkstemp"), "write": (os, "write"),
              "rename": (os, "replace")}[step]
    monkeypatch.setattr(*target, fail)
    with pytest.raises(kind) as raised:
        write_atomic(tmp_path / "file.bin", b"data")
    assert type(raised.value) is kind
    assert words in str(raised.value) and str(tmp_path) in str(raised.value)
    assert raised.value.path == str(tmp_path / "file.bin")
    assert list(tmp_path.iterdir()) == []  # no temporary file, nothing that reads as written


def tensor_names(path: Path, expected_digest: str) -> set[str]:
    return {slot.name for slot in verified_layout(path, expected_digest).slots}


def safetensors_bytes() -> bytes:
    return save({"t0": torch.arange(6.0).reshape(2, 3), "t1": torch.tensor([1], dtype=torch.int8)})


def test_verified_layout_accepts_a_real_file(tmp_path: Path) -> None:
    data = safetensors_bytes()
    (tmp_path / "t.safetensors").write_bytes(data)
    assert tensor_names(tmp_path / "t.safetensors", digest(data)) == {"t0", "t1"}


def test_verified_layout_refuses_a_wrong_digest(tmp_path: Path) -> None:
    (tmp_path / "t.safetensors").write_bytes(safetensors_bytes())
    with pytest.raises(StoreError, match="corrupt or truncated"):
        tensor_names(tmp_path / "t.safetensors", digest(b"other"))


@pytest.mark.parametrize("content", [pickle.dumps({"t0": [1.0]}), b"", safetensors_bytes()[:-4]],
                         ids=["pickle", "empty", "truncated"])
def test_verified_layout_refuses_other_content_with_its_right_digest(
        tmp_path: Path, content: bytes) -> None:
    (tmp_path / "t.safetensors").write_bytes(content)
    with pytest.raises(StoreError, match="not a valid safetensors file"):
        tensor_names(tmp_path / "t.safetensors", digest(content))


@pytest.mark.parametrize("whole", [1 << 20, 0], ids=["read-whole", "streamed"])
def test_verified_layout_says_the_same_whether_read_whole_or_streamed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, whole: int) -> None:
    monkeypatch.setattr("regression.store.files.WHOLE", whole)
    data, path = safetensors_bytes(), tmp_path / "t.safetensors"
    path.write_bytes(data)
    assert tensor_names(path, digest(data)) == {"t0", "t1"}
    with pytest.raises(StoreError, match="corrupt or truncated"):
        tensor_names(path, digest(data[:-1]))
    for content in (b"", b"12345678", data[:-4], b"{" + data):
        path.write_bytes(content)
        with pytest.raises(StoreError, match="not a valid safetensors file"):
            tensor_names(path, digest(content))


def test_a_tensor_file_written_just_after_it_was_verified_is_hashed_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The layout's stamp is the one the bytes were read under: a write between the read and
    a later stamp would otherwise be trusted as verified."""
    data, path = safetensors_bytes(), tmp_path / "t.safetensors"
    path.write_bytes(data)
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # settled: its times say when it changes
    real_fill = fill

    def written_after_the_read(where: Path, handle: int, buffer: bytearray) -> bytearray:
        filled = real_fill(where, handle, buffer)
        with open(where, "r+b") as stream:  # in place, the same size
            stream.seek(-1, os.SEEK_END)
            stream.write(bytes([data[-1] ^ 1]))
        return filled

    monkeypatch.setattr("regression.store.files.fill", written_after_the_read)
    layout = verified_layout(path, digest(data))
    monkeypatch.undo()
    with pytest.raises(StoreError, match="corrupt or truncated"):
        read_tensor_file(path, digest(data), layout)


@pytest.mark.parametrize("change", [b"more", None], ids=["grew", "shrank"])
def test_a_file_that_changes_size_once_opened_is_refused(tmp_path: Path,
                                                         change: bytes | None) -> None:
    path = tmp_path / "file.bin"
    path.write_bytes(b"x" * 100)
    handle, opened = opened_regular(path)
    try:
        with open(path, "r+b") as stream:
            if change is None:
                stream.truncate(60)
            else:
                stream.seek(0, os.SEEK_END)
                stream.write(change)
        with pytest.raises(StoreError, match="changed while it was read"):
            fill(path, handle, bytearray(opened.st_size))
    finally:
        os.close(handle)
    assert read_tensor_file(path, digest(path.read_bytes()))[0] == path.read_bytes()


def test_verified_layout_of_a_missing_file_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="is missing"):
        tensor_names(tmp_path / "absent.safetensors", digest(b""))


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_write_atomic_file_mode_follows_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    previous = os.umask(umask)
    try:
        write_atomic(tmp_path / "file.bin", b"data")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "file.bin").stat().st_mode) == mode


@pytest.mark.parametrize("name", [n for n in CRAFTED if n not in ("valid", "bool-byte-2")])
def test_verified_layout_refuses_crafted_layouts(tmp_path: Path, name: str) -> None:
    data = CRAFTED[name]
    (tmp_path / "t.safetensors").write_bytes(data)
    with pytest.raises(StoreError, match="not a valid safetensors file"):
        tensor_names(tmp_path / "t.safetensors", digest(data))


def test_verified_layout_accepts_the_crafted_valid_file(tmp_path: Path) -> None:
    (tmp_path / "t.safetensors").write_bytes(CRAFTED["valid"])
    assert tensor_names(tmp_path / "t.safetensors", digest(CRAFTED["valid"])) == {"a"}


def test_verified_layout_checks_the_hash_of_every_byte_past_the_header(
        tmp_path: Path) -> None:
    data = craft({"a": entry("U8", [3 << 20], 0, 3 << 20)}, bytes(3 << 20))
    (tmp_path / "t.safetensors").write_bytes(data[:-1] + b"\x01")
    with pytest.raises(StoreError, match="corrupt or truncated"):
        tensor_names(tmp_path / "t.safetensors", digest(data))


def test_read_tensor_file_of_a_folder_is_a_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="cannot be read"):
        read_tensor_file(tmp_path, digest(b""))


def test_a_file_verified_before_is_read_with_its_layout_and_not_hashed_again(
        tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(CRAFTED["valid"])
    layout = verified_layout(path, digest(CRAFTED["valid"]))
    assert [slot.name for slot in layout.slots] == ["a"]
    assert read_tensor_file(path, digest(CRAFTED["valid"]), layout) == \
        (bytearray(CRAFTED["valid"]), layout.slots)
    assert read_tensor_file(path, digest(CRAFTED["valid"])) == (bytearray(CRAFTED["valid"]), None)


def test_a_file_written_since_it_was_verified_is_hashed_again(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(CRAFTED["valid"])
    layout = verified_layout(path, digest(CRAFTED["valid"]))
    before = os.stat(path)
    with open(path, "r+b") as stream:  # the same size, in place, its mtime then set back
        stream.seek(-1, os.SEEK_END)
        stream.write(b"\x01")
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(StoreError, match="corrupt or truncated"):
        read_tensor_file(path, digest(CRAFTED["valid"]), layout)


def test_a_layout_of_another_digest_is_not_trusted(tmp_path: Path) -> None:
    path = tmp_path / "t.safetensors"
    path.write_bytes(CRAFTED["valid"])
    layout = verified_layout(path, digest(CRAFTED["valid"]))
    with pytest.raises(StoreError, match="corrupt or truncated"):
        read_tensor_file(path, digest(b"other"), layout)
