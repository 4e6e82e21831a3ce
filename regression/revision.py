"""Resolve revisions and make temporary worktrees; the one place that runs git."""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Mapping

import xxhash

from regression.errors import GitError, RevisionError
from regression.store.scratch import pid_alive

_SHA = re.compile(r"^[0-9a-f]{40}$")

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


def git_process(where: Repository | Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Run git in `where` with GIT_* stripped and no hooks; the one place that starts git."""
    folder = where.working_dir if isinstance(where, Repository) else where
    try:
        return subprocess.run(["git", *NO_HOOKS, "-C", str(folder), *args],
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


def _object_id(repo: Repository, expression: str) -> str:
    """The object id `expression` names, or '' when it names none."""
    done = git_process(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", expression)
    return done.stdout.strip() if done.returncode == 0 else ""


def _object_type(repo: Repository, object_id: str) -> str:
    """'commit', 'tree', 'blob' or 'tag'; '' when the object is not in the clone."""
    done = git_process(repo, "cat-file", "-t", object_id) if object_id else None
    return done.stdout.strip() if done is not None and done.returncode == 0 else ""


_KINDS_OF_REVISION = "a tag, branch, commit SHA or expression like HEAD~1"


def resolve_revision(repo: Repository, revision: str) -> str:
    """The full commit SHA of a tag (peeled), branch, SHA or expression like HEAD~2."""
    _refuse_malformed(revision)
    _refuse_ambiguous_name(repo, revision)
    sha = _object_id(repo, f"{revision}^{{commit}}")
    if _SHA.match(sha):
        return sha
    raise RevisionError(revision, _unresolved_message(repo, revision))


def _refuse_malformed(revision: str) -> None:
    """An empty revision, or one git would read as an option, is refused before git runs."""
    if not revision.strip():
        raise RevisionError(revision, f"the revision is empty ({revision!r}), so it names no "
                                      f"commit (an unset CI variable?). Fix: give "
                                      f"{_KINDS_OF_REVISION}")
    if revision.startswith("-"):
        raise RevisionError(revision, f"{revision!r} is not a revision: it starts with '-', "
                                      f"which git would read as an option. Fix: give "
                                      f"{_KINDS_OF_REVISION}")


def _leading_name(revision: str) -> str:
    """The ref name or SHA an expression starts from: 'v1' of 'v1~2', 'HEAD' of 'HEAD:a'."""
    return re.split(r"[~^:]|@\{", revision, maxsplit=1)[0]


_SHORT_NAME_RULES = ("refs/tags/{}", "refs/heads/{}", "refs/remotes/{}", "refs/remotes/{}/HEAD")
"""Where git looks for a short ref name, in its order (after .git/NAME itself)."""

_REF_KINDS = {"refs/tags/": "the tag", "refs/heads/": "the branch",
              "refs/remotes/": "the remote branch"}


def _refs_named(repo: Repository, name: str) -> list[tuple[str, str]]:
    """(full ref, commit) of every ref that git's short-name rules find for `name`."""
    if not name or _SHA.match(name) or re.search(r"[*?\[\\\s]", name):
        return []
    rules = (("{}",) if name.startswith("refs/") else ()) + _SHORT_NAME_RULES
    candidates = [rule.format(name) for rule in rules]
    done = git_process(repo, "for-each-ref", "--format=%(refname) %(objectname) %(*objectname)",
                       *candidates)
    found = {}
    for line in done.stdout.splitlines():
        ref, object_id, *peeled = line.split()
        found[ref] = peeled[0] if peeled else object_id
    return [(ref, found[ref]) for ref in candidates if ref in found]


def _refuse_ambiguous_name(repo: Repository, revision: str) -> None:
    """A name that is both a tag and a branch (say) is refused: git would take one silently."""
    name = _leading_name(revision)
    refs = _refs_named(repo, name)
    if len(refs) < 2:
        return
    listed = " and ".join(f"{_ref_kind(ref)} {ref} (commit {short(sha)})" for ref, sha in refs)
    spelled = " or ".join(repr(ref + revision[len(name):]) for ref, _ in refs)
    raise RevisionError(revision, f"{revision!r} is ambiguous: {name!r} is {listed}; git would "
                                  f"take {refs[0][0]} without asking. Fix: write the one you "
                                  f"mean in full, {spelled}, in config.yaml or --reference "
                                  "(or rename one of them)")


def _ref_kind(ref: str) -> str:
    return next((kind for prefix, kind in _REF_KINDS.items() if ref.startswith(prefix)), "the ref")


def _unresolved_message(repo: Repository, revision: str) -> str:
    """Why `revision` names no commit, and what to do about it."""
    commits = git_process(repo, "rev-list", "-n", "1", "--all")
    if commits.returncode == 0 and not commits.stdout.strip():
        return (f"the repository {repo.working_dir} has no commit yet, so there is no "
                f"revision {revision!r} to record a reference from. Fix: commit your code "
                "first (`git add -A && git commit -m ...`), then run again.")
    candidates = _abbreviation_candidates(repo, _leading_name(revision))
    if len(candidates) > 1:
        return _ambiguous_abbreviation_message(repo, revision, candidates)
    what = _what_it_names(repo, revision)
    if what:
        return (f"{revision!r} names {what}, not a commit; a reference must be a commit: "
                "a tag, branch, commit SHA or expression like HEAD~1. "
                f"Fix: {_use_instead(revision)} in config.yaml or --reference.")
    return _not_found_message(repo, revision)


_KINDS = {"blob": "a file (a git blob)", "tree": "a directory (a git tree)"}


def _what_it_names(repo: Repository, revision: str) -> str:
    """'a file (a git blob)' and the like when `revision` names an object but no commit."""
    object_id = _object_id(repo, revision)
    kind = _object_type(repo, object_id)
    if kind == "tag":
        target = _object_type(repo, _object_id(repo, f"{revision}^{{}}"))
        return f"a tag that points to {_KINDS[target]}" if target in _KINDS else ""
    if object_id and not kind and ":" in revision:  # an entry of a tree; its object is absent
        return "a path inside a commit (a file or folder)"
    return _KINDS.get(kind, "")


def _use_instead(revision: str) -> str:
    """The commit part of 'HEAD:README.md' or 'v1^{tree}', as advice."""
    commit = re.split(r":|\^\{", revision, maxsplit=1)[0]
    if commit and commit != revision:
        return f"name the commit, e.g. {commit!r} instead of {revision!r},"
    return "name a commit (`git log --oneline --all` lists them)"


_LISTED_CANDIDATES = 10


def _abbreviation_candidates(repo: Repository, name: str) -> list[str]:
    """Every object whose id starts with `name`, when `name` is an abbreviated SHA."""
    if not re.fullmatch(r"[0-9a-fA-F]{4,39}", name):
        return []
    done = git_process(repo, "rev-parse", f"--disambiguate={name.lower()}")
    return sorted(done.stdout.split()) if done.returncode == 0 else []


def _ambiguous_abbreviation_message(repo: Repository, revision: str, candidates: list[str]) -> str:
    """The objects a short SHA could mean, listed as git lists them."""
    name = _leading_name(revision)
    lines = "\n".join(f"  {_candidate_line(repo, oid)}" for oid in candidates[:_LISTED_CANDIDATES])
    more = len(candidates) - _LISTED_CANDIDATES
    return (f"the short SHA {name!r} is ambiguous: {len(candidates)} objects start with it"
            f"{f' ({more} not listed)' if more > 0 else ''}:\n{lines}\n"
            f"Fix: write more of the SHA of the commit you mean (`git rev-parse {name}` names "
            "the candidates too), in config.yaml or --reference.")


def _candidate_line(repo: Repository, object_id: str) -> str:
    """'1a2b3c4d5e6f commit 2026-01-02 - subject', or the id and its type."""
    kind = _object_type(repo, object_id) or "object"
    if kind != "commit":
        return f"{short(object_id)} {kind}"
    about = git_process(repo, "log", "-1", "--format=%cs - %s", object_id).stdout.strip()
    return f"{short(object_id)} commit {about}"


def _not_found_message(repo: Repository, revision: str) -> str:
    message = f"revision {revision!r} does not exist in {repo.working_dir}"
    if is_shallow(repo):
        return (
            f"{message}: the clone is shallow, so older commits and tags are missing. "
            "Fix: run `git fetch --unshallow --tags`; in GitHub Actions give "
            "actions/checkout `fetch-depth: 0`."
        )
    return _past_the_root(repo, revision) or _only_remote(repo, revision) or (
        f"{message}. Fix: check the spelling of {revision!r} where you gave it (a tag, "
        "branch, commit SHA or expression like HEAD~1); "
        "for a tag or branch of a remote, run `git fetch --tags origin` first."
    )


def short(sha: str) -> str:
    """The 12-character abbreviation of a SHA used in messages."""
    return sha[:12]


def describe(revision: str, sha: str) -> str:
    """How messages name a reference: '1a2b3c4d5e6f (v1.2)', or the short SHA alone."""
    return short(sha) if revision == sha else f"{short(sha)} ({revision})"


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


@contextmanager
def reference_worktree(repo: Repository, sha: str) -> Iterator[Path]:
    """A detached worktree of `sha` in a temporary folder, removed afterwards."""
    prune_stale_worktrees(repo)
    parent = _worktree_parent(repo)
    parent.mkdir(parents=True, exist_ok=True)
    folder = parent / f"{os.getpid()}-{secrets.token_hex(4)}"
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


def _past_the_root(repo: Repository, revision: str) -> str:
    """Why 'HEAD~99' names nothing when HEAD exists: its history is shorter; or ""."""
    name = _leading_name(revision)
    rest = revision[len(name):]
    if not name or not re.match(r"[~^]", rest) or not _object_id(repo, f"{name}^{{commit}}"):
        return ""
    count = int(run_git(repo, "rev-list", "--count", "--first-parent", f"{name}^{{commit}}"))
    return (f"revision {revision!r} does not exist: {name!r} is a commit, but {rest!r} steps "
            f"back past its history, which has {count} commit(s) along first parents (the "
            f"oldest is {name}~{count - 1}). Fix: step back fewer commits, or name the commit "
            "you mean (`git log --oneline` lists them).")


def _only_remote(repo: Repository, revision: str) -> str:
    """Why 'main' names nothing in a clone that has only 'origin/main' (CI); or ""."""
    name = _leading_name(revision)
    if not name or re.search(r"[*?\[\\\s]", name):
        return ""
    done = git_process(repo, "for-each-ref", "--format=%(refname:short)",
                       f"refs/remotes/*/{name}")
    remotes = done.stdout.split()
    if not remotes:
        return ""
    return (f"revision {revision!r} does not exist: there is no tag or local branch {name!r}, "
            f"only the remote branch {' and '.join(remotes)}. Fix: write "
            f"{remotes[0] + revision[len(name):]!r} in config.yaml or --reference (it moves "
            f"with every fetch), or create the branch: `git branch {name} {remotes[0]}`.")
