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
import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from regression.store.cache import ABSENT, NONDETERMINISTIC, Entry
from regression.store.inventory import BISECT
from regression.errors import RegressionError
from regression.revision import git_process, run_git, short
from regression.run.api import Reference, Suite, find_nondeterministic, generate

if TYPE_CHECKING:
    from regression.compare import Difference

Echo = Callable[[str], None]
Outputs = dict[str, object]
Differences = list[tuple[str, list["Difference"]]]


@dataclass
class Change:
    """Cases whose outputs changed at `sha`, or, when `hidden` commits before it were
    skipped for them, at one of those or `sha`; the outputs were as before at `after`."""

    sha: str
    after: str
    cases: dict[str, Differences] = field(default_factory=dict)
    hidden: tuple[str, ...] = ()


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


def _at(suite: Suite, sha: str, cases: list[str]) -> Suite:
    """The suite recorded at `sha`, narrowed to `cases`."""
    reference = replace(suite.reference, revision=sha, sha=sha)
    entry = Entry(suite.entry.directory.parent, {**suite.entry.parts, "reference": sha},
                  made_by=BISECT)
    return replace(suite, reference=reference, entry=entry,
                   cases={c: suite.cases[c] for c in cases})


class _Recorder:
    """Records commits on demand, each case once at each; notes for which cases a commit is
    skipped and why, and the cases stored as nondeterministic."""

    def __init__(self, suite: Suite, echo: Echo, result: Bisection) -> None:
        self.suite, self.echo, self.result = suite, echo, result
        self.failed = result.failed

    def outputs(self, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The outputs at `sha` of each of `cases` that can be judged there; the others are
        skipped at `sha` (all when the commit cannot be recorded) or nondeterministic."""
        wanted = [c for c in cases if c not in self.result.skipped.get(sha, {})
                  and c not in self.result.nondeterministic]
        if not wanted:
            return {}
        if sha not in self.failed:
            at = _at(self.suite, sha, wanted)
            try:
                generation = generate(at, echo=lambda line: self.echo(f"  {line}"))
                if generation.recorded or generation.absent:
                    self.result.recorded_at.add(sha)
                return self._loaded(at.entry, sha, wanted)
            except RegressionError as exc:
                self.failed[sha] = _in_one_line(str(exc))
        for case in wanted:
            self._skip(sha, case, self.failed[sha])
        return {}

    def _loaded(self, entry: Entry, sha: str, cases: list[str]) -> dict[str, Outputs]:
        """The stored outputs of `cases` at `sha`; those absent there are skipped for."""
        found: dict[str, Outputs] = {}
        for case in cases:
            record = entry.load_case(case)
            if record is None or record.status == ABSENT:
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
            found = find_nondeterministic(_at(self.suite, sha, cases), self.echo)
            self.result.nondeterministic.update(
                {case: f"at {short(sha)}: {how}" for case, how in found.items()})

    def progress(self, sha: str, cases: list[str]) -> None:
        """Say, briefly, for how many of `cases` the commit was skipped (why comes at the
        end, once)."""
        skipped = [c for c in cases if c in self.result.skipped.get(sha, {})]
        if skipped:
            whom = "every case" if sha in self.failed else _count(len(skipped), "case")
            self.echo(f"  skipped for {whom} (why is listed at the end)")


def _in_one_line(message: str) -> str:
    """An error in one line: its first, and when that ends in a colon, the last line of what
    follows that is not the fix (the exception itself)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0]
    detail = [line for line in lines[1:] if not line.startswith("Fix")]
    return f"{first} {detail[-1]}" if first.endswith(":") and detail else first


def _differences(before: dict[str, Outputs], after: dict[str, Outputs]
                 ) -> dict[str, Differences]:
    """The cases of both whose outputs differ, each with every differing output's
    differences."""
    from regression.compare import compare_outputs

    found = {case: compare_outputs(outputs, after[case]) for case, outputs in before.items()
             if case in after}
    return {case: changed for case, changed in found.items() if changed}


def bisect(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo) -> Bisection:
    """Find, for each of `cases` (default: the cases that differ between good and bad), the
    first commit after `good` up to `bad` whose outputs of it differ from good's."""
    result, recorder = _started(suite, good, bad, cases, echo)
    echo(f"trying good {short(good)} and bad {short(bad)} ...")
    at_good = recorder.required("good", good, result.cases)
    at_bad = recorder.required("bad", bad, list(at_good))
    differences = _differences(at_good, at_bad)
    if differences:
        differ = "differs" if len(differences) == 1 else "differ"
        echo(f"{_count(len(differences), 'case')} {differ} between good and bad")
        recorder.reproduce(bad, sorted(differences))
    result.cases = sorted(c for c in differences if c not in result.nondeterministic)
    if result.cases:
        echo(f"bisecting {_count(len(result.commits), 'commit')} that "
             f"touch{'es' if len(result.commits) == 1 else ''} {result.subject} for "
             f"{_count(len(result.cases), 'case')}")
        search = _Search(result, {c: at_good[c] for c in result.cases},
                         {c: differences[c] for c in result.cases})
        search.run(recorder, echo)
        result.changes = search.changes()
    return result


