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

import math
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from regression.errors import RegressionError
from regression.repository.gitcmd import git_process, run_git, short
from regression.references.needed import NeededReferences, Wanted
from regression.report import count
from regression.repository.revision import subject_objects_at
from regression.run.types import Reference, Suite, at_commit, subject_folder
from regression.store.cache import Entry
from regression.store.inventory import BISECT
from regression.store.record import ABSENT, NONDETERMINISTIC, UNCOLLECTED

if TYPE_CHECKING:
    from regression.compare.outputs import Difference

Echo = Callable[[str], None]
Outputs = dict[str, object]
Differences = list[tuple[str, list["Difference"]]]
REMOVED = "\0removed"
"""The one output a case has at a commit whose tests do not collect it while good's do."""


@dataclass
class Change:
    """Cases whose outputs changed at `sha`, or, when `hidden` commits before it were
    skipped for them, at one of those or `sha`; the outputs were as before at `after`."""

    sha: str
    after: str
    cases: dict[str, Differences] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()
    merged: tuple[str, str] | None = None
    """Where `sha` is a merge: the base and the tip of the branch it merged, which brought
    the change (the search follows the main line, so a merge is as far as it goes)."""


@dataclass
class Bisection:
    """What a bisect or scan found, and what it cost."""

    good: str
    bad: str
    commits: list[str]
    """The commits tried, oldest first: those after good that touch the subject, and bad."""
    cases: list[str]
    """The cases judged: those given, or those whose outputs differ between good and bad."""
    subject: str = "."
    """What the commits touch, as shown: the subject packages' paths."""
    changes: list[Change] = field(default_factory=list)
    """Bisect: each case's first commit whose outputs differ from good's, cases that agree
    together. Scan: each commit whose outputs differ from those judged before it."""
    skipped: dict[str, dict[str, str]] = field(default_factory=dict)
    """For each skipped commit, the cases it is skipped for, each with why."""
    failed: dict[str, str] = field(default_factory=dict)
    """Commits skipped for every case (the subject fails to import there), with why."""
    nondeterministic: dict[str, str] = field(default_factory=dict)
    """Cases set aside because they differ from themselves, each with how."""
    recorded_at: set[str] = field(default_factory=set)
    """Commits at which something had to be recorded (the rest came from the cache)."""

    @property
    def recorded(self) -> int:
        return len(self.recorded_at)


def suite_at(suite: Suite, sha: str, cases: list[str]) -> Suite:
    """The suite recorded at `sha`, narrowed to `cases`."""
    reference = at_commit(suite.reference, sha)
    entry = Entry(suite.entry.directory.parent,
                  {**suite.entry.parts, "subject code": reference.code}, made_by=BISECT,
                  reference=sha)
    return replace(suite, reference=reference, entry=entry,
                   cases={c: suite.cases[c] for c in cases})


