"""Run git: the one place that starts it (GIT_* stripped, no hooks), and short SHAs for messages."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

from regression.errors import GitError, RevisionError

# GIT_* variables that only say how to reach remotes or run git, never which repository,
# work tree or index to use; pre-commit keeps the same ones.
_KEPT_GIT_VARIABLES = frozenset({
    "GIT_EXEC_PATH", "GIT_SSH", "GIT_SSH_COMMAND", "GIT_SSL_CAINFO", "GIT_SSL_NO_VERIFY",
    "GIT_CONFIG_COUNT", "GIT_HTTP_PROXY_AUTHMETHOD", "GIT_ALLOW_PROTOCOL", "GIT_ASKPASS",
    "GIT_TERMINAL_PROMPT",
})


def git_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` without GIT_DIR, GIT_INDEX_FILE and the like, which git hooks export."""
    return {name: value for name, value in environ.items()
            if not name.startswith("GIT_") or name in _KEPT_GIT_VARIABLES
            or name.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))}


@dataclass(frozen=True)
class Repository:
    """A git repository as git itself named it: plain data, so a job carries it to a child
    process, which then starts no git to find it again."""

    working_dir: str
    """The top of the work tree."""
    common_dir: str
    """The .git folder shared by all of its worktrees."""


NO_HOOKS = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false")
"""Every git call runs none of the repository's hooks (`git worktree add` runs post-checkout)
and starts no file-system monitor (a daemon that would watch a temporary worktree)."""


def git_process(where: Repository | Path, *args: str, given: str | None = None
                ) -> subprocess.CompletedProcess[str]:
    """Run git in `where` with GIT_* stripped and no hooks, `given` on its standard input;
    the one place that starts git."""
    folder = where.working_dir if isinstance(where, Repository) else where
    try:
        return subprocess.run(["git", *NO_HOOKS, "-C", str(folder), *args], input=given,
                              env=git_environment(os.environ),
                              capture_output=True, encoding="utf-8", errors="replace",
                              check=False)
    except FileNotFoundError:
        raise RevisionError(args[0], "git is not installed or not on PATH; install git") from None


def run_git(repo: Repository, *args: str) -> str:
    """The output of a git command that must succeed; a failure is a GitError."""
    done = git_process(repo, *args)
    if done.returncode != 0:
        raise GitError(" ".join(["git", *args]), str(repo.working_dir), done.stderr.strip())
    return done.stdout.strip()


def open_repo(path: Path) -> Repository:
    """The git repository whose work tree holds `path`, in one git process. GitPython is
    not imported: its import alone starts `git version` twice, outside this module."""
    done = git_process(path, "rev-parse", "--show-toplevel", "--git-common-dir")
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or len(lines) != 2:
        reason = done.stderr.strip().splitlines()[-1:] or ["git found no work tree"]
        raise RevisionError(str(path), f"{path} is not inside a git work tree ({reason[0]}); "
                                       "run from your project's clone")
    top, common = lines
    return Repository(top, str((Path(path) / common).resolve()))


def is_shallow(repo: Repository) -> bool:
    """Whether the clone is shallow (older commits are missing)."""
    return run_git(repo, "rev-parse", "--is-shallow-repository") == "true"


def short(sha: str) -> str:
    """The 12-character abbreviation of a SHA used in messages."""
    return sha[:12]


def describe(revision: str, sha: str) -> str:
    """How messages name a reference: '1a2b3c4d5e6f (v1.2)', or the short SHA alone."""
    return short(sha) if revision == sha else f"{short(sha)} ({revision})"


def ignored_warning(root: Path, relative: str) -> str | None:
    """The warning for a file the tool wrote that the repository's .gitignore hides (CI
    would run without it), with both ways out; None when git does not ignore it."""
    if git_process(root, "check-ignore", "-q", relative).returncode != 0:
        return None
    return (f"warning: your .gitignore hides {relative}, so CI would run without it; commit "
            f"it anyway with `git add -f {relative}`, or add `!/{relative}` to .gitignore")
