"""Resolve revisions and make temporary worktrees; the one place that runs git."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import git
import xxhash

from .errors import RevisionError

_SHA = re.compile(r"^[0-9a-f]{40}$")


def run_git(repo: git.Repo, *args: str) -> str:
    """Run one git command in `repo`; every git call of this package goes through here."""
    try:
        return str(repo.git.execute(["git", *args], with_extended_output=False)).strip()
    except git.GitCommandNotFound:
        raise RevisionError(args[0], "git is not installed or not on PATH; install git") from None


def open_repo(path: Path) -> git.Repo:
    """The git repository that holds `path`."""
    try:
        return git.Repo(path, search_parent_directories=True)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise RevisionError(
            str(path), f"{path} is not inside a git repository; run from your project's clone"
        ) from None


def is_shallow(repo: git.Repo) -> bool:
    """Whether the clone is shallow (older commits are missing)."""
    return run_git(repo, "rev-parse", "--is-shallow-repository") == "true"


def resolve_revision(repo: git.Repo, revision: str) -> str:
    """The full commit SHA of a tag (peeled), branch, SHA or expression like HEAD~2."""
    if revision.startswith("-"):
        raise RevisionError(revision, f"{revision!r} is not a revision")
    try:
        sha = run_git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options",
                      f"{revision}^{{commit}}")
    except git.GitCommandError:
        sha = ""
    if _SHA.match(sha):
        return sha
    raise RevisionError(revision, _not_found_message(repo, revision))


def _not_found_message(repo: git.Repo, revision: str) -> str:
    message = f"revision {revision!r} does not exist in {repo.working_dir}"
    if is_shallow(repo):
        return (
            f"{message}: the clone is shallow, so older commits and tags are missing. "
            "Fix: run `git fetch --unshallow --tags`; in GitHub Actions give "
            "actions/checkout `fetch-depth: 0`."
        )
    return (
        f"{message}. Fix: check the spelling in config.yaml or --reference "
        "(a tag, branch, commit SHA or expression like HEAD~1); "
        "for a tag or branch of a remote, run `git fetch --tags origin` first."
    )


def short(sha: str) -> str:
    """The 12-character abbreviation of a SHA used in messages."""
    return sha[:12]


def describe(revision: str, sha: str) -> str:
    """How messages name a reference: '1a2b3c4d5e6f (v1.2)', or the short SHA alone."""
    return short(sha) if revision == sha else f"{short(sha)} ({revision})"


def _worktree_parent(repo: git.Repo) -> Path:
    common = Path(repo.git_dir if not repo.common_dir else repo.common_dir).resolve()
    digest = xxhash.xxh64_hexdigest(str(common).encode())
    return Path(tempfile.gettempdir()) / "torch-regression-worktrees" / digest


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def prune_stale_worktrees(repo: git.Repo) -> list[Path]:
    """Remove worktrees left by killed runs of this tool; returns what was removed."""
    parent = _worktree_parent(repo)
    removed = []
    if parent.is_dir():
        for folder in parent.iterdir():
            pid = folder.name.split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(folder, ignore_errors=True)
                removed.append(folder)
    run_git(repo, "worktree", "prune")
    return removed


@contextmanager
def reference_worktree(repo: git.Repo, sha: str) -> Iterator[Path]:
    """A detached worktree of `sha` in a temporary folder, removed afterwards."""
    prune_stale_worktrees(repo)
    parent = _worktree_parent(repo)
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / f"{os.getpid()}-{secrets.token_hex(4)}"
    try:
        run_git(repo, "worktree", "add", "--detach", "--quiet", str(folder), sha)
    except git.GitCommandError as exc:
        shutil.rmtree(folder, ignore_errors=True)
        raise RevisionError(sha, f"could not check out {short(sha)} as a worktree: "
                                 f"{exc.stderr.strip()}") from None
    try:
        yield folder
    finally:
        try:
            run_git(repo, "worktree", "remove", "--force", str(folder))
        except git.GitCommandError:
            shutil.rmtree(folder, ignore_errors=True)
            run_git(repo, "worktree", "prune")