class OutputsAtCommits:
    """Records commits on demand, each case once at each; notes for which cases a commit is
    skipped and why, and the cases stored as nondeterministic."""

    def __init__(self, suite: Suite, echo: Echo, result: Bisection) -> None:
        self.suite, self.echo, self.result = suite, echo, result
        self.failed = result.failed
        self.references = NeededReferences()

    def outputs(self, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The outputs at `sha` of each of `cases` that can be judged there; the others are
        skipped at `sha` (all when the commit cannot be recorded) or nondeterministic."""
        wanted = [c for c in cases if c not in self.result.skipped.get(sha, {})
                  and c not in self.result.nondeterministic]
        if not wanted:
            return {}
        if sha not in self.failed:
            at = suite_at(self.suite, sha, wanted)
            try:
                generation = self.references.obtain(Wanted(at),
                                                    lambda line: self.echo(f"  {line}"))
                if generation.recorded or generation.absent:
                    self.result.recorded_at.add(sha)
                return self._loaded(at.entry, sha, wanted)
            except RegressionError as exc:
                self.failed[sha] = in_one_line(str(exc))
        for case in wanted:
            self._skip(sha, case, self.failed[sha])
        return {}

    def _loaded(self, entry: Entry, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The stored outputs of `cases` at `sha`; those absent there are skipped for."""
        found: dict[str, Outputs] = {}
        for case in cases:
            record = entry.load_case(case)
            if record is not None and record.status == ABSENT and \
                    record.reason == UNCOLLECTED and sha != self.result.good:
                found[case] = {REMOVED: record.reason}  # a difference, not a skip
            elif record is None or record.status == ABSENT:
                self._skip(sha, case, record.reason if record else "not recorded")
            elif record.status == NONDETERMINISTIC:
                self.result.nondeterministic[case] = f"at {short(sha)}: {record.reason}"
            else:
                found[case] = {o.name: o.value for o in record.outputs}
        return found

    def _skip(self, sha: str, case: str, why: str) -> None:
        self.result.skipped.setdefault(sha, {})[case] = why

    def required(self, name: str, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The outputs at good or bad, which must be recorded for some case at least."""
        found = self.outputs(sha, cases)
        skipped = self.result.skipped.get(sha, {})
        if sha in self.failed or (cases and all(c in skipped for c in cases)):
            why = self.failed.get(sha) or "; ".join(sorted(set(skipped.values())))
            raise RegressionError(f"the {name} commit {short(sha)} cannot be recorded "
                                  f"({why}); choose another")
        return found

    def reproduce(self, sha: str, cases: list[str]) -> None:
        """Record `cases` again at `sha` in a new process: those whose outputs differ from
        the first recording's are set aside as nondeterministic."""
        cases = [c for c in cases if c not in self.result.nondeterministic]
        if cases:
            found = self.references.obtain(Wanted(suite_at(self.suite, sha, cases), "reproduce"),
                                           self.echo).nondeterministic
            self.result.nondeterministic.update(
                {case: f"at {short(sha)}: {how}" for case, how in found.items()})

    def progress(self, sha: str, cases: list[str]) -> None:
        """Say, briefly, for how many of `cases` the commit was skipped (why comes at the
        end, once)."""
        skipped = [c for c in cases if c in self.result.skipped.get(sha, {})]
        if skipped:
            whom = "every case" if sha in self.failed else count(len(skipped), "case")
            self.echo(f"  skipped for {whom} (why is listed at the end)")


def in_one_line(message: str) -> str:
    """An error in one line: its first, and when that ends in a colon, the last line of what
    follows that is not the fix (the exception itself)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0]
    detail = [line for line in lines[1:] if not line.startswith("Fix")]
    return f"{first} {detail[-1]}" if first.endswith(":") and detail else first


def changed_cases(before: dict[str, Outputs], after: dict[str, Outputs]
                 ) -> dict[str, Differences]:
    """The cases of both whose outputs differ, each with every differing output's
    differences."""
    found = {case: _changed(outputs, after[case]) for case, outputs in before.items()
             if case in after}
    return {case: changed for case, changed in found.items() if changed}


def _changed(before: Outputs, after: Outputs) -> Differences:
    """Each differing output of a case; a case removed (or collected again) as one."""
    from regression.compare.outputs import compare_outputs

    if (REMOVED in before) != (REMOVED in after):
        return _case_change("removed: not collected here" if REMOVED in after
                            else "collected again")
    return [] if REMOVED in before else compare_outputs(before, after)


def _case_change(how: str) -> Differences:
    """A case's removal, or its return, as its one difference."""
    from regression.compare.outputs import SHAPES, Difference

    return [(REMOVED, [Difference("the case", how, kind=SHAPES)])]


def _collected_again(last: Outputs, now: Outputs) -> Differences:
    """A case collected again: said with how its outputs compare with those it had when
    last collected."""
    from regression.compare.outputs import compare_outputs
    from regression.report import changed_detail

    since = compare_outputs(last, now)
    return _case_change(f"collected again, changed: {changed_detail(since)}" if since
                        else "collected again, as before its removal")


def removal(changed: Differences) -> bool:
    """Whether a case's differences are its removal (or its return)."""
    return bool(changed) and changed[0][0] == REMOVED


class Search:
    """Binary searches of the commits, one per set of cases that agree so far: each case
    has its own bounds, and a commit tried is recorded for every case it lies between the
    bounds of, so cases that part ways go on from the commits already recorded."""

    def __init__(self, result: Bisection, at_good: dict[str, Outputs],
                 at_bad: dict[str, Differences]) -> None:
        self.result, self.at_good, self.commits = result, at_good, result.commits
        self.low = {c: -1 for c in at_good}  # good's outputs at low (-1: good itself)
        self.high = {c: len(self.commits) - 1 for c in at_good}  # differing from good's
        self.differences = dict(at_bad)

    def _key(self, case: str) -> tuple[int, int, frozenset[int]]:
        """A case's bounds and the commits between them skipped for it: cases with the same
        key follow one search."""
        low, high = self.low[case], self.high[case]
        skipped = frozenset(i for i in range(low + 1, high)
                            if case in self.result.skipped.get(self.commits[i], {}))
        return low, high, skipped

    def groups(self) -> dict[tuple[int, int, frozenset[int]], list[str]]:
        """The cases still searched for, by key."""
        found: dict[tuple[int, int, frozenset[int]], list[str]] = {}
        for case in self.low:
            if case not in self.result.nondeterministic:
                found.setdefault(self._key(case), []).append(case)
        return found

    def run(self, at_commits: OutputsAtCommits, echo: Echo) -> None:
        """Try commits until every case's first differing commit is found, or hidden only
        by commits skipped for it."""
        step = 0
        while True:
            open_ = {k: v for k, v in self.groups().items() if untried(*k) is not None}
            if not open_:
                return
            key = max(open_, key=lambda k: (k[1] - k[0], len(open_[k]), -k[0]))
            middle = untried(*key)
            assert middle is not None
            step += 1
            about = step + steps_left(list(open_)) - 1
            echo(f"step {step} of about {about}: trying {short(self.commits[middle])} ...")
            self._try(middle, at_commits)

    def _try(self, index: int, at_commits: OutputsAtCommits) -> None:
        """Record the commit at `index` for every case whose bounds it lies between."""
        sha = self.commits[index]
        wanted = [c for c in self.low if self.low[c] < index < self.high[c]
                  and c not in self.result.nondeterministic]
        found = at_commits.outputs(sha, wanted)
        at_commits.progress(sha, wanted)
        changed = changed_cases({c: self.at_good[c] for c in found}, found)
        for case in found:
            if case in changed:
                self.high[case], self.differences[case] = index, changed[case]
            else:
                self.low[case] = index

    def changes(self) -> list[Change]:
        """Each set of cases with the same first commit (or the same skipped range)."""
        found = []
        for (low, high, _), cases in sorted(self.groups().items(),
                                            key=lambda item: (item[0][1], item[0][0])):
            after = self.result.good if low < 0 else self.commits[low]
            found.append(Change(self.commits[high], after,
                                {c: self.differences[c] for c in sorted(cases)},
                                tuple(self.commits[low + 1:high])))
        return found


def untried(low: int, high: int, skipped: frozenset[int]) -> int | None:
    """The commit nearest the middle of (low, high) that is not skipped; None if all are."""
    middle = (low + high) // 2
    order = sorted(range(low + 1, high), key=lambda i: (abs(i - middle), i))
    return next((i for i in order if i not in skipped), None)


def steps_left(keys: list[tuple[int, int, frozenset[int]]]) -> int:
    """About how many commits the searches still try: a binary search's steps in each
    group, summed over the stretches of commits that no two groups share."""
    total, stretch_end, most = 0, -2, 0
    for low, high, skipped in sorted(keys):
        steps = math.ceil(math.log2(high - low - len(skipped)))
        if low >= stretch_end - 1:  # no untried commit in common with the stretch before
            total, most = total + most, 0
        stretch_end, most = max(stretch_end, high), max(most, steps)
    return total + most


def subject_paths(reference: Reference, *shas: str) -> list[str]:
    """The subject's paths as the key takes them at any of the commits `shas`, relative to
    the repository's top (revision.subject_objects): what bisect says it searched."""
    found: dict[str, None] = {}
    for objects in subject_objects_at(reference.repo, shas,
                                      subject_folder(reference.settings, reference.repo),
                                      reference.settings.subject_packages):
        found.update(dict.fromkeys(path for path, _, _ in objects))
    return list(found)


def commits_between(reference: Reference, good: str, bad: str) -> list[str]:
    """The commits after `good` up to `bad` on bad's main line (each one's first parent, on
    a path from good) that touch the subject packages (against that parent), oldest first,
    and `bad` itself last. A search needs an order in which a change, once made, stays:
    commits of a merged branch, listed among the main line's by date, have not (those of the
    main line lack the branch's change), so a change that came with a branch is found at
    its merge."""
    if good == bad:
        raise RegressionError(f"good and bad are the same commit, {short(good)}: give --good "
                              "an older commit, or --bad a newer one")
    if git_process(reference.repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise RegressionError(f"good {short(good)} is not an ancestor of bad {short(bad)}: "
                              "give --good an older commit that bad descends from")
    # every path the key may take lies in the subject folder: list the commits that touch it
    # (paths literal: no glob, no ':' magic), then keep those whose key's subject code differs
    # from their first parent's, whatever shape the packages have there
    folder = subject_folder(reference.settings, reference.repo)
    touched = run_git(reference.repo, "--literal-pathspecs", "rev-list", "--reverse",
                      "--first-parent", "--ancestry-path", f"{good}..{bad}", "--",
                      folder or ".").split()
    keys = subject_objects_at(reference.repo, [*touched, *(f"{sha}^" for sha in touched)],
                              folder, reference.settings.subject_packages)
    changed = [sha for at, sha in enumerate(touched) if keys[at] != keys[len(touched) + at]]
    return [sha for sha in changed if sha != bad] + [bad]


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
        at_commits.reproduce(bad, sorted(c for c, d in differences.items() if not removal(d)))
    result.cases = sorted(c for c in differences if c not in result.nondeterministic)
    if result.cases:
        echo(f"bisecting {count(len(result.commits), 'commit')} that "
             f"touch{'es' if len(result.commits) == 1 else ''} {result.subject} for "
             f"{count(len(result.cases), 'case')}")
        search = Search(result, {c: at_good[c] for c in result.cases},
                         {c: differences[c] for c in result.cases})
        search.run(at_commits, echo)
        result.changes = [replace(change, merged=merged_branch(suite.reference, change.sha))
                          for change in search.changes()]
    return result


def merged_branch(reference: Reference, sha: str) -> tuple[str, str] | None:
    """The base and tip of the branch that merge `sha` merged; None for a commit that is no
    merge."""
    parents = run_git(reference.repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]
    if len(parents) < 2:
        return None
    base = run_git(reference.repo, "merge-base", parents[0], parents[1]).strip()
    return base, parents[1]


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
    present = dict(before)  # each case's outputs where last collected
    for number, sha in enumerate(result.commits, 1):
        echo(f"trying {short(sha)} ({number} of {len(result.commits)}) ...")
        now = at_commits.outputs(sha, list(before))
        at_commits.progress(sha, list(before))
        for case, changed in changed_cases(before, now).items():
            if REMOVED in before[case]:  # back: as it was before its removal, or not
                changed = _collected_again(present[case], now[case])
            _change_at(result, sha, after[case], tuple(hidden[case])).cases[case] = changed
        for case in before:
            if case in now:
                before[case], after[case], hidden[case] = now[case], sha, []
                if REMOVED not in now[case]:
                    present[case] = now[case]
            elif case in result.skipped.get(sha, {}):
                hidden[case].append(sha)
    _set_aside_flaky(result, at_commits, bad)
    result.cases = [c for c in result.cases if c not in result.nondeterministic]
    result.changes = [replace(change, merged=merged_branch(suite.reference, change.sha))
                      for change in result.changes]
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
    changed = sorted({c for change in result.changes for c, d in change.cases.items()
                      if not removal(d)})  # a case absent at bad has nothing to reproduce
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
    subject = ", ".join("the whole repository" if path == "." else path
                        for path in subject_paths(suite.reference, good, bad))
    suite = _with_removed(suite, good, cases, echo)
    result = Bisection(good, bad, commits, _known(suite, cases) or sorted(suite.cases),
                       subject)
    return result, OutputsAtCommits(suite, echo, result)


def _with_removed(suite: Suite, good: str, cases: list[str], echo: Echo) -> Suite:
    """`suite` with the cases the tests collect with good's subject and not here (of
    `cases`, where given): removed since good, they are judged too. Unchanged where good's
    subject cannot be collected with (recording good then says why)."""
    from regression.run.api import candidate_checkout, collect

    if cases and all(c in suite.cases for c in cases):
        return suite
    echo(f"collecting the cases at good {short(good)}, to find those removed since ...")
    try:
        with candidate_checkout(suite.reference, good) as subject_root:
            at_good = collect(suite.reference, subject_root).cases
    except RegressionError:
        return suite
    removed = {c: h for c, h in at_good.items() if c not in suite.cases
               and (not cases or c in cases)}
    return replace(suite, cases={**suite.cases, **removed}) if removed else suite


def _known(suite: Suite, cases: list[str]) -> list[str]:
    """`cases`, each checked to be a case of the suite (here or at good)."""
    unknown = [c for c in cases if c not in suite.cases]
    if unknown:
        raise RegressionError(f"not a regression case of this suite, here or at good: "
                              f"{', '.join(unknown)}; give node ids as `invoke shards --list` "
                              "prints them")
    return cases
