"""Adversarial cache files: each is refused with a message that names it, in bounded time.

Anyone who can write the cache can put anything there and fix up the content hash. What is
not a regular file is never opened (a FIFO would block, a device act), nothing is read through
a link, sizes are checked before reading, and JSON (records and safetensors headers alike) is
parsed within bounds. Most cases read crafted files in-process; a few real runs prove that
`invoke` ends, with exit code and message, instead of hanging. Every blocking step runs under
a timer, so a regression fails the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import stat
import struct
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
import warm_python
from helpers import Repo, output

from regression.store import inventory
from regression.store.cache import Entry
from regression.store.record import CaseRecord, Output
from regression.errors import CacheError, StoreError
from regression.store.files import MAX_RECORD, dump_verified, load_verified, verify_safetensors
from regression.fingerprint import digest

PARTS = {"format": "1", "reference": "0123456789abcdef" * 2 + "01234567", "threads": "1"}
NODEID = "tests/test_model.py::test_forward"
DEEP = 200_000
RUN_TIMEOUT = 180  # seconds an `invoke` run may take here; a hang fails instead


class Blocked(Exception):
    """A read that waited: not an OSError, so that no `except OSError` can swallow it."""


@contextmanager
def within(seconds: float) -> Iterator[None]:
    """Fail with Blocked, instead of hanging, if the block blocks (SIGALRM interrupts a
    blocking open() of a FIFO, and the handler's exception ends it)."""
    def expire(signum: int, frame: object) -> None:
        raise Blocked(f"still blocked after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refused(read: Callable[[], object], match: str, error: type[Exception] = StoreError) -> str:
    """The message of the error `read` raises, within 20 s, checked to hold `match`."""
    with within(20), pytest.raises(error, match=re.escape(match)) as caught:
        read()
    return str(caught.value)


@pytest.fixture
def entry(tmp_path: Path) -> Entry:
    """A real entry holding one case with a tensor and a scalar."""
    made = Entry(tmp_path / "cache", PARTS)
    made.create()
    made.save_case(CaseRecord(NODEID, "h", outputs=(Output("y", torch.arange(4.0)),
                                                    Output("n", 3))))
    return made


def record(entry: Entry) -> Path:
    return entry.case_path(NODEID)


def tensor_file(entry: Entry) -> Path:
    (found,) = entry.cases.glob("*.safetensors")
    return found


def write_record(path: Path, content: bytes) -> None:
    """A record of any content, its hash fixed up, as anyone with write access can make."""
    path.write_bytes(b"torch-regression " + digest(content).encode() + b"\n" + content)


def write_tensors(entry: Entry, data: bytes) -> None:
    """Crafted bytes as the case's tensor file, the record's digest fixed up to match."""
    tensor_file(entry).write_bytes(data)
    body = load_verified(record(entry))
    body["tensors"]["digest"] = digest(data)
    record(entry).write_bytes(dump_verified(body))


def safetensors(header: bytes, data: bytes = b"", length: int | None = None) -> bytes:
    return struct.pack("<Q", len(header) if length is None else length) + header + data


READERS: dict[str, Callable[[Entry], Callable[[], object]]] = {
    "plan": lambda entry: lambda: entry.valid_harness(NODEID),  # what gen, test, verify read
    "check": lambda entry: lambda: entry.load_case(NODEID),  # what the check run reads
}


# something other than a regular file in place of a file the cache wrote


def make_fifo(path: Path, valid: Path) -> None:
    os.mkfifo(path)


def make_link(path: Path, valid: Path) -> None:
    """A link to a valid copy: its content would pass every check, but it is never read."""
    path.symlink_to(valid)


def make_folder(path: Path, valid: Path) -> None:
    path.mkdir()


def make_device(path: Path, valid: Path) -> None:
    """/dev/null's device numbers under the cache's file name (needs CAP_MKNOD)."""
    try:
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except PermissionError:
        pytest.skip("making a device node needs CAP_MKNOD")


def make_socket(path: Path, valid: Path) -> None:
    """A listening Unix socket; bound by a relative name, as the full path may be too long."""
    here = Path.cwd()
    os.chdir(path.parent)
    try:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(path.name)
        server.listen(1)
    finally:
        os.chdir(here)
    SOCKETS.append(server)


SOCKETS: list[socket.socket] = []
KINDS: dict[str, tuple[Callable[[Path, Path], None], str]] = {
    "fifo": (make_fifo, "a FIFO (named pipe)"),
    "link": (make_link, "a symbolic link"),
    "folder": (make_folder, "a folder"),
    "device": (make_device, "a character device"),
    "socket": (make_socket, "a socket"),
}


@pytest.fixture(autouse=True)
def _close_sockets() -> Iterator[None]:
    yield
    while SOCKETS:
        SOCKETS.pop().close()


def replace(path: Path, kind: str, keep: Path) -> None:
    """`path` replaced by a thing of `kind`; its valid content kept at `keep`."""
    shutil.move(path, keep)
    KINDS[kind][0](path, keep)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
def test_case_record_that_is_not_a_regular_file_is_never_opened(
        entry: Entry, tmp_path: Path, kind: str, reader: str) -> None:
    path = record(entry)
    replace(path, kind, tmp_path / "valid.json")
    message = refused(READERS[reader](entry), "cannot be read")
    assert f"{path} cannot be read: it is {KINDS[kind][1]}, where the cache writes a regular " \
           "file; the cache never opens one" in message


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
def test_tensor_file_that_is_not_a_regular_file_is_never_opened(
        entry: Entry, tmp_path: Path, kind: str, reader: str) -> None:
    path = tensor_file(entry)
    replace(path, kind, tmp_path / "valid.safetensors")
    message = refused(READERS[reader](entry), "cannot be read")
    assert f"{path} cannot be read: it is {KINDS[kind][1]}" in message


@pytest.mark.parametrize("kind", KINDS)
def test_identity_file_that_is_not_a_regular_file_is_a_fault_of_verify(
        entry: Entry, tmp_path: Path, kind: str) -> None:
    path = entry.directory / "entry.json"
    replace(path, kind, tmp_path / "valid-entry.json")
    refused(lambda: Entry.from_directory(entry.directory), f"it is {KINDS[kind][1]}")
    with within(20):
        faults = inventory.verify(entry.directory.parent)
    assert faults == [f"{path} cannot be read: it is {KINDS[kind][1]}, where the cache writes "
                      "a regular file; the cache never opens one"]


def test_folder_in_place_of_a_record_stops_recording_and_is_kept(entry: Entry) -> None:
    path = record(entry)
    path.unlink()
    (path / "mine").mkdir(parents=True)
    again = CaseRecord(NODEID, "h", outputs=(Output("y", torch.arange(4.0)),))
    message = refused(lambda: entry.save_case(again), "cannot store the reference", CacheError)
    assert f"cannot write {path}: a folder is in its place, and the cache never removes a " \
           "folder it did not make: remove it yourself" in message
    assert (path / "mine").is_dir()


def test_fifo_in_place_of_last_used_is_skipped_without_waiting(entry: Entry) -> None:
    os.mkfifo(entry.directory / "last-used")
    with within(20):
        assert entry.touch() is False  # only a hint: skipped, never waited for
        assert entry.last_used() > 0
    assert stat.S_ISFIFO((entry.directory / "last-used").lstat().st_mode)


# crafted content with its hash fixed up


@pytest.mark.parametrize("reader", READERS)
def test_safetensors_header_nested_200000_deep_is_refused_not_a_recursion_error(
        entry: Entry, reader: str) -> None:
    header = b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}"
    write_tensors(entry, safetensors(header))
    message = refused(READERS[reader](entry), "not a valid safetensors file")
    assert f"the header nests too deeply ({DEEP + 1} levels, more than 3)" in message


def test_case_record_nested_200000_deep_is_refused_with_the_bound(entry: Entry) -> None:
    body = json.dumps(load_verified(record(entry)))
    write_record(record(entry), ('{"deep": ' + "[" * DEEP + "]" * DEEP + ", "
                                 + body[1:]).encode())
    for reader in READERS.values():
        message = refused(reader(entry), "is not a record this tool wrote")
        assert f"its JSON nests too deeply ({DEEP + 1} levels, more than 308)" in message


def test_brackets_inside_strings_do_not_count_as_nesting(entry: Entry) -> None:
    body = load_verified(record(entry))
    body["reason"] = "[" * 1000 + '\\"{' * 1000
    record(entry).write_bytes(dump_verified(body))
    stored = entry.valid_harness(NODEID)
    assert stored is not None and stored.digest == "h"


@pytest.mark.parametrize("length", [1 << 20, (1 << 64) - 1], ids=["past-the-file", "2^64-1"])
@pytest.mark.parametrize("reader", READERS)
def test_safetensors_header_length_past_the_file_is_refused(
        entry: Entry, reader: str, length: int) -> None:
    data = safetensors(b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}', bytes(4),
                       length=length)
    write_tensors(entry, data)
    message = refused(READERS[reader](entry), "not a valid safetensors file")
    assert f"header length {length} does not fit a file of {len(data)} bytes" in message


