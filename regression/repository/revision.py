"""Resolve revisions to commits, and say why one names none; git itself runs in gitcmd."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Sequence

from regression.errors import GitError, RevisionError
from regression.repository.gitcmd import Repository, git_process, is_shallow, run_git, short

_SHA = re.compile(r"^[0-9a-f]{40}$")


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


def subject_changed(repo: Repository, sha: str, folder: str, packages: Sequence[str]) -> bool:
    """Whether the working tree's subject packages in `folder` (relative to the repository's
    top, "" for the top) differ from commit `sha`'s: a file edited, added or removed,
    tracked or not (ignored ones aside); the whole of `folder` for a package that is no
    folder or module file there (an extension module), as the key takes it. True where git
    cannot tell."""
    top = Path(repo.working_dir)
    paths = []
    for package in packages:
        named = [_in(folder, package), _in(folder, f"{package}.py")]
        paths += named if any((top / name).exists() for name in named) else [folder or "."]
    if git_process(repo, "diff", "--quiet", sha, "--", *paths).returncode != 0:
        return True
    others = git_process(repo, "ls-files", "--others", "--exclude-standard", "--", *paths)
    return others.returncode != 0 or bool(others.stdout.strip())


def _in(folder: str, name: str) -> str:
    """`name` in `folder`, a path relative to the repository's top ("" for the top)."""
    return f"{folder}/{name}" if folder else name


def subject_objects(repo: Repository, sha: str, folder: str, packages: Sequence[str]
                    ) -> list[tuple[str, str, str]]:
    """(path, "tree" or "blob", object id) at commit `sha` of each subject package in
    `folder` (relative to the repository's top, "" for the top): its folder, else its
    module file, else the whole of `folder` (an extension module, a link, a package git does
    not hold: what the import could find there). One git process for all of them."""
    return subject_objects_at(repo, [sha], folder, packages)[0]


def subject_objects_at(repo: Repository, shas: Sequence[str], folder: str,
                       packages: Sequence[str]) -> list[list[tuple[str, str, str]]]:
    """subject_objects at each of the commits `shas` (a SHA or an expression like SHA^), in
    their order; one git process for all of them."""
    asked = [*(_in(folder, p) for p in packages), *(_in(folder, f"{p}.py") for p in packages),
             folder]
    command = ("cat-file", "--batch-check=%(objectname) %(objecttype)")
    done = git_process(repo, *command,
                       given="".join(f"{sha}:{name}\n" for sha in shas for name in asked))
    answers = done.stdout.splitlines()
    if done.returncode != 0 or len(answers) != len(asked) * len(shas):
        raise GitError(" ".join(["git", *command]), repo.working_dir, done.stderr.strip())
    result = []
    for at in range(len(shas)):
        found = {name: tuple(answer.split()) for name, answer in
                 zip(asked, answers[at * len(asked):(at + 1) * len(asked)])}
        objects: dict[str, tuple[str, str, str]] = {}
        for package in packages:
            for name, kind in ((_in(folder, package), "tree"),
                               (_in(folder, f"{package}.py"), "blob"), (folder, "tree")):
                if found[name][-1:] == (kind,):
                    objects.setdefault(name, (name or ".", kind, found[name][0]))
                    break
            else:
                objects.setdefault(folder, (folder or ".", "missing", ""))
        result.append(list(objects.values()))
    return result
