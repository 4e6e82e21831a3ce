"""Adversarial revisions and git settings: every bad revision is a clear error, and no git
call runs the repository's hooks. Real repositories and real git; in-process where a
subprocess adds nothing, a few real `invoke` runs for the exit code at the task boundary."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
from pathlib import Path

import pytest
from helpers import Repo, init_repo, output

from regression.errors import RevisionError
from regression.gitcmd import open_repo
from regression.revision import resolve_revision
from regression.worktree import reference_worktree


@pytest.fixture
def history(tmp_path: Path) -> Repo:
    """Three commits on main; `v1` is a tag on the first and a branch on the last."""
    repo = init_repo(tmp_path / "repo", tmp_path / "cache")
    for n in range(3):
        repo.write("file.txt", f"version {n}\n")
        repo.commit(f"commit {n}")
    repo.git("tag", "-a", "v1", "-m", "release", "HEAD~2")
    repo.git("branch", "v1", "HEAD")
    return repo


def refused(repo: Repo, revision: str) -> str:
    """The message of the RevisionError that resolving `revision` raises."""
    with pytest.raises(RevisionError) as info:
        resolve_revision(open_repo(repo.path), revision)
    return str(info.value)


def write_object(repo: Repo, kind: str, body: bytes) -> str:
    done = subprocess.run(["git", "hash-object", "-t", kind, "-w", "--stdin"], cwd=repo.path,
                          input=body, capture_output=True, check=True)
    return done.stdout.decode().strip()


def _commit_body(repo: Repo, n: int) -> bytes:
    tree, parent = repo.git("rev-parse", "HEAD^{tree}"), repo.git("rev-parse", "HEAD")
    person = "Test <test@example.com> 1700000000 +0000"
    return (f"tree {tree}\nparent {parent}\nauthor {person}\ncommitter {person}\n\n"
            f"candidate {n}\n").encode()


def _sha1(kind: str, body: bytes) -> str:
    return hashlib.sha1(f"{kind} {len(body)}\0".encode() + body).hexdigest()


def commits_sharing_a_prefix(repo: Repo) -> tuple[str, str, str]:
    """Two new commits whose SHAs start with the same 4 hex digits, and that prefix."""
    seen: dict[str, bytes] = {}
    for n in itertools.count():
        body = _commit_body(repo, n)
        prefix = _sha1("commit", body)[:4]
        if prefix in seen:
            first, second = write_object(repo, "commit", seen[prefix]), \
                write_object(repo, "commit", body)
            assert first[:4] == second[:4] == prefix and first != second
            return first, second, prefix
        seen[prefix] = body
    raise AssertionError("unreachable")


# --- names that mean two things -----------------------------------------------------------

@pytest.mark.parametrize("revision", ["v1", "v1~1"])
def test_a_name_that_is_a_tag_and_a_branch_is_refused_naming_both(history: Repo,
                                                                 revision: str) -> None:
    message = refused(history, revision)
    tag, branch = history.git("rev-parse", "v1^{commit}"), history.git("rev-parse", "heads/v1")
    assert f"{revision!r} is ambiguous: 'v1' is the tag refs/tags/v1 (commit {tag[:12]}) and " \
           f"the branch refs/heads/v1 (commit {branch[:12]})" in message
    rest = revision[2:]
    assert f"Fix: write the one you mean in full, 'refs/tags/v1{rest}' or " \
           f"'refs/heads/v1{rest}'" in message


def test_the_name_written_in_full_resolves(history: Repo) -> None:
    repo = open_repo(history.path)
    assert resolve_revision(repo, "refs/heads/v1") == history.git("rev-parse", "HEAD")
    assert resolve_revision(repo, "refs/tags/v1") == history.git("rev-parse", "HEAD~2")


def test_a_local_branch_wins_over_a_remote_one_of_the_same_short_name(history: Repo) -> None:
    history.git("update-ref", "refs/remotes/origin/main", "HEAD~1")
    repo = open_repo(history.path)
    assert resolve_revision(repo, "main") == history.git("rev-parse", "HEAD")
    assert resolve_revision(repo, "origin/main") == history.git("rev-parse", "HEAD~1")


def test_a_branch_only_on_the_remote_says_how_to_name_it(history: Repo) -> None:
    history.git("update-ref", "refs/remotes/origin/feature", "HEAD~1")
    message = refused(history, "feature~1")
    assert "there is no tag or local branch 'feature', only the remote branch origin/feature" \
        in message
    assert "Fix: write 'origin/feature~1'" in message
    assert "`git branch feature origin/feature`" in message
    assert resolve_revision(open_repo(history.path), "origin/feature~1") == \
        history.git("rev-parse", "HEAD~2")


# --- abbreviated SHAs -----------------------------------------------------------------------

def test_a_short_sha_two_commits_share_lists_the_candidates(history: Repo) -> None:
    first, second, prefix = commits_sharing_a_prefix(history)
    message = refused(history, prefix)
    assert f"the short SHA {prefix!r} is ambiguous: " in message
    assert f"  {first[:12]} commit 2023-11-14 - candidate " in message
    assert f"  {second[:12]} commit 2023-11-14 - candidate " in message
    assert "does not exist" not in message
    assert "Fix: write more of the SHA" in message
    assert refused(history, f"{prefix}~1").startswith(f"the short SHA {prefix!r} is ambiguous")
    assert resolve_revision(open_repo(history.path), first[:12]) == first


def test_a_short_sha_of_one_commit_and_a_file_is_the_commit_as_in_git(history: Repo) -> None:
    head = history.git("rev-parse", "HEAD")
    body = next(b for n in itertools.count() if _sha1("blob", b := f"{n}\n".encode())[:4]
                == head[:4])
    blob = write_object(history, "blob", body)
    assert blob[:4] == head[:4]
    assert resolve_revision(open_repo(history.path), head[:4]) == head


# --- malformed ------------------------------------------------------------------------------

@pytest.mark.parametrize("revision", ["", "   "])
def test_an_empty_revision_is_refused(history: Repo, revision: str) -> None:
    message = refused(history, revision)
    assert message.startswith(f"the revision is empty ({revision!r}), so it names no commit")
    assert "Fix: give a tag, branch, commit SHA or expression like HEAD~1" in message


@pytest.mark.parametrize("revision", ["-x", "--all", "--output=stolen", "--git-dir=/"])
def test_a_revision_with_a_leading_dash_is_never_an_option(history: Repo,
                                                           revision: str) -> None:
    message = refused(history, revision)
    assert f"{revision!r} is not a revision: it starts with '-', which git would read as an " \
           "option" in message
    assert not (history.path / "stolen").exists()


def test_stepping_back_past_the_first_commit_says_how_far_history_goes(history: Repo) -> None:
    message = refused(history, "HEAD~99")
    assert "'HEAD' is a commit, but '~99' steps back past its history, which has 3 commit(s) " \
           "along first parents (the oldest is HEAD~2)" in message
    assert "Fix: step back fewer commits" in message
    assert "check the spelling" not in message


def test_a_tree_is_not_a_commit(history: Repo) -> None:
    tree = history.git("rev-parse", "HEAD^{tree}")
    assert f"{tree!r} names a directory (a git tree), not a commit" in refused(history, tree)


# --- git runs no hooks, no file-system monitor -----------------------------------------------

def _hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("where", [".git/hooks", "versioned-hooks"],
                         ids=["hooks folder", "core.hooksPath"])
def test_making_the_worktree_runs_none_of_the_repositorys_hooks(history: Repo, tmp_path: Path,
                                                                where: str) -> None:
    marker = tmp_path / "hook-ran"
    for name in ("post-checkout", "reference-transaction", "post-index-change"):
        _hook(history.path / where / name, marker)
    if where != ".git/hooks":
        history.git("config", "core.hooksPath", where)
    history.git("checkout", "-q", "HEAD~1")  # the hook works where git runs it
    assert marker.read_text().startswith("ran"), "precondition: git runs this hook"
    marker.unlink()
    history.git("checkout", "-q", "main")
    marker.unlink()
    repo = open_repo(history.path)
    with reference_worktree(repo, resolve_revision(repo, "refs/tags/v1")) as folder:
        assert (folder / "file.txt").read_text() == "version 0\n"
    assert not marker.exists()


def test_no_file_system_monitor_is_started(history: Repo, tmp_path: Path) -> None:
    marker = tmp_path / "monitor-ran"
    _hook(tmp_path / "monitor.sh", marker)
    history.git("config", "core.fsmonitor", str(tmp_path / "monitor.sh"))
    history.git("status", "--porcelain")
    assert marker.exists(), "precondition: git asks this monitor"
    marker.unlink()
    repo = open_repo(history.path)
    with reference_worktree(repo, resolve_revision(repo, "HEAD~1")) as folder:
        assert (folder / "file.txt").read_text() == "version 1\n"
    assert not marker.exists()


def test_a_smudge_filter_applies_in_the_worktree_as_in_a_checkout(history: Repo) -> None:
    """Kept on purpose: the reference's files must be the bytes a checkout gives (git LFS)."""
    history.git("config", "filter.upper.smudge", "tr a-z A-Z")
    history.git("config", "filter.upper.clean", "cat")
    history.write(".gitattributes", "*.txt filter=upper\n")
    history.commit("filtered")
    repo = open_repo(history.path)
    with reference_worktree(repo, resolve_revision(repo, "HEAD")) as folder:
        assert (folder / "file.txt").read_text() == "VERSION 2\n"


