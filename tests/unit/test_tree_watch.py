"""Tests of regression.plugin.tree_watch's look at the files mapped into the process: a file
of the user's tree that native code mapped is seen, whatever else the maps list."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from regression.plugin.tree_watch import TreeWatch, stop_watching, watch_tree


@pytest.fixture
def watched(tmp_path: Path) -> Iterator[TreeWatch]:
    """An active watch of a project with a subject folder and tests."""
    project = tmp_path / "project"
    for name in ("subj", "tests"):
        (project / name).mkdir(parents=True)
    watch = TreeWatch(project, [], [], [project / "subj"], [project / "tests"],
                      keyed=[project / "subj"])
    watch_tree(watch)
    try:
        yield watch
    finally:
        stop_watching()


def test_a_file_mapped_without_an_audit_event_is_seen(watched: TreeWatch) -> None:
    if not Path("/proc/self/maps").is_file():
        pytest.skip("no /proc/self/maps here")
    weights = watched.project / "subj" / "weights.bin"
    weights.write_bytes(b"w" * 8192)
    stop_watching()  # opened and mapped as native code would: no event reaches the watch
    handle = os.open(weights, os.O_RDONLY)
    try:
        mapped = mmap.mmap(handle, 0, access=mmap.ACCESS_READ)
    finally:
        os.close(handle)
    watch_tree(watched)
    try:
        assert watched.seen == {}
        watched.saw_mappings()
    finally:
        mapped.close()
    assert watched.sorted_out([])[0] == {"subj/weights.bin": "read; the subject's"}


def test_every_line_that_maps_a_project_file_counts_and_no_other(watched: TreeWatch,
                                                                  tmp_path: Path) -> None:
    project = watched.project
    names = ("a.bin", "with space.bin", "gone.bin", "last.bin", "twice.bin")
    for name in names:
        (project / "subj" / name).write_bytes(b"0")
    outside = tmp_path / "elsewhere" / str(project).lstrip("/") / "subj" / "x.bin"
    maps = tmp_path / "maps"
    maps.write_bytes(
        f"7f00-7f01 r--s 00000000 08:01 42   {project}/subj/a.bin\n"
        "7f01-7f02 r-xp 00000000 08:01 43   /usr/lib/libc.so.6\n"
        f"7f02-7f03 r--p 00000000 08:01 44   {project}/subj/with space.bin\n"
        f"7f03-7f04 r--p 00000000 08:01 45   {outside}\n"
        "7f04-7f05 rw-p 00000000 00:00 0 \n"
        f"7f05-7f06 r--p 00000000 08:01 46   {project}/subj/gone.bin (deleted)\n"
        f"7f06-7f07 r--p 00000000 08:01 47   {project}/subj/twice.bin\n"
        f"7f07-7f08 r--p 00001000 08:01 47   {project}/subj/twice.bin\n"
        f"7f08-7f09 r--p 00000000 08:01 48   {project}/subj/last.bin".encode())
    watched.saw_mappings(maps)
    assert watched.sorted_out([])[0] == {f"subj/{name}": "read; the subject's"
                                         for name in names}


def test_a_project_path_outside_the_path_field_is_no_mapping(watched: TreeWatch,
                                                             tmp_path: Path) -> None:
    (watched.project / "subj" / "a.bin").write_bytes(b"0")
    maps = tmp_path / "maps"
    maps.write_bytes(f"{watched.project}/subj/a.bin r--p 0 08:01 42\n".encode())
    watched.saw_mappings(maps)
    assert watched.seen == {}


def test_no_maps_to_read_is_no_error(watched: TreeWatch, tmp_path: Path) -> None:
    watched.saw_mappings(tmp_path / "absent")
    assert watched.seen == {}


def test_the_tool_s_own_reads_are_not_the_user_s(watched: TreeWatch) -> None:
    """A read inside own_reads() is not noted; the same read outside it is, and so is one
    another thread makes meanwhile."""
    import threading

    from regression.plugin.tree_watch import own_reads

    data = watched.project / "requirements.txt"
    data.write_text("numpy\n")
    other = watched.project / "other.txt"
    other.write_text("x\n")
    with own_reads():
        data.read_text()
        reader = threading.Thread(target=other.read_text)
        reader.start()
        reader.join()
    assert watched.sorted_out([])[0] == {"other.txt": "read"}
    data.read_text()
    assert watched.sorted_out([])[0] == {"other.txt": "read", "requirements.txt": "read"}


@pytest.mark.parametrize("reader", ["torch.from_file", "numpy.fromfile", "safetensors"])
def test_a_file_read_by_native_code_that_keeps_no_mapping_is_seen(watched: TreeWatch,
                                                                   reader: str) -> None:
    """Readers whose native code opens the file: numpy's raises the "open" event itself;
    torch.from_file and safetensors' loaders are wrapped to raise it (run/overlap.py)."""
    import numpy
    import torch
    from safetensors.torch import load_file, save_file

    data = watched.project / "tests" / "data.bin"
    stop_watching()
    save_file({"x": torch.ones(4)}, str(data)) if reader == "safetensors" else \
        numpy.ones(4, dtype="float32").tofile(data)
    watch_tree(watched)
    if reader == "torch.from_file":
        value = torch.from_file(str(data), size=4, dtype=torch.float32).clone()
    elif reader == "numpy.fromfile":
        value = torch.from_numpy(numpy.fromfile(str(data), dtype="float32"))
    else:
        value = load_file(str(data))["x"]
    assert torch.equal(value, torch.ones(4))
    watched.saw_mappings()  # nothing is mapped any more: the event alone tells
    assert watched.sorted_out([]) == ({}, [data])  # a helper of the tests: hashed


