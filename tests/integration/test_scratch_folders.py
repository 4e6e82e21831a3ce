"""Scratch folders: a run leaves nothing of its own in the temporary folder, whatever ends
it, and removes what killed runs left there, only the folders provably theirs."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from helpers import SUBJECT, Repo, output

from regression.store.scratch import MARKER, remove_stale, scratch_folder


def _dead_pid() -> int:
    """The id of a process that has ended."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _run_folder(parent: Path, name: str, marker: str | None) -> Path:
    folder = parent / name
    folder.mkdir()
    (folder / "job.json").write_text("{}")
    if marker is not None:
        (folder / MARKER).write_text(marker)
    return folder


def test_only_provably_ours_folders_of_dead_runs_are_removed(tmp_path: Path) -> None:
    dead = _dead_pid()
    ours = f"torch-regression run of process {dead}\n"
    removed = _run_folder(tmp_path, "torch-regression-job-x1", ours)
    kept = [
        _run_folder(tmp_path, "torch-regression-job-alive",
                    f"torch-regression run of process {os.getpid()}\n"),
        _run_folder(tmp_path, "torch-regression-lookalike", None),
        _run_folder(tmp_path, "torch-regression-garbled", f"run of process {dead}\n"),
        _run_folder(tmp_path, "other-job-x2", ours),  # not our name
    ]
    linked = _run_folder(tmp_path, "torch-regression-linked-marker", None)
    (linked / MARKER).symlink_to(removed / MARKER)
    elsewhere = _run_folder(tmp_path, "elsewhere", ours)
    (tmp_path / "torch-regression-link").symlink_to(elsewhere)
    assert remove_stale(tmp_path) == [removed]
    assert not removed.exists()
    for folder in [*kept, linked, elsewhere]:
        assert (folder / "job.json").is_file(), folder
    assert (tmp_path / "torch-regression-link").is_symlink()


def test_a_scratch_folder_is_removed_whatever_ends_its_run(tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(KeyboardInterrupt), scratch_folder("job") as folder:
        assert (folder / MARKER).read_text() == f"torch-regression run of process {os.getpid()}\n"
        raise KeyboardInterrupt
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_runs_leave_nothing_in_the_temporary_folder_and_clean_what_killed_runs_left(
        subject_repo: Repo, tmp_path: Path) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    killed = _run_folder(temporary, "torch-regression-job-killed",
                         f"torch-regression run of process {_dead_pid()}\n")
    lookalike = _run_folder(temporary, "torch-regression-notes", None)
    worktrees = temporary / "torch-regression-worktrees"
    (worktrees / "0123456789abcdef").mkdir(parents=True)  # left empty by an earlier version
    (worktrees / "fedcba9876543210").mkdir()
    (worktrees / "fedcba9876543210" / "keep").write_text("not empty: not removed")
    env = {"TMPDIR": str(temporary)}
    gen = subject_repo.invoke("gen", env=env, process=True)
    assert gen.returncode == 0, output(gen)
    assert "recorded 1 cases" in gen.stdout
    assert not killed.exists() and (lookalike / "job.json").is_file()
    assert sorted(p.name for p in temporary.iterdir()) == ["torch-regression-notes",
                                                          "torch-regression-worktrees"]
    assert [p.name for p in worktrees.iterdir()] == ["fedcba9876543210"]
    subject_repo.write("subj/__init__.py", SUBJECT.format(scale="2.0"))
    explained = subject_repo.invoke("explain", "--case", "tests/test_subj.py::test_forward",
                                    env=env, process=True)
    assert explained.returncode == 0, output(explained)
    assert sorted(p.name for p in temporary.iterdir()) == ["torch-regression-notes",
                                                          "torch-regression-worktrees"]
    assert [p.name for p in worktrees.iterdir()] == ["fedcba9876543210"]
    assert json.loads((lookalike / "job.json").read_text()) == {}
