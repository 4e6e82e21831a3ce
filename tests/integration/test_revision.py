"""Revisions and worktrees, on real repositories through real git."""

from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Repo, init_repo, output

from regression.errors import RevisionError
from regression.repository.gitcmd import open_repo
from regression.repository.revision import resolve_revision
from regression.repository.worktree import _worktree_parent, prune_stale_worktrees, \
    reference_worktree


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


# A run killed inside `git worktree add` leaves the entry locked ("initializing").
@pytest.mark.parametrize("locked", [False, True], ids=["unlocked", "locked by a killed add"])
def test_stale_worktree_of_a_dead_process_is_pruned(history: Repo, locked: bool) -> None:
    repo = open_repo(history.path)
    finished = subprocess.Popen(["true"])
    finished.wait()
    stale = _worktree_parent(repo) / f"{finished.pid}-deadbeef"
    stale.mkdir(parents=True)  # as a run makes it: no other test's pruning takes a parent
    history.git("worktree", "add", "--detach", "-q", str(stale), "HEAD")
    if locked:
        history.git("worktree", "lock", "--reason", "initializing", str(stale))
    assert str(stale) in history.git("worktree", "list")
    removed = prune_stale_worktrees(repo)
    assert stale in removed
    assert not stale.exists()
    assert str(stale) not in history.git("worktree", "list")


def test_repository_without_commits_says_commit_first(tmp_path: Path) -> None:
    empty = init_repo(tmp_path / "empty", tmp_path / "cache")
    empty.write("file.txt", "not committed\n")
    with pytest.raises(RevisionError) as error:
        resolve_revision(open_repo(empty.path), "HEAD")
    assert "has no commit yet" in str(error.value)
    assert "commit your code first" in str(error.value)
    assert "spelling" not in str(error.value)


@pytest.fixture
def objects(history: Repo) -> Repo:
    """`history` with tags that point at a tree and at a file instead of a commit."""
    history.git("tag", "-a", "tree-tag", "-m", "a tree", "HEAD^{tree}")
    history.git("tag", "-a", "blob-tag", "-m", "a file", "HEAD:file.txt")
    history.git("tag", "light-blob-tag", "HEAD:file.txt")
    return history


FILE = "a file (a git blob)"
FOLDER = "a directory (a git tree)"


@pytest.mark.parametrize(("spelled", "what"), [
    ("HEAD:file.txt", FILE), ("HEAD^{tree}", FOLDER), ("first^{tree}", FOLDER),
    ("sha of HEAD:file.txt", FILE), ("sha of HEAD^{tree}", FOLDER),
    ("light-blob-tag", FILE), ("tree-tag", "a tag that points to " + FOLDER),
    ("blob-tag", "a tag that points to " + FILE),
])
def test_reference_to_a_tree_or_file_says_what_it_names(objects: Repo, spelled: str,
                                                         what: str) -> None:
    revision = objects.git("rev-parse", spelled[len("sha of "):]) \
        if spelled.startswith("sha of ") else spelled
    with pytest.raises(RevisionError) as error:
        resolve_revision(open_repo(objects.path), revision)
    message = str(error.value)
    assert f"{revision!r} names {what}, not a commit" in message
    assert "a reference must be a commit" in message
    assert "does not exist" not in message


def test_file_reference_suggests_its_commit(history: Repo) -> None:
    with pytest.raises(RevisionError) as error:
        resolve_revision(open_repo(history.path), "HEAD~1:file.txt")
    assert "'HEAD~1' instead of 'HEAD~1:file.txt'" in str(error.value)


def _delete_loose_object(repo: Repo, object_id: str) -> None:
    loose = repo.path / ".git" / "objects" / object_id[:2] / object_id[2:]
    assert loose.is_file(), "precondition: git keeps a new commit's objects loose"
    loose.unlink()


def _bare_copy(repo: Repo, path: Path) -> Path:
    subprocess.run(["git", "clone", "-q", "--bare", "--no-local", str(repo.path), str(path)],
                   check=True)
    subprocess.run(["git", "-C", str(path), "config", "uploadpack.allowFilter", "true"],
                   check=True)
    return path


