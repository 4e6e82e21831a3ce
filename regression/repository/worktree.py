"""Temporary worktrees of the reference: made, removed when stale, and why a checkout failed."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

import xxhash

from regression.errors import RevisionError
from regression.repository.gitcmd import Repository, git_process, run_git, short
from regression.store.scratch import pid_alive


def _worktree_parent(repo: Repository) -> Path:
    """Where this repository's reference worktrees live: one folder per clone."""
    common = Path(repo.common_dir)
    digest = xxhash.xxh64_hexdigest(str(common).encode())
    return Path(tempfile.gettempdir()) / "torch-regression-worktrees" / digest


def _remove_if_empty(*folders: Path) -> None:
    """Remove each of `folders` that is empty, in order (a folder, then its parent); one
    that holds anything (another run's worktree) is left as it is."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _remove_empty_parents(parent: Path) -> None:
    """Remove the empty worktree folders of any clone: this version's runs remove their own,
    earlier ones left one per clone (git makes them again when it needs them)."""
    try:
        empty = [f for f in parent.parent.iterdir() if re.fullmatch(r"[0-9a-f]{16}", f.name)]
    except OSError:
        return
    for folder in empty:
        _remove_if_empty(folder)
    _remove_if_empty(parent.parent)


def prune_stale_worktrees(repo: Repository) -> list[Path]:
    """Remove worktrees left by killed runs of this tool; returns what was removed.

    Cheap when there is nothing to remove (a folder listing, no git process), so warm runs
    call it too: a run killed while recording is cleaned up by the next run of any kind.
    """
    parent = _worktree_parent(repo)
    removed = []
    if parent.is_dir():
        for folder in parent.iterdir():
            pid = folder.name.split("-", 1)[0]
            if pid.isdigit() and not pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    for folder in removed:
        # A run killed inside `git worktree add` leaves its entry locked ("initializing"),
        # and prune keeps locked entries: unlock it first ("not locked" is fine).
        git_process(repo, "worktree", "unlock", str(folder))
    if removed:
        run_git(repo, "worktree", "prune")
    _remove_empty_parents(parent)
    return removed


def _make_folder(folder: Path, tries: int = 10) -> None:
    """Make `folder` and its parents. Another run (of any clone) removes the empty worktree
    folders as it ends or prunes, and can take a parent away between two of these mkdirs:
    make them again. Once `folder` exists, its parents hold it and no run removes them."""
    for attempt in range(tries):
        try:
            folder.mkdir(parents=True)
            return
        except FileNotFoundError:
            if attempt == tries - 1:
                raise


@contextmanager
def reference_worktree(repo: Repository, sha: str) -> Iterator[Path]:
    """A detached worktree of `sha` in a temporary folder, removed afterwards."""
    prune_stale_worktrees(repo)
    parent = _worktree_parent(repo)
    folder = parent / f"{os.getpid()}-{secrets.token_hex(4)}"
    _make_folder(folder)  # git fills an empty folder; made here, its parents are not empty
    done = git_process(repo, "worktree", "add", "--detach", "--quiet", str(folder), sha)
    if done.returncode != 0:
        shutil.rmtree(folder, ignore_errors=True)
        _remove_if_empty(parent, parent.parent)
        raise RevisionError(sha, _checkout_failure(repo, sha, done.stderr.strip()))
    try:
        yield folder
    finally:
        if git_process(repo, "worktree", "remove", "--force", str(folder)).returncode != 0:
            shutil.rmtree(folder, ignore_errors=True)
            run_git(repo, "worktree", "prune")
        _remove_if_empty(parent, parent.parent)


_LISTED = 5


def _checkout_failure(repo: Repository, sha: str, stderr: str) -> str:
    """Which files of `sha` the clone lacks and how to get them; git's own words otherwise."""
    missing = _missing_files(repo, sha)
    if not missing:
        return f"could not check out {short(sha)} as a worktree: {stderr}"
    listed = "; ".join(f"{path} (object {oid})" for path, oid in missing[:_LISTED])
    more = f"; and {len(missing) - _LISTED} more" if len(missing) > _LISTED else ""
    return (f"could not check out {short(sha)} as a worktree: this clone lacks "
            f"{len(missing)} file(s) of that commit: {listed}{more}. "
            f"{_how_to_fetch(repo, stderr)}")


def _missing_objects(repo: Repository, sha: str) -> set[str]:
    """The objects of `sha`'s tree that the clone lacks, found without fetching any."""
    done = git_process(repo, "rev-list", "--objects", "--missing=print", f"{sha}^{{tree}}")
    return {line[1:].strip() for line in done.stdout.splitlines() if line.startswith("?")}