@pytest.mark.parametrize(("header", "problem"), [
    (b'{"a":{"dtype":"U8","shape":[1000000000000000000000000],"data_offsets":[0,1]}}',
     "the header holds an integer of 25 digits, more than 20"),
    (b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},'
     b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}',
     "the header names the key 'a' twice in one object"),
    (b'{"a":{"dtype":"U8","shape":[1e999],"data_offsets":[0,1]}}',
     "the header holds the number 1e999, out of range"),
    (b'{"a":{"dtype":"U8","shape":[Infinity],"data_offsets":[0,1]}}',
     "the header holds Infinity, which is not a JSON number"),
], ids=["huge-int", "duplicate-key", "huge-float", "infinity"])
def test_safetensors_header_numbers_and_keys_are_bounded(
        entry: Entry, header: bytes, problem: str) -> None:
    write_tensors(entry, safetensors(header, bytes(1)))
    for reader in READERS.values():
        assert problem in refused(reader(entry), "not a valid safetensors file")


@pytest.mark.parametrize(("first", "problem"), [
    ('"nodeid": "tests/other.py::test_x"', "its JSON names the key 'nodeid' twice in one object"),
    ('"extra": 1' + "0" * 31, "its JSON holds an integer of 32 digits, more than 20"),
    ('"extra": NaN', "its JSON holds NaN, which is not a JSON number"),
    ('"extra": -1e400', "its JSON holds the number -1e400, out of range"),
], ids=["duplicate-key", "huge-int", "nan", "huge-float"])
def test_case_record_keys_and_numbers_are_bounded(entry: Entry, first: str, problem: str) -> None:
    text = json.dumps(load_verified(record(entry)))
    write_record(record(entry), ("{" + first + ", " + text[1:]).encode())
    for reader in READERS.values():
        assert problem in refused(reader(entry), "is not a record this tool wrote")