class _Search:
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

    def run(self, recorder: _Recorder, echo: Echo) -> None:
        """Try commits until every case's first differing commit is found, or hidden only
        by commits skipped for it."""
        step = 0
        while True:
            open_ = {k: v for k, v in self.groups().items() if _untried(*k) is not None}
            if not open_:
                return
            key = max(open_, key=lambda k: (k[1] - k[0], len(open_[k]), -k[0]))
            middle = _untried(*key)
            assert middle is not None
            step += 1
            about = step + _steps_left(list(open_)) - 1
            echo(f"step {step} of about {about}: trying {short(self.commits[middle])} ...")
            self._try(middle, recorder)

    def _try(self, index: int, recorder: _Recorder) -> None:
        """Record the commit at `index` for every case whose bounds it lies between."""
        sha = self.commits[index]
        wanted = [c for c in self.low if self.low[c] < index < self.high[c]
                  and c not in self.result.nondeterministic]
        found = recorder.outputs(sha, wanted)
        recorder.progress(sha, wanted)
        changed = _differences({c: self.at_good[c] for c in found}, found)
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


def _untried(low: int, high: int, skipped: frozenset[int]) -> int | None:
    """The commit nearest the middle of (low, high) that is not skipped; None if all are."""
    middle = (low + high) // 2
    order = sorted(range(low + 1, high), key=lambda i: (abs(i - middle), i))
    return next((i for i in order if i not in skipped), None)


def _steps_left(keys: list[tuple[int, int, frozenset[int]]]) -> int:
    """About how many commits the searches still try: a binary search's steps in each
    group, summed over the stretches of commits that no two groups share."""
    total, stretch_end, most = 0, -2, 0
    for low, high, skipped in sorted(keys):
        steps = math.ceil(math.log2(high - low - len(skipped)))
        if low >= stretch_end - 1:  # no untried commit in common with the stretch before
            total, most = total + most, 0
        stretch_end, most = max(stretch_end, high), max(most, steps)
    return total + most


def scan(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo) -> Bisection:
    """Record every commit after `good` up to `bad` that touches the subject and list each
    one whose outputs of `cases` (default: every case) differ from the commit judged before
    it for that case: this finds changes that a later commit reverts, which comparing good
    with bad misses. A commit skipped for a case leaves that case's change as a range."""
    result, recorder = _started(suite, good, bad, cases, echo)
    echo(f"trying good {short(good)} ...")
    before = recorder.required("good", good, result.cases)
    after = {c: good for c in before}  # the last commit judged for each case
    hidden: dict[str, list[str]] = {c: [] for c in before}  # skipped for it since
    for number, sha in enumerate(result.commits, 1):
        echo(f"trying {short(sha)} ({number} of {len(result.commits)}) ...")
        now = recorder.outputs(sha, list(before))
        recorder.progress(sha, list(before))
        for case, changed in _differences(before, now).items():
            _change_at(result, sha, after[case], tuple(hidden[case])).cases[case] = changed
        for case in before:
            if case in now:
                before[case], after[case], hidden[case] = now[case], sha, []
            elif case in result.skipped.get(sha, {}):
                hidden[case].append(sha)
    _set_aside_flaky(result, recorder, bad)
    result.cases = [c for c in result.cases if c not in result.nondeterministic]
    return result


def _change_at(result: Bisection, sha: str, after: str, hidden: tuple[str, ...]) -> Change:
    """The change found at `sha` after `after` across `hidden`, new if none is yet."""
    for change in result.changes:
        if (change.sha, change.after, change.hidden) == (sha, after, hidden):
            return change
    result.changes.append(Change(sha, after, hidden=hidden))
    return result.changes[-1]


def _set_aside_flaky(result: Bisection, recorder: _Recorder, bad: str) -> None:
    """Record the cases a scan found changed once more at bad: those that differ from
    themselves are nondeterministic, and their changes are none."""
    changed = sorted({c for change in result.changes for c in change.cases})
    recorded_at_bad = [c for c in changed if c not in result.skipped.get(bad, {})]
    if recorded_at_bad:
        recorder.reproduce(bad, recorded_at_bad)
    for change in result.changes:
        change.cases = {c: d for c, d in change.cases.items()
                        if c not in result.nondeterministic}
    result.changes = [change for change in result.changes if change.cases]


def _started(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo
             ) -> tuple[Bisection, _Recorder]:
    """A bisection of the commits from good to bad, and what records them."""
    commits = commits_between(suite.reference, good, bad)
    subject = ", ".join(subject_pathspecs(suite.reference)[::2])
    result = Bisection(good, bad, commits, _known(suite, cases) or sorted(suite.cases),
                       subject)
    return result, _Recorder(suite, echo, result)


def _known(suite: Suite, cases: list[str]) -> list[str]:
    """`cases`, each checked to be a case of the suite."""
    unknown = [c for c in cases if c not in suite.cases]
    if unknown:
        raise RegressionError(f"not a regression case of this suite: {', '.join(unknown)}; "
                              "give node ids as `invoke shards --list` prints them")
    return cases