def test_missing_file_of_a_damaged_clone_is_named_with_the_fetch(history: Repo,
                                                                 tmp_path: Path) -> None:
    history.git("remote", "add", "origin", str(_bare_copy(history, tmp_path / "bare.git")))
    blob = history.git("rev-parse", "first:file.txt")
    _delete_loose_object(history, blob)
    repo = open_repo(history.path)
    sha = resolve_revision(repo, "first")
    with pytest.raises(RevisionError) as error:
        with reference_worktree(repo, sha):
            pass
    message = str(error.value)
    assert f"lacks 1 file(s) of that commit: file.txt (object {blob})" in message
    assert "`git fetch --refetch origin`" in message
    history.git("fetch", "-q", "--refetch", "origin")  # the advice works
    with reference_worktree(repo, sha) as folder:
        assert (folder / "file.txt").read_text() == "version 0\n"


def test_missing_file_without_a_remote_says_there_is_none(history: Repo) -> None:
    history.write("sub/deep.txt", "deep\n")
    sha = history.commit("a file in a folder")
    blob = history.git("rev-parse", "HEAD:sub/deep.txt")
    _delete_loose_object(history, blob)
    with pytest.raises(RevisionError) as error:
        with reference_worktree(open_repo(history.path), sha):
            pass
    assert f"sub/deep.txt (object {blob})" in str(error.value)
    assert "no remote to fetch them from" in str(error.value)


def test_partial_clone_with_an_unreachable_promisor_names_file_and_remote(
        history: Repo, tmp_path: Path) -> None:
    bare = _bare_copy(history, tmp_path / "bare.git")
    clone = tmp_path / "partial"
    subprocess.run(["git", "clone", "-q", "--filter=blob:none", f"file://{bare}", str(clone)],
                   check=True)
    bare.rename(tmp_path / "away.git")
    repo = open_repo(clone)
    sha = resolve_revision(repo, "first")
    with pytest.raises(RevisionError) as error:
        with reference_worktree(repo, sha):
            pass
    message = str(error.value)
    blob = history.git("rev-parse", "first:file.txt")
    assert f"file.txt (object {blob})" in message
    assert "partial clone" in message and f"promisor remote 'origin' (file://{bare})" in message
    with pytest.raises(RevisionError) as error:  # its object cannot be fetched to tell a type
        resolve_revision(repo, "first:file.txt")
    assert "'first:file.txt' names a path inside a commit (a file or folder)" in str(error.value)
    (tmp_path / "away.git").rename(bare)  # reachable again: git fetches the file on demand
    with reference_worktree(repo, sha) as folder:
        assert (folder / "file.txt").read_text() == "version 0\n"


