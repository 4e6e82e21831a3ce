"""Revisions and worktrees, on real repositories through real git."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers import Repo, init_repo

from regression.errors import RevisionError
from regression.revision import _worktree_parent, open_repo, prune_stale_worktrees, \
    reference_worktree, resolve_revision


@pytest.fixture
def history(tmp_path: Path) -> Repo:
    repo = init_repo(tmp_path / "repo", tmp_path / "cache")
    for n in range(3):
        repo.write("file.txt", f"version {n}\n")
        repo.commit(f"commit {n}")
        if n == 0:
            repo.git("tag", "-a", "first", "-m", "annotated")
            repo.git("tag", "light")
            repo.git("branch", "old")
    return repo


@pytest.mark.parametrize("revision", ["first", "light", "old", "HEAD~2", "main~2", "main^^"])
def test_revisions_resolve_to_the_commit_sha(history: Repo, revision: str) -> None:
    expected = history.git("rev-list", "--max-parents=0", "HEAD")
    assert resolve_revision(open_repo(history.path), revision) == expected


def test_full_and_abbreviated_sha_resolve(history: Repo) -> None:
    sha = history.git("rev-parse", "HEAD~1")
    repo = open_repo(history.path)
    assert resolve_revision(repo, sha) == sha
    assert resolve_revision(repo, sha[:8]) == sha


def test_annotated_tag_is_peeled_to_its_commit(history: Repo) -> None:
    tag_object = history.git("rev-parse", "first")
    sha = resolve_revision(open_repo(history.path), "first")
    assert sha != tag_object
    assert history.git("cat-file", "-t", sha) == "commit"


@pytest.mark.parametrize("revision", ["no-such-tag", "HEAD~10", "0" * 40, "--all"])
def test_unknown_revision_says_what_to_do(history: Repo, revision: str) -> None:
    with pytest.raises(RevisionError) as error:
        resolve_revision(open_repo(history.path), revision)
    assert revision in str(error.value)
    assert "Fix" in str(error.value) or "not a revision" in str(error.value)


def test_shallow_clone_error_names_fetch_depth(history: Repo, tmp_path: Path) -> None:
    clone = tmp_path / "shallow"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{history.path}", str(clone)],
                   check=True)
    with pytest.raises(RevisionError) as error:
        resolve_revision(open_repo(clone), "HEAD~1")
    assert "shallow" in str(error.value)
    assert "fetch-depth: 0" in str(error.value)


def test_worktree_holds_the_reference_and_is_removed(history: Repo) -> None:
    before = history.snapshot()
    repo = open_repo(history.path)
    sha = resolve_revision(repo, "first")
    with reference_worktree(repo, sha) as folder:
        assert (folder / "file.txt").read_text() == "version 0\n"
        assert str(folder) in history.git("worktree", "list")
    assert not folder.exists()
    assert str(folder) not in history.git("worktree", "list")
    assert history.snapshot() == before


def test_worktree_is_removed_after_an_error(history: Repo) -> None:
    repo = open_repo(history.path)
    with pytest.raises(KeyboardInterrupt):
        with reference_worktree(repo, resolve_revision(repo, "HEAD")) as folder:
            raise KeyboardInterrupt
    assert not folder.exists()
    assert str(folder) not in history.git("worktree", "list")


def test_stale_worktree_of_a_dead_process_is_pruned(history: Repo) -> None:
    repo = open_repo(history.path)
    finished = subprocess.Popen(["true"])
    finished.wait()
    stale = _worktree_parent(repo) / f"{finished.pid}-deadbeef"
    history.git("worktree", "add", "--detach", "-q", str(stale), "HEAD")
    assert str(stale) in history.git("worktree", "list")
    removed = prune_stale_worktrees(repo)
    assert stale in removed
    assert not stale.exists()
    assert str(stale) not in history.git("worktree", "list")