def scan_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """What a scan found: each commit that changed outputs, each case in one line."""
    verb = "changes" if len(result.changes) == 1 else "change"
    lines = [f"{len(result.changes)} of {_count(len(result.commits), 'commit')} after good "
             f"{short(result.good)} {verb} outputs of the {_count(len(result.cases), 'case')} "
             "judged:"]
    for change in result.changes:
        lines += _change_lines(result, change, subject_line)
    lines += _aside_lines(result) + _skipped_lines(result, subject_line)
    lines.append(f"recorded at {_count(result.recorded, 'commit')}, the rest came from the "
                 "cache")
    return lines


def bisection_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """What a bisect found, for the terminal; `subject_line` gives a commit's first line."""
    good, bad = short(result.good), short(result.bad)
    if not result.cases and not result.nondeterministic:
        return [f"no case's outputs differ between good {good} and bad {bad}: nothing to "
                "bisect"]
    lines = []
    if len(result.changes) == 1 and not result.changes[0].hidden:
        lines += _first_commit_lines(result, result.changes[0], subject_line)
    elif result.changes:
        lines.append(f"first commits whose outputs differ from good {good}, each with the "
                     "cases it changed:")
        for change in result.changes:
            lines += _change_lines(result, change, subject_line)
    lines += _aside_lines(result) + _skipped_lines(result, subject_line)
    lines.append(f"{_count(len(result.cases), 'case')} judged; recorded at "
                 f"{_count(result.recorded, 'commit')}, the rest came from the cache")
    return lines


def _first_commit_lines(result: Bisection, change: Change,
                        subject_line: Callable[[str], str]) -> list[str]:
    """One commit changed every case: its first case in full, the others in one line."""
    from regression.report import changed_detail, mismatch_message

    good = short(result.good)
    lines = [f"first commit whose outputs differ from good {good}: {short(change.sha)} "
             f"{subject_line(change.sha)}"]
    for number, (case, changed) in enumerate(change.cases.items()):
        if number:
            lines.append(f"  {case}: {changed_detail(changed)}")
            continue
        lines.append(f"  {case}:")
        lines += [f"    {line}" for line in
                  mismatch_message(f"good {good}", changed, len(changed)).splitlines()]
    return lines


def _change_lines(result: Bisection, change: Change,
                  subject_line: Callable[[str], str]) -> list[str]:
    """A commit and the cases it changed, one line each; or, where skipped commits hide
    which commit it was, the range and why."""
    from regression.report import changed_detail

    cases = [f"    {case}: {changed_detail(changed)}" for case, changed in change.cases.items()]
    if not change.hidden:
        return [f"  {short(change.sha)} {subject_line(change.sha)}", *cases]
    whom = "this case" if len(change.cases) == 1 else "these cases"
    reasons = sorted({result.skipped[sha][case] for sha in change.hidden
                      for case in change.cases})
    could_be = ", ".join(short(sha) for sha in (*change.hidden, change.sha))
    return [f"  between {short(change.after)} and {short(change.sha)} "
            f"{subject_line(change.sha)}: {_count(len(change.hidden), 'commit')} skipped for "
            f"{whom} because {'; '.join(_because(why, len(change.cases)) for why in reasons)}",
            f"    the first commit could be any of: {could_be}", *cases]


def _because(why: str, cases: int) -> str:
    """A reason for a skip, to follow "because": "failed at ..." is what the cases did."""
    return f"{'it' if cases == 1 else 'they'} {why}" if why.startswith(("failed", "skipped")) \
        else why


def _aside_lines(result: Bisection) -> list[str]:
    if not result.nondeterministic:
        return []
    return ["set aside as nondeterministic (outputs that differ from themselves say nothing "
            "of the commits):",
            *(f"  {case}: {how}" for case, how in sorted(result.nondeterministic.items()))]


def _skipped_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """Each skip once (those hiding a change are given with its range): a commit that failed
    for every case, then the commits skipped for the same cases for the same reason
    together."""
    lines = [f"skipped {short(sha)} {subject_line(sha)} for every case: {why}"
             for sha, why in result.failed.items()]
    together: dict[tuple[tuple[str, ...], str], list[str]] = {}
    ranges = {(sha, case) for change in result.changes for sha in change.hidden
              for case in change.cases}  # their reasons are given with the range
    for sha, cases in result.skipped.items():
        if sha in result.failed:
            continue
        by_reason: dict[str, list[str]] = {}
        for case, why in cases.items():
            if (sha, case) in ranges:
                continue
            by_reason.setdefault(why, []).append(case)
        for why, skipped in by_reason.items():
            together.setdefault((tuple(sorted(skipped)), why), []).append(sha)
    for (names, why), shas in together.items():
        where = f"{short(shas[0])} {subject_line(shas[0])}" if len(shas) == 1 else \
            f"{len(shas)} commits ({', '.join(short(sha) for sha in shas)})"
        lines.append(f"skipped {where} for {', '.join(names)}: {why}")
    return lines


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