def test_identity_file_with_a_number_out_of_range_is_not_trusted(entry: Entry) -> None:
    body = json.dumps(load_verified(entry.directory / "entry.json"))
    created = json.loads(body)["created"]
    write_record(entry.directory / "entry.json",
                 body.replace(json.dumps(created), "1e999").encode())
    message = refused(lambda: Entry.from_directory(entry.directory), "not a record")
    assert "its JSON holds the number 1e999, out of range" in message
    assert any("out of range" in fault for fault in inventory.verify(entry.directory.parent))


def test_record_larger_than_any_the_cache_writes_is_refused_before_reading(entry: Entry) -> None:
    with open(record(entry), "r+b") as stream:  # sparse: no disk, and never read
        stream.truncate(MAX_RECORD + (1 << 20))
    message = refused(lambda: entry.valid_harness(NODEID), "cannot be read")
    assert f"it is {MAX_RECORD + (1 << 20)} bytes, more than any file of its kind the cache " \
           "writes" in message


def test_tensor_file_that_grows_while_it_is_read_is_read_to_its_size_only(
        entry: Entry) -> None:
    """A writer appends a byte every millisecond while the file is read: reading stops at the
    size the file had when it was opened, and says why."""
    count = 48 << 20
    data = safetensors(json.dumps({"a": {"dtype": "U8", "shape": [count],
                                         "data_offsets": [0, count]}}).encode(), bytes(count))
    write_tensors(entry, data)
    path, growing, done = tensor_file(entry), threading.Event(), threading.Event()

    def grow() -> None:
        with open(path, "ab", buffering=0) as stream:
            while not done.wait(0.001):
                stream.write(b"\0")
                growing.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)  # the writer gets its turns while the file is read
    writer = threading.Thread(target=grow, daemon=True)
    writer.start()
    try:
        assert growing.wait(20)
        message = refused(lambda: verify_safetensors(path, digest(data)), f"{path} ")
    finally:
        done.set()
        writer.join()
        sys.setswitchinterval(interval)
    assert message == f"{path} changed while it was read"