def _missing_files(repo: Repository, sha: str) -> list[tuple[str, str]]:
    """(path in the tree, object id) of every missing object; a folder's path ends in '/'."""
    missing = _missing_objects(repo, sha)
    if not missing:
        return []
    # A listing that stops at a missing folder is still used as far as it goes.
    listing = git_process(repo, "ls-tree", "-r", "-t", "-z", "--full-tree", sha).stdout
    found = []
    for entry in listing.split("\0"):
        info, _, path = entry.partition("\t")
        fields = info.split()
        if len(fields) == 3 and fields[2] in missing:
            found.append((path + "/" if fields[1] == "tree" else path, fields[2]))
    named = {oid for _, oid in found}
    return found + [("(path unknown)", oid) for oid in sorted(missing - named)]


def _promisor_remotes(repo: Repository) -> list[str]:
    """The remotes a partial clone fetches missing objects from on demand."""
    names = []
    config = git_process(repo, "config", "--get-regexp", r"^remote\..*\.promisor$").stdout
    for line in config.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lower() in ("true", "yes", "on", "1"):
            names.append(key[len("remote."):-len(".promisor")])
    extension = git_process(repo, "config", "--get", "extensions.partialClone").stdout.strip()
    return names + ([extension] if extension and extension not in names else [])


def _how_to_fetch(repo: Repository, stderr: str) -> str:
    """How to get the missing objects: from the promisor remote, or fetched again."""
    promisors = _promisor_remotes(repo)
    if promisors:
        name = promisors[0]
        url = git_process(repo, "remote", "get-url", name).stdout.strip() or "no URL"
        last = stderr.splitlines()[-1] if stderr else "git gave no message"
        return (f"This is a partial clone: git fetches such files on demand from its promisor "
                f"remote {name!r} ({url}), and that failed: {last}. Fix: make {name!r} "
                "reachable (network, credentials) and run again; in GitHub Actions, drop "
                "`filter:` from actions/checkout.")
    remotes = git_process(repo, "remote").stdout.split()
    if not remotes:
        return ("Their objects are gone from .git (a damaged clone) and it has no remote to "
                "fetch them from. Fix: restore the repository from a backup or clone it again; "
                "`git fsck` lists everything that is missing.")
    name = "origin" if "origin" in remotes else remotes[0]
    return (f"Their objects are gone from .git (a damaged or incomplete clone). Fix: fetch "
            f"them again with `git fetch --refetch {name}` (git 2.36 or later) or clone the "
            "repository again; `git fsck` lists everything that is missing.")


def lay_working_harness(project: Path, root: Path, tests: Iterable[str],
                        files: Iterable[Path], subject: Iterable[Path]) -> None:
    """Make the test folders and `harness` files of the reference's worktree (its project
    folder `project`) links to the working tree's (`root`): a test reads the working tree's
    bytes at the reference however it names a file (relative to the working folder, to
    `__file__`, through a fixture), as the check does, and the recording's watch of the
    user's tree sees the read. A test folder that holds a subject package is laid entry by
    entry, the subject's own folders left the reference's; one inside the subject is left
    as it is. Nothing of the user's tree is changed: the links point into it."""
    root, subject = root.resolve(), [p.resolve() for p in subject]
    laying = _Laying(project.resolve(), root, subject)
    for name in sorted(tests, key=lambda n: len(Path(n).parts)):  # a folder before its own
        laying.lay(project / name, root / name)
    for path in files:
        path = path.resolve()
        if path.is_relative_to(root) and not any(path.is_relative_to(s) for s in subject):
            laying.lay(project / path.relative_to(root), path)


class _Laying:
    """Links laid in one worktree: never through a link laid before (which is the user's
    tree), never outside the worktree's project folder."""

    def __init__(self, project: Path, root: Path, subject: list[Path]) -> None:
        self.project, self.root, self.subject = project, root, subject

    def lay(self, there: Path, here: Path) -> None:
        """`there` (in the worktree) shows what `here` (in the working tree) holds."""
        if there.resolve() != self.project and \
                not there.parent.resolve().is_relative_to(self.project):
            return  # under a link laid already: it shows the working tree's file as it is
        _lay(there, here, self.root, self.subject, self)


def _lay(there: Path, here: Path, root: Path, subject: list[Path], laying: _Laying) -> None:
    """Make `there` (in the worktree) show what `here` (in the working tree) holds."""
    real = here.resolve() if here.exists() else here
    if not real.is_relative_to(root) or real == root / ".git" or \
            any(real.is_relative_to(s) for s in subject):
        return  # outside the project, git's own, or the subject's: the reference's
    if real == root or (any(s.is_relative_to(real) for s in subject) and real.is_dir()):
        if there.is_symlink() or there.is_file():
            there.unlink()
        there.mkdir(parents=True, exist_ok=True)
        names = {p.name for p in real.iterdir()} | \
            ({p.name for p in there.iterdir()} if there.is_dir() else set())
        for name in sorted(names - {".git"}):
            laying.lay(there / name, real / name)
        return
    _remove(there)
    if here.exists():
        there.parent.mkdir(parents=True, exist_ok=True)
        there.symlink_to(real, target_is_directory=real.is_dir())


def _remove(path: Path) -> None:
    """Remove a file, link or folder of the worktree (a link alone, never its target)."""
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