def test_git_variables_of_a_hook_do_not_reach_the_users_index(
        history: Repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    other = init_repo(tmp_path / "other", tmp_path / "cache")
    other.write("other.txt", "other\n")
    other.commit("other")
    before, other_before = history.snapshot(), other.snapshot()
    expected = history.git("rev-parse", "first^{commit}")
    with monkeypatch.context() as hook:  # what git exports to a hook, pointed elsewhere
        hook.setenv("GIT_INDEX_FILE", str(history.path / ".git" / "index"))
        hook.setenv("GIT_DIR", str(other.path / ".git"))
        hook.setenv("GIT_WORK_TREE", str(other.path))
        hook.setenv("GIT_COMMON_DIR", str(other.path / ".git"))
        hook.setenv("GIT_OBJECT_DIRECTORY", str(other.path / ".git" / "objects"))
        repo = open_repo(history.path)
        sha = resolve_revision(repo, "first")
        with reference_worktree(repo, sha) as folder:
            assert (folder / "file.txt").read_text() == "version 0\n"
    assert sha == expected
    assert history.snapshot() == before
    assert other.snapshot() == other_before


def test_blob_reference_through_invoke_exits_2_without_traceback(subject_repo: Repo) -> None:
    for task in ("gen", "test"):
        done = subject_repo.invoke(task, "--reference", "HEAD:README.md")
        assert done.returncode == 2, output(done)
        assert "'HEAD:README.md' names a file (a git blob), not a commit" in output(done)
        assert "Traceback" not in output(done)


def _layouts(tmp_path: Path) -> Repo:
    """Committed: a flat subject, a src/ subject, tests with data; then edited in the tree."""
    repo = init_repo(tmp_path / "repo", tmp_path / "cache")
    for name, text in {"flat/__init__.py": "A = 1\n", "src/pkg/__init__.py": "B = 1\n",
                       "src/helper.py": "C = 1\n", "tests/data/in.json": "old\n",
                       "tests/test_x.py": "", "bench/inputs.txt": "old\n",
                       "setup.cfg": "old\n"}.items():
        repo.write(name, text)
    repo.commit("reference")
    for name in ("tests/data/in.json", "bench/inputs.txt", "setup.cfg", "src/helper.py",
                 "flat/__init__.py", "src/pkg/__init__.py"):
        repo.write(name, "new\n")
    repo.write("tests/data/untracked.bin", "new\n")
    (repo.path / "tests" / "test_x.py").unlink()
    return repo


@pytest.mark.parametrize("tests, harness, working, reference", [
    (["tests"], [], ["tests/data/in.json", "tests/data/untracked.bin"],
     ["flat/__init__.py", "src/pkg/__init__.py", "src/helper.py", "setup.cfg"]),
    (["tests"], ["bench/inputs.txt"], ["bench/inputs.txt", "tests/data/in.json"],
     ["setup.cfg", "src/pkg/__init__.py"]),
    (["."], [], ["tests/data/in.json", "setup.cfg", "src/helper.py"],
     ["flat/__init__.py", "src/pkg/__init__.py"]),
    (["src"], [], ["src/helper.py"], ["src/pkg/__init__.py", "tests/data/in.json"]),
    (["flat"], [], [], ["flat/__init__.py", "tests/data/in.json"]),  # inside the subject
], ids=["tests", "harness", "root", "beside-src", "in-subject"])
def test_working_harness_is_laid_in_the_worktree(tmp_path: Path, tests: list[str],
                                                  harness: list[str], working: list[str],
                                                  reference: list[str]) -> None:
    """The test folders and harness files read the working tree's bytes in the worktree;
    the subject's folders (flat/, src/pkg/) stay the reference's; a file deleted in the
    working tree is gone there too; removing the worktree leaves the working tree whole."""
    from regression.repository.worktree import lay_working_harness

    repo = _layouts(tmp_path)
    before = repo.snapshot()
    git = open_repo(repo.path)
    with reference_worktree(git, resolve_revision(git, "HEAD")) as folder:
        lay_working_harness(folder, repo.path, tests, [repo.path / h for h in harness],
                            [repo.path / "flat", repo.path / "src" / "pkg"])
        for name in working:
            assert (folder / name).read_text() == "new\n", name
        for name in reference:
            assert (folder / name).read_text() in ("old\n", "A = 1\n", "B = 1\n", "C = 1\n"), \
                name
        if tests != ["flat"]:
            laid = bool({"tests", "."} & set(tests))  # deleted in the working tree
            assert (folder / "tests" / "test_x.py").exists() != laid
        assert (folder / ".git").is_file()  # git's own link to the worktree is kept
    assert repo.snapshot() == before
    assert not folder.exists()


@pytest.mark.parametrize("tests, harness", [
    (["tests"], ["tests/data/in.json"]),  # a harness file under a test folder laid already
    (["."], ["tests/data/in.json", "bench/inputs.txt"]),  # under the root, laid entry by entry
    (["tests", "tests/data"], []),  # a test folder inside another
    (["tests/data", "tests"], []),  # the same, the inner one named first
    (["tests", "tests/data/in.json"], []),  # a file of a test folder named as one
], ids=["harness-in-tests", "harness-under-root", "nested", "nested-inner-first", "file"])
def test_laying_never_goes_through_a_link_it_laid(tmp_path: Path, tests: list[str],
                                                   harness: list[str]) -> None:
    """What lies under a link laid already is the working tree's as it is: removing or
    laying it again would go through the link into the user's tree, and delete there."""
    from regression.repository.worktree import lay_working_harness

    repo = _layouts(tmp_path)
    repo.write("tests/data/notes.txt", "untracked, and the user's only copy\n")
    before = repo.snapshot()
    git = open_repo(repo.path)
    with reference_worktree(git, resolve_revision(git, "HEAD")) as folder:
        lay_working_harness(folder, repo.path, tests, [repo.path / h for h in harness],
                            [repo.path / "flat", repo.path / "src" / "pkg"])
        assert (folder / "tests" / "data" / "in.json").read_text() == "new\n"
        assert (folder / "tests" / "data" / "notes.txt").is_file()
        assert repo.snapshot() == before
    assert repo.snapshot() == before


# Bad revisions and hostile git settings: every bad revision is a clear error, and no git
# call runs the repository's hooks. Real repositories and real git; in-process where a
# subprocess adds nothing, a few real `invoke` runs for the exit code at the task boundary.


@pytest.fixture
def v1_history(tmp_path: Path) -> Repo:
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
def test_a_name_that_is_a_tag_and_a_branch_is_refused_naming_both(v1_history: Repo,
                                                                 revision: str) -> None:
    message = refused(v1_history, revision)
    tag = v1_history.git("rev-parse", "v1^{commit}")
    branch = v1_history.git("rev-parse", "heads/v1")
    assert f"{revision!r} is ambiguous: 'v1' is the tag refs/tags/v1 (commit {tag[:12]}) and " \
           f"the branch refs/heads/v1 (commit {branch[:12]})" in message
    rest = revision[2:]
    assert f"Fix: write the one you mean in full, 'refs/tags/v1{rest}' or " \
           f"'refs/heads/v1{rest}'" in message


def test_the_name_written_in_full_resolves(v1_history: Repo) -> None:
    repo = open_repo(v1_history.path)
    assert resolve_revision(repo, "refs/heads/v1") == v1_history.git("rev-parse", "HEAD")
    assert resolve_revision(repo, "refs/tags/v1") == v1_history.git("rev-parse", "HEAD~2")


def test_a_local_branch_wins_over_a_remote_one_of_the_same_short_name(v1_history: Repo) -> None:
    v1_history.git("update-ref", "refs/remotes/origin/main", "HEAD~1")
    repo = open_repo(v1_history.path)
    assert resolve_revision(repo, "main") == v1_history.git("rev-parse", "HEAD")
    assert resolve_revision(repo, "origin/main") == v1_history.git("rev-parse", "HEAD~1")


def test_a_branch_only_on_the_remote_says_how_to_name_it(v1_history: Repo) -> None:
    v1_history.git("update-ref", "refs/remotes/origin/feature", "HEAD~1")
    message = refused(v1_history, "feature~1")
    assert "there is no tag or local branch 'feature', only the remote branch origin/feature" \
        in message
    assert "Fix: write 'origin/feature~1'" in message
    assert "`git branch feature origin/feature`" in message
    assert resolve_revision(open_repo(v1_history.path), "origin/feature~1") == \
        v1_history.git("rev-parse", "HEAD~2")


# --- abbreviated SHAs -----------------------------------------------------------------------

def test_a_short_sha_two_commits_share_lists_the_candidates(v1_history: Repo) -> None:
    first, second, prefix = commits_sharing_a_prefix(v1_history)
    message = refused(v1_history, prefix)
    assert f"the short SHA {prefix!r} is ambiguous: " in message
    assert f"  {first[:12]} commit 2023-11-14 - candidate " in message
    assert f"  {second[:12]} commit 2023-11-14 - candidate " in message
    assert "does not exist" not in message
    assert "Fix: write more of the SHA" in message
    assert refused(v1_history, f"{prefix}~1").startswith(f"the short SHA {prefix!r} is ambiguous")
    assert resolve_revision(open_repo(v1_history.path), first[:12]) == first


def test_a_short_sha_of_one_commit_and_a_file_is_the_commit_as_in_git(v1_history: Repo) -> None:
    head = v1_history.git("rev-parse", "HEAD")
    body = next(b for n in itertools.count() if _sha1("blob", b := f"{n}\n".encode())[:4]
                == head[:4])
    blob = write_object(v1_history, "blob", body)
    assert blob[:4] == head[:4]
    assert resolve_revision(open_repo(v1_history.path), head[:4]) == head


# --- malformed ------------------------------------------------------------------------------

@pytest.mark.parametrize("revision", ["", "   "])
def test_an_empty_revision_is_refused(v1_history: Repo, revision: str) -> None:
    message = refused(v1_history, revision)
    assert message.startswith(f"the revision is empty ({revision!r}), so it names no commit")
    assert "Fix: give a tag, branch, commit SHA or expression like HEAD~1" in message


@pytest.mark.parametrize("revision", ["-x", "--all", "--output=stolen", "--git-dir=/"])
def test_a_revision_with_a_leading_dash_is_never_an_option(v1_history: Repo,
                                                           revision: str) -> None:
    message = refused(v1_history, revision)
    assert f"{revision!r} is not a revision: it starts with '-', which git would read as an " \
           "option" in message
    assert not (v1_history.path / "stolen").exists()


def test_stepping_back_past_the_first_commit_says_how_far_history_goes(v1_history: Repo) -> None:
    message = refused(v1_history, "HEAD~99")
    assert "'HEAD' is a commit, but '~99' steps back past its history, which has 3 commit(s) " \
           "along first parents (the oldest is HEAD~2)" in message
    assert "Fix: step back fewer commits" in message
    assert "check the spelling" not in message


def test_a_tree_is_not_a_commit(v1_history: Repo) -> None:
    tree = v1_history.git("rev-parse", "HEAD^{tree}")
    assert f"{tree!r} names a directory (a git tree), not a commit" in refused(v1_history, tree)


# --- git runs no hooks, no file-system monitor -----------------------------------------------

def _hook(path: Path, marker: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    path.chmod(0o755)


@pytest.mark.parametrize("where", [".git/hooks", "versioned-hooks"],
                         ids=["hooks folder", "core.hooksPath"])
def test_making_the_worktree_runs_none_of_the_repositorys_hooks(v1_history: Repo, tmp_path: Path,
                                                                where: str) -> None:
    marker = tmp_path / "hook-ran"
    for name in ("post-checkout", "reference-transaction", "post-index-change"):
        _hook(v1_history.path / where / name, marker)
    if where != ".git/hooks":
        v1_history.git("config", "core.hooksPath", where)
    v1_history.git("checkout", "-q", "HEAD~1")  # the hook works where git runs it
    assert marker.read_text().startswith("ran"), "precondition: git runs this hook"
    marker.unlink()
    v1_history.git("checkout", "-q", "main")
    marker.unlink()
    repo = open_repo(v1_history.path)
    with reference_worktree(repo, resolve_revision(repo, "refs/tags/v1")) as folder:
        assert (folder / "file.txt").read_text() == "version 0\n"
    assert not marker.exists()


def test_no_file_system_monitor_is_started(v1_history: Repo, tmp_path: Path) -> None:
    marker = tmp_path / "monitor-ran"
    _hook(tmp_path / "monitor.sh", marker)
    v1_history.git("config", "core.fsmonitor", str(tmp_path / "monitor.sh"))
    v1_history.git("status", "--porcelain")
    assert marker.exists(), "precondition: git asks this monitor"
    marker.unlink()
    repo = open_repo(v1_history.path)
    with reference_worktree(repo, resolve_revision(repo, "HEAD~1")) as folder:
        assert (folder / "file.txt").read_text() == "version 1\n"
    assert not marker.exists()


def test_a_smudge_filter_applies_in_the_worktree_as_in_a_checkout(v1_history: Repo) -> None:
    """Kept on purpose: the reference's files must be the bytes a checkout gives (git LFS)."""
    v1_history.git("config", "filter.upper.smudge", "tr a-z A-Z")
    v1_history.git("config", "filter.upper.clean", "cat")
    v1_history.write(".gitattributes", "*.txt filter=upper\n")
    v1_history.commit("filtered")
    repo = open_repo(v1_history.path)
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


_PRUNER = """
import sys
from pathlib import Path
from regression.repository.gitcmd import open_repo
from regression.repository.worktree import prune_stale_worktrees
repo, stop = open_repo(Path(sys.argv[1])), Path(sys.argv[2])
while not stop.exists():
    prune_stale_worktrees(repo)
"""


@pytest.mark.slow
def test_worktrees_are_made_while_another_clone_s_run_removes_empty_folders(
        history: Repo, tmp_path: Path) -> None:
    """Every run, of any clone, removes the empty worktree folders as it prunes: a run that
    makes its worktree meanwhile never has a folder taken from under it (two CI jobs on one
    machine; the suite's own workers). 300 worktrees against a pruner that never rests: with
    the folders made one step before git's, one checkout in about a hundred failed."""
    other = init_repo(tmp_path / "other", tmp_path / "other-cache")
    other.write("file.txt", "other\n")
    other.commit("other")
    stop = tmp_path / "stop"
    pruner = subprocess.Popen([sys.executable, "-c", _PRUNER, str(other.path), str(stop)])
    repo = open_repo(history.path)
    sha = resolve_revision(repo, "HEAD")
    failed = []
    try:
        for _ in range(300):
            try:
                with reference_worktree(repo, sha) as folder:
                    assert (folder / "file.txt").read_text() == "version 2\n"
            except (OSError, RevisionError) as exc:
                failed.append(str(exc))
    finally:
        stop.touch()
        pruner.wait(timeout=60)
    assert failed == [], f"{len(failed)} of 300 failed: {failed[:2]}"