# --- at the task boundary: exit 2, the message, no traceback --------------------------------

def test_bad_revisions_through_invoke_exit_2_without_traceback(subject_repo: Repo) -> None:
    subject_repo.git("branch", "v1", "HEAD")
    first, _, prefix = commits_sharing_a_prefix(subject_repo)
    for revision, words in [("v1", "'v1' is ambiguous: 'v1' is the tag refs/tags/v1"),
                            (prefix, f"the short SHA {prefix!r} is ambiguous: "),
                            ("", "--reference '' is empty (an unset variable in CI?)")]:
        done = subject_repo.invoke("gen", "--reference", revision)
        assert done.returncode == 2, output(done)
        assert words in output(done)
        assert "Traceback" not in output(done)
        assert revision != prefix or f"{first[:12]} commit" in output(done)


def test_invoke_gen_runs_no_hook_of_the_repository(subject_repo: Repo, tmp_path: Path) -> None:
    marker = tmp_path / "hook-ran"
    _hook(subject_repo.path / ".git" / "hooks" / "post-checkout", marker)
    done = subject_repo.invoke("gen")
    assert done.returncode == 0, output(done)
    assert "recorded" in output(done).lower() or "stored" in output(done).lower(), output(done)
    assert not marker.exists()
    assert os.listdir(subject_repo.cache)
