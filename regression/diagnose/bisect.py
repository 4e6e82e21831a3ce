"""invoke bisect: for each case whose outputs differ between good and bad, the first commit
whose outputs of it differ from good's.

Each commit is recorded as a reference of its own (the working tree's tests, the subject from
a worktree of the commit), cached under its own key: a second bisect over the same range
records nothing. Only commits that touch the subject packages are tried. A commit where the
subject fails to import is skipped for every case, one where a case fails for that case
alone, as `git bisect skip` would, and named. A case that differs from itself at bad is
nondeterministic: set aside, never blamed on a commit.
"""

from __future__ import annotations

import os
from pathlib import Path

from regression.diagnose.bisect_outputs import OutputsAtCommits, changed_cases
from regression.diagnose.bisect_search import Search
from regression.diagnose.bisection import Bisection, Change, Echo, count
from regression.errors import RegressionError
from regression.repository.gitcmd import git_process, run_git, short
from regression.run.types import Reference, Suite


def subject_pathspecs(reference: Reference) -> list[str]:
    """The subject packages' paths (a package folder or a module file), relative to the
    repository's top: the only files whose change can change what is recorded."""
    settings = reference.settings
    top = Path(reference.repo.working_dir).resolve()
    base = (settings.root / settings.subject_path).resolve()
    found = []
    for package in settings.subject_packages:
        path = Path(os.path.relpath(base / package.replace(".", "/"), top)).as_posix()
        found += [path, f"{path}.py"]
    return found


def commits_between(reference: Reference, good: str, bad: str) -> list[str]:
    """The commits after `good` up to `bad` (on a path from one to the other) that touch the
    subject packages, oldest first, and `bad` itself last."""
    if good == bad:
        raise RegressionError(f"good and bad are the same commit, {short(good)}: give --good "
                              "an older commit, or --bad a newer one")
    if git_process(reference.repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise RegressionError(f"good {short(good)} is not an ancestor of bad {short(bad)}: "
                              "give --good an older commit that bad descends from")
    listed = run_git(reference.repo, "rev-list", "--reverse", "--ancestry-path",
                     f"{good}..{bad}", "--", *subject_pathspecs(reference)).split()
    return [sha for sha in listed if sha != bad] + [bad]


def bisect(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo) -> Bisection:
    """Find, for each of `cases` (default: the cases that differ between good and bad), the
    first commit after `good` up to `bad` whose outputs of it differ from good's."""
    result, at_commits = _started(suite, good, bad, cases, echo)
    echo(f"trying good {short(good)} and bad {short(bad)} ...")
    at_good = at_commits.required("good", good, result.cases)
    at_bad = at_commits.required("bad", bad, list(at_good))
    differences = changed_cases(at_good, at_bad)
    if differences:
        differ = "differs" if len(differences) == 1 else "differ"
        echo(f"{count(len(differences), 'case')} {differ} between good and bad")
        at_commits.reproduce(bad, sorted(differences))
    result.cases = sorted(c for c in differences if c not in result.nondeterministic)
    if result.cases:
        echo(f"bisecting {count(len(result.commits), 'commit')} that "
             f"touch{'es' if len(result.commits) == 1 else ''} {result.subject} for "
             f"{count(len(result.cases), 'case')}")
        search = Search(result, {c: at_good[c] for c in result.cases},
                         {c: differences[c] for c in result.cases})
        search.run(at_commits, echo)
        result.changes = search.changes()
    return result


def scan(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo) -> Bisection:
    """Record every commit after `good` up to `bad` that touches the subject and list each
    one whose outputs of `cases` (default: every case) differ from the commit judged before
    it for that case: this finds changes that a later commit reverts, which comparing good
    with bad misses. A commit skipped for a case leaves that case's change as a range."""
    result, at_commits = _started(suite, good, bad, cases, echo)
    echo(f"trying good {short(good)} ...")
    before = at_commits.required("good", good, result.cases)
    after = {c: good for c in before}  # the last commit judged for each case
    hidden: dict[str, list[str]] = {c: [] for c in before}  # skipped for it since
    for number, sha in enumerate(result.commits, 1):
        echo(f"trying {short(sha)} ({number} of {len(result.commits)}) ...")
        now = at_commits.outputs(sha, list(before))
        at_commits.progress(sha, list(before))
        for case, changed in changed_cases(before, now).items():
            _change_at(result, sha, after[case], tuple(hidden[case])).cases[case] = changed
        for case in before:
            if case in now:
                before[case], after[case], hidden[case] = now[case], sha, []
            elif case in result.skipped.get(sha, {}):
                hidden[case].append(sha)
    _set_aside_flaky(result, at_commits, bad)
    result.cases = [c for c in result.cases if c not in result.nondeterministic]
    return result


def _change_at(result: Bisection, sha: str, after: str, hidden: tuple[str, ...]) -> Change:
    """The change found at `sha` after `after` across `hidden`, new if none is yet."""
    for change in result.changes:
        if (change.sha, change.after, change.hidden) == (sha, after, hidden):
            return change
    result.changes.append(Change(sha, after, hidden=hidden))
    return result.changes[-1]


def _set_aside_flaky(result: Bisection, at_commits: OutputsAtCommits, bad: str) -> None:
    """Record the cases a scan found changed once more at bad: those that differ from
    themselves are nondeterministic, and their changes are none."""
    changed = sorted({c for change in result.changes for c in change.cases})
    recorded_at_bad = [c for c in changed if c not in result.skipped.get(bad, {})]
    if recorded_at_bad:
        at_commits.reproduce(bad, recorded_at_bad)
    for change in result.changes:
        change.cases = {c: d for c, d in change.cases.items()
                        if c not in result.nondeterministic}
    result.changes = [change for change in result.changes if change.cases]


def _started(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo
             ) -> tuple[Bisection, OutputsAtCommits]:
    """A bisection of the commits from good to bad, and what records them."""
    commits = commits_between(suite.reference, good, bad)
    subject = ", ".join(subject_pathspecs(suite.reference)[::2])
    result = Bisection(good, bad, commits, _known(suite, cases) or sorted(suite.cases),
                       subject)
    return result, OutputsAtCommits(suite, echo, result)


def _known(suite: Suite, cases: list[str]) -> list[str]:
    """`cases`, each checked to be a case of the suite."""
    unknown = [c for c in cases if c not in suite.cases]
    if unknown:
        raise RegressionError(f"not a regression case of this suite: {', '.join(unknown)}; "
                              "give node ids as `invoke shards --list` prints them")
    return cases