# leftovers of a removal or creation cut short (kill -9)


def half_removed(entry: Entry) -> Path:
    """What `remove_folder` leaves when killed inside rmtree: no identity file, some files."""
    (entry.directory / "entry.json").unlink()
    tensor_file(entry).unlink()
    return entry.directory


def test_clear_reclaims_a_half_removed_entry_and_leaves_a_folder_with_a_stranger(
        entry: Entry, tmp_path: Path) -> None:
    cache = entry.directory.parent
    other = Entry(cache, {**PARTS, "threads": "2"})
    other.create()
    other.save_case(CaseRecord(NODEID, "h", outputs=(Output("y", 1),)))
    (other.directory / "entry.json").unlink()
    (other.cases / "notes.txt").write_text("mine\n")
    leftover = half_removed(entry)
    (listed,) = [i for i in inventory.entries(cache) if i.directory == leftover]
    assert listed.leftover and "it holds only files the cache writes" in listed.fault
    removed = inventory.clear(cache)
    assert [i.directory for i in removed] == [leftover] and not leftover.exists()
    assert inventory.removed_lines(removed) == [
        f"removed {leftover} ({inventory.human_size(removed[0].size)}): not an entry, but a "
        "leftover holding only files the cache writes", "removed 1 entries"]
    (kept,) = inventory.foreign(cache)
    assert kept.directory == other.directory
    assert "it holds cases/notes.txt (a file), which the cache never writes" in kept.fault
    assert (other.cases / "notes.txt").read_text() == "mine\n"


def test_prune_reclaims_a_leftover_whatever_its_limits_and_keeps_the_entries(
        entry: Entry) -> None:
    cache = entry.directory.parent
    kept = Entry(cache, {**PARTS, "threads": "2"})
    kept.create()
    unfinished = cache / ("c" * 32)  # a creation cut short: only its temporary identity file
    unfinished.mkdir()
    (unfinished / ".entry.json.k3x_9a0b.tmp").write_bytes(b"half")
    leftover = half_removed(entry)
    removed = inventory.prune(cache, max_size=1 << 40, older_than=None)
    assert sorted(i.directory for i in removed) == sorted([leftover, unfinished])
    assert kept.exists() and not leftover.exists() and not unfinished.exists()


@pytest.mark.parametrize("stranger", ["link", "fifo", "folder", "identity"])
def test_leftover_holding_anything_else_is_left_alone_saying_what(
        entry: Entry, tmp_path: Path, stranger: str) -> None:
    leftover = half_removed(entry)
    target = tmp_path / "precious.txt"
    target.write_text("keep\n")
    thing = leftover / "cases" / "0123456789abcdef.json"
    record(entry).unlink()
    {"link": lambda: thing.symlink_to(target), "fifo": lambda: os.mkfifo(thing),
     "folder": lambda: thing.mkdir(),
     "identity": lambda: (leftover / "entry.json").write_bytes(b"garbage")}[stranger]()
    with within(20):
        assert inventory.clear(leftover.parent) == []
        assert inventory.prune(leftover.parent, max_size=0, older_than=0.0) == []
    (info,) = inventory.foreign(leftover.parent)
    assert info.directory == leftover and thing.parent.exists()
    kind = {"link": "a symbolic link", "fifo": "a special file", "folder": "a folder"}
    if stranger == "identity":
        assert "corrupt or truncated" in info.fault and "which the cache never" not in info.fault
    else:
        assert f"it holds cases/{thing.name} ({kind[stranger]}), which the cache never writes" \
               in info.fault
    assert target.read_text() == "keep\n"


