"""What two runs at once shared: the files and ports each read and wrote, row by row."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from regression.run.overlap import READ, REPLACED, WROTE, Touches, stop, taken_from, watch


def test_a_file_read_by_one_that_the_other_wrote_is_taken() -> None:
    assert taken_from({READ: ["/tmp/a", "/tmp/b"]}, {WROTE: ["/tmp/b"]}, 0.0) == ["/tmp/b"]


@pytest.mark.parametrize("mine, other", [
    ({WROTE: ["/tmp/log"]}, {WROTE: ["/tmp/log"]}),  # both write a log or a lock file
    ({WROTE: ["port 8000"]}, {WROTE: ["port 8000"]}),  # both bind a port
    ({READ: ["/tmp/x"]}, {READ: []}),
    ({}, {WROTE: ["/tmp/x"]}),  # the other wrote what this one never read
])
def test_what_carries_no_value_from_one_run_to_the_other_is_not_taken(
        mine: dict[str, list[str]], other: dict[str, list[str]]) -> None:
    assert taken_from(mine, other, 0.0) == []


def test_a_port_connected_to_that_the_other_bound_is_taken() -> None:
    assert taken_from({READ: ["port 8000"]}, {WROTE: ["port 8000"]}, 0.0) == ["port 8000"]


def test_a_file_both_read_is_taken_only_if_it_changed_while_both_ran(tmp_path: Path) -> None:
    """Native code writes unseen (torch.save); reading it back is seen."""
    old, new = tmp_path / "data-set.bin", tmp_path / "saved.pt"
    old.write_bytes(b"never changed")
    os.utime(old, (0, 0))  # mtime only: ctime is now, so the run starts after it
    since = time.time() + 1.0
    both = {READ: [str(old), "port 9000"]}
    assert taken_from(both, both, since) == []
    new.write_bytes(b"written while both ran")
    both_new = {READ: [str(new)]}
    assert taken_from(both_new, both_new, new.stat().st_ctime) == [str(new)]
    assert taken_from({READ: [str(tmp_path / "gone")]}, {READ: [str(tmp_path / "gone")]},
                      since) == [str(tmp_path / "gone")]  # gone: it was made and removed


def test_opens_are_noted_as_read_or_written_by_their_flags(tmp_path: Path) -> None:
    touches = Touches([tmp_path / "own"])
    for name in ("r", "rw", "trunc"):
        (tmp_path / name).write_text("there")
    touches.saw_open(str(tmp_path / "missing"), os.O_RDONLY)  # a probe that fails reads nothing
    touches.saw_open("/other/venv/lib/python3.11/site-packages/x.dist-info/entry_points.txt",
                     os.O_RDONLY)  # another interpreter's packages, through a .pth file
    for name, flags in [("r", os.O_RDONLY), ("w", os.O_WRONLY | os.O_CREAT),
                        ("log", os.O_WRONLY | os.O_CREAT | os.O_APPEND),
                        ("rw", os.O_RDWR), ("trunc", os.O_RDWR | os.O_TRUNC),
                        ("own/x", os.O_RDWR)]:
        touches.saw_open(str(tmp_path / name), flags)
    touches.saw_open(str(tmp_path / "__pycache__" / "m.cpython-311.pyc"), os.O_RDONLY)
    touches.saw_open("/proc/self/maps", os.O_RDONLY)
    touches.saw_open("/tmp/torchinductor_root/k.py", os.O_RDWR)
    real = os.path.realpath(tmp_path)
    assert touches.data() == {READ: [f"{real}/r", f"{real}/rw"],
                              WROTE: [f"{real}/log", f"{real}/rw", f"{real}/trunc",
                                      f"{real}/w"],
                              REPLACED: [f"{real}/rw", f"{real}/trunc", f"{real}/w"]}


def test_the_audit_hook_sees_pythons_opens_and_sockets_while_watching(tmp_path: Path) -> None:
    touches = Touches([])
    watch(touches)
    try:
        (tmp_path / "written").write_text("x")
        (tmp_path / "written").read_text()
        with socket.socket() as server:
            server.bind(("127.0.0.1", 0))  # port 0: the system picks one; no port is named
            port = server.getsockname()[1]
            server.listen()
            with socket.create_connection(("127.0.0.1", port)):
                pass
    finally:
        stop(touches)
    (tmp_path / "after").write_text("not noted")
    real = os.path.realpath(tmp_path / "written")
    assert real in touches.read and real in touches.wrote
    assert f"port {port}" in touches.read  # connected to; its bind to 0 names no port
    assert not any("after" in p for p in touches.wrote)


def test_a_file_both_wrote_from_its_start_is_taken_if_it_changed_but_no_lock(
        tmp_path: Path) -> None:
    """Native code reads unseen (safetensors' load_file, HDF5): both runs replacing one
    file while they run may each have read the other's. A lock file holds no value."""
    saved, lock = tmp_path / "export.bin", tmp_path / "suite.lock"
    saved.write_bytes(b"written while both ran")
    lock.write_bytes(b"")
    both = {WROTE: [str(saved), str(lock)], REPLACED: [str(saved), str(lock)]}
    assert taken_from(both, both, saved.stat().st_ctime) == [str(saved)]
    appended = {WROTE: [str(saved)]}  # a log both append to
    assert taken_from(appended, appended, saved.stat().st_ctime) == []
    assert taken_from(both, both, time.time() + 1.0) == []  # changed before they ran


def test_safetensors_and_sqlite_files_are_noted_though_native_code_opens_them(
        tmp_path: Path) -> None:
    import sqlite3

    import torch
    from safetensors.torch import load_file, save_file

    saved = tmp_path / "out.safetensors"
    save_file({"x": torch.ones(2)}, str(saved))
    touches = Touches([])
    watch(touches)
    try:
        load_file(str(saved))
        sqlite3.connect(str(tmp_path / "db.sqlite")).close()
        sqlite3.connect(":memory:").close()
    finally:
        stop(touches)
    assert os.path.realpath(saved) in touches.read
    assert os.path.realpath(tmp_path / "db.sqlite") in touches.wrote