def _read_in(folder: Path, name: str, code: str) -> None:
    """Run `code` as the code of a file in `folder` would (its frames name that file)."""
    path = folder / name
    path.write_text(code)
    exec(compile(code, str(path), "exec"), {"os": os})  # noqa: S102 - the test's own code


def test_each_way_the_subject_reads_a_variable_is_seen(
        watched: TreeWatch, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUBJ_A", "1")
    _read_in(watched.project / "subj", "config.py",
             "os.environ['SUBJ_A']\nos.environ.get('SUBJ_B')\n'SUBJ_C' in os.environ\n"
             "os.getenv('SUBJ_D', 'x')\n")
    assert watched.variables_read() == ["SUBJ_A", "SUBJ_B", "SUBJ_C", "SUBJ_D"]


def test_reads_by_others_and_copies_of_the_environment_are_not_the_subject_s_settings(
        watched: TreeWatch, tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    _read_in(tmp_path / "elsewhere", "lib.py", "os.environ.get('LIB_ONLY')\n")  # a package's
    _read_in(watched.project / "tests", "test_x.py", "os.environ.get('TEST_SWITCH')\n")
    _read_in(watched.project / "subj", "spawn.py",
             "env = dict(os.environ)\nfor k in ('A1', 'A2', 'A3', 'A4'): os.environ.get(k)\n"
             "copied = os.environ.copy()\nimport shutil, tempfile\n"
             "shutil.get_terminal_size()\nos.path.expanduser('~')\n")  # the stdlib's own
    os.environ.get("THIS_TEST_ONLY")  # this file lies outside the watched project
    assert watched.variables_read() == []
    stop_watching()
    _read_in(watched.project / "subj", "late.py", "os.environ.get('AFTER_THE_WATCH')\n")
    assert watched.variables_read() == []


def test_a_question_is_the_user_s_only_and_of_the_reference_outside_its_subject(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Who asked decides (the user's code; not an installed package's, even one installed
    inside the project), and what was asked about: the reference's paths outside its
    subject's code that its commit holds (a model's name tried as a path is no file, a
    folder the recording made is its own, a folder above the subject's is its path); its
    root only as a folder listed."""
    import subprocess
    from regression.plugin import tree_watch

    project, reference = tmp_path / "project", tmp_path / "worktree"
    for folder in (project / "tests", project / ".venv" / "site-packages",
                   reference / "src" / "subj"):
        folder.mkdir(parents=True)
    installed = project / ".venv" / "site-packages"
    monkeypatch.setattr(tree_watch, "library_folders", lambda: (installed,))
    for there in ("FAST_PATH", "RELEASE", "src/subj/__init__.py", "pyproject.toml", "setup.py"):
        (reference / there).write_text("")
    for command in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c",
                                                    "user.email=t@t", "commit", "-qm", "r"]):
        subprocess.run(["git", *command], cwd=reference, check=True)
    (reference / "runs").mkdir()  # made by the recording: no file of the commit
    watch = TreeWatch(project, [], [], [project / "subj"], [project / "tests"], reference,
                      keyed=[reference / "src" / "subj"])
    user, library = str(project / "tests" / "test_a.py"), str(installed / "lib.py")
    watch.saw_question(reference / "FAST_PATH", "asked about", user)
    watch.saw_question(reference / "resnet50", "asked about", user)  # a name, not a file
    watch.saw_question(reference / ".git", "asked about", user)  # every checkout has one
    for marker in ("pyproject.toml", "setup.py"):  # asked to find the project's top
        watch.saw_question(reference / marker, "asked about", user)
    watch.saw_question(reference / "runs", "listed", user)
    watch.saw_question(reference / "src", "asked about", user)  # realpath of the subject's
    watch.saw_question(reference / "src" / "subj" / "w.bin", "asked about", user)
    watch.saw_question(reference / "RELEASE", "asked about", library)  # not the user's asking
    watch.saw_question(reference, "asked about", user)  # the root itself: nothing of it
    watch.saw_question(reference, "listed", user)  # but what it holds
    watch.saw_question(tmp_path / "elsewhere", "asked about", user)  # not the reference's
    assert watch.reference_reads() == {"FAST_PATH": "asked about", ".": "listed"}