# real runs: they end, with the exit code and the message


@pytest.fixture
def bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """`Repo.invoke` gives up after RUN_TIMEOUT s (TimeoutError) instead of 600."""
    monkeypatch.setattr(warm_python, "TIMEOUT", RUN_TIMEOUT)


def _stored(repo: Repo) -> tuple[Path, Path]:
    """The recorded case's record and tensor file."""
    (folder,) = [p for p in repo.cache.iterdir() if p.is_dir()]
    (case,) = (folder / "cases").glob("*.json")
    (tensors,) = (folder / "cases").glob("*.safetensors")
    return case, tensors


def _fifo_record(repo: Repo) -> tuple[Path, str]:
    case, _ = _stored(repo)
    case.unlink()
    os.mkfifo(case)
    return case, "it is a FIFO (named pipe), where the cache writes a regular file"


def _deep_header(repo: Repo) -> tuple[Path, str]:
    case, tensors = _stored(repo)
    data = safetensors(b'{"a":' + b"[" * DEEP + b"]" * DEEP + b"}")
    tensors.write_bytes(data)
    body = load_verified(case)
    body["tensors"]["digest"] = digest(data)
    case.write_bytes(dump_verified(body))
    return tensors, f"the header nests too deeply ({DEEP + 1} levels, more than 3)"


@pytest.mark.slow
@pytest.mark.parametrize("damage", [_fifo_record, _deep_header], ids=["fifo", "deep-header"])
def test_invoke_ends_with_the_message_and_test_records_again(
        recorded_subject_repo: Repo, bounded: None,
        damage: Callable[[Repo], tuple[Path, str]]) -> None:
    repo = recorded_subject_repo
    path, problem = damage(repo)
    stopped = repo.invoke("test", "--no-gen")
    assert stopped.returncode == 2, output(stopped)
    assert f"{path}" in stopped.stderr and problem in stopped.stderr
    assert "Run `invoke gen`" in stopped.stderr
    verified = repo.invoke("cache.verify")
    assert verified.returncode == 1, output(verified)
    assert f"FAULT {path}" in verified.stdout and problem in verified.stdout
    done = repo.invoke("test")
    assert done.returncode == 0, output(done)
    assert f"warning: re-recording tests/test_subj.py::test_forward: {path}" in done.stdout
    assert "1 identical, 0 changed" in done.stdout
    for run in (stopped, verified, done):
        text = output(run)
        assert "Traceback" not in text and "INTERNALERROR" not in text, text


@pytest.mark.slow
def test_invoke_clear_reclaims_a_leftover_and_says_what_it_leaves(
        recorded_subject_repo: Repo, bounded: None) -> None:
    repo = recorded_subject_repo
    case, tensors = _stored(repo)
    leftover = case.parent.parent
    (leftover / "entry.json").unlink()
    tensors.unlink()
    stranger = repo.cache / ("e" * 32)
    shutil.copytree(leftover, stranger)
    (stranger / "last-used").unlink(missing_ok=True)
    (stranger / "README").write_text("the user's\n")
    listed = repo.invoke("cache.list")
    assert listed.returncode == 0, output(listed)
    assert "NOT AN ENTRY, a leftover:" in listed.stdout
    assert "NOT AN ENTRY, left alone:" in listed.stdout
    cleared = repo.invoke("cache.clear")
    assert cleared.returncode == 0, output(cleared)
    assert f"removed {leftover} (" in cleared.stdout
    assert "not an entry, but a leftover holding only files the cache writes" in cleared.stdout
    assert "removed 1 entries" in cleared.stdout
    assert f"left alone, not provably a cache entry: {stranger}: {stranger}/entry.json is " \
           "missing; it holds README (a file), which the cache never writes" in cleared.stdout
    assert not leftover.exists() and (stranger / "README").read_text() == "the user's\n"

