"""invoke bisect: the first commit between good and bad whose outputs differ from good's.

Each commit is recorded as a reference of its own (the working tree's tests, the subject from
a worktree of the commit), cached under its own key: a second bisect over the same range
records nothing. Only commits that touch the subject's folder are tried; one where the subject
fails to import or a case fails is skipped, as `git bisect skip` would, and named.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from .cache import ABSENT, Entry
from .errors import RegressionError
from .revision import git_process, run_git, short
from .runner import Reference, Suite, generate

if TYPE_CHECKING:
    from .compare import Difference

Echo = Callable[[str], None]


@dataclass
class Bisection:
    """What a bisect found, and what it cost."""

    good: str
    bad: str
    commits: list[str]
    """The commits tried, oldest first: those after good that touch the subject, and bad."""
    cases: list[str]
    """The cases judged: those given, or those whose outputs differ between good and bad."""
    first: str | None = None
    candidates: list[str] = field(default_factory=list)
    """When skipped commits hide the answer: the commits it may be, oldest first."""
    differences: dict[str, list[tuple[str, list[Difference]]]] = field(default_factory=dict)
    """The first commit's cases whose outputs differ from good's: each output's differences."""
    recorded: int = 0
    """Commits at which something had to be recorded (the rest came from the cache)."""
    skipped: dict[str, str] = field(default_factory=dict)
    changes: list[tuple[str, dict[str, list[tuple[str, list[Difference]]]]]] = field(
        default_factory=list)
    """--scan: each commit whose outputs differ from the commit judged before it."""


def commits_between(reference: Reference, good: str, bad: str) -> list[str]:
    """The commits after `good` up to `bad` (on a path from one to the other) that touch the
    subject's folder, oldest first, and `bad` itself last."""
    if good == bad:
        raise RegressionError(f"good and bad are the same commit, {short(good)}: give --good "
                              "an older commit, or --bad a newer one")
    if git_process(reference.repo, "merge-base", "--is-ancestor", good, bad).returncode != 0:
        raise RegressionError(f"good {short(good)} is not an ancestor of bad {short(bad)}: "
                              "give --good an older commit that bad descends from")
    listed = run_git(reference.repo, "rev-list", "--reverse", "--ancestry-path",
                     f"{good}..{bad}", "--", reference.settings.subject_path).split()
    return [sha for sha in listed if sha != bad] + [bad]


def _at(suite: Suite, sha: str, cases: list[str]) -> Suite:
    """The suite recorded at `sha`, narrowed to `cases`."""
    reference = replace(suite.reference, revision=sha, sha=sha)
    entry = Entry(suite.entry.directory.parent, {**suite.entry.parts, "reference": sha})
    return replace(suite, reference=reference, entry=entry,
                   cases={c: suite.cases[c] for c in cases})


class _Recorder:
    """Records commits on demand, once each; says which could not be judged and why."""

    def __init__(self, suite: Suite, echo: Echo, result: Bisection) -> None:
        self.suite, self.echo, self.result = suite, echo, result

    def outputs(self, sha: str, cases: list[str]) -> dict[str, dict[str, object]] | None:
        """Each case's outputs at `sha` by name; None when the commit is skipped."""
        if sha in self.result.skipped:
            return None
        at = _at(self.suite, sha, cases)
        try:
            generation = generate(at, echo=lambda line: self.echo(f"  {line}"))
        except RegressionError as exc:
            self.result.skipped[sha] = _in_one_line(str(exc))
            return None
        self.result.recorded += bool(generation.recorded or generation.absent)
        found: dict[str, dict[str, object]] = {}
        for case in cases:
            record = at.entry.load_case(case)
            if record is None or record.status == ABSENT:
                reason = record.reason if record else "not recorded"
                self.result.skipped[sha] = f"{case}: {reason}"
                return None
            found[case] = {o.name: o.value for o in record.outputs}
        return found


    def required(self, name: str, sha: str, cases: list[str]) -> dict[str, dict[str, object]]:
        """The outputs at good or bad, which must be recorded: there is no skipping them."""
        found = self.outputs(sha, cases)
        if found is None:
            raise RegressionError(f"the {name} commit {short(sha)} cannot be recorded "
                                  f"({self.result.skipped[sha]}); choose another")
        return found


def _in_one_line(message: str) -> str:
    """An error in one line: its first, and when that ends in a colon, the last line of what
    follows that is not the fix (the exception itself)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    first = lines[0]
    detail = [line for line in lines[1:] if not line.startswith("Fix")]
    return f"{first} {detail[-1]}" if first.endswith(":") and detail else first


def _differences(before: dict[str, dict[str, object]], after: dict[str, dict[str, object]]
                 ) -> dict[str, list[tuple[str, list[Difference]]]]:
    """The cases whose outputs differ, each with every differing output's differences."""
    from .compare import compare_outputs

    found = {case: compare_outputs(outputs, after[case]) for case, outputs in before.items()}
    return {case: changed for case, changed in found.items() if changed}


def bisect(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo) -> Bisection:
    """Find the first commit after `good` up to `bad` whose outputs of `cases` (default: the
    cases that differ between good and bad) differ from good's."""
    result, recorder = _started(suite, good, bad, cases, echo)
    commits = result.commits
    echo(f"trying good {short(good)} and bad {short(bad)} ...")
    at_good = recorder.required("good", good, result.cases)
    at_bad = recorder.required("bad", bad, result.cases)
    differences = _differences(at_good, at_bad)
    result.cases = sorted(differences)
    if not differences:
        return result
    at_good = {c: at_good[c] for c in result.cases}
    differ = "differs" if len(result.cases) == 1 else "differ"
    echo(f"{_count(len(result.cases), 'case')} {differ} between good and bad; bisecting "
         f"{_count(len(commits), 'commit')} that touch{'es' if len(commits) == 1 else ''} "
         f"{suite.reference.settings.subject_path}")
    low, high = -1, len(commits) - 1  # good's outputs at low (-1: good), differing at high
    while high - low > 1:
        middle = _untried(commits, low, high, result.skipped)
        if middle is None:
            result.candidates = commits[low + 1:high + 1]
            return result
        echo(f"trying {short(commits[middle])} ({middle + 1} of {len(commits)}) ...")
        outputs = recorder.outputs(commits[middle], result.cases)
        if outputs is None:
            echo(f"  skipped: {result.skipped[commits[middle]]}")
            continue
        found = _differences(at_good, outputs)
        if found:
            high, differences = middle, found
        else:
            low = middle
    result.first, result.differences = commits[high], differences
    return result


def scan(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo) -> Bisection:
    """Record every commit after `good` up to `bad` that touches the subject and list each
    one whose outputs of `cases` (default: every case) differ from the commit before it:
    this finds changes that a later commit reverts, which comparing good with bad misses."""
    result, recorder = _started(suite, good, bad, cases, echo)
    commits = result.commits
    echo(f"trying good {short(good)} ...")
    before = recorder.required("good", good, result.cases)
    for number, sha in enumerate(commits, 1):
        echo(f"trying {short(sha)} ({number} of {len(commits)}) ...")
        now = recorder.outputs(sha, result.cases)
        if now is None:
            echo(f"  skipped: {result.skipped[sha]}")
            continue
        changed = _differences(before, now)
        if changed:
            result.changes.append((sha, changed))
        before = now
    return result


def _started(suite: Suite, good: str, bad: str, cases: list[str], echo: Echo
             ) -> tuple[Bisection, _Recorder]:
    """A bisection of the commits from good to bad, and what records them."""
    commits = commits_between(suite.reference, good, bad)
    result = Bisection(good, bad, commits, _known(suite, cases) or sorted(suite.cases))
    return result, _Recorder(suite, echo, result)


def _known(suite: Suite, cases: list[str]) -> list[str]:
    """`cases`, each checked to be a case of the suite."""
    unknown = [c for c in cases if c not in suite.cases]
    if unknown:
        raise RegressionError(f"not a regression case of this suite: {', '.join(unknown)}; "
                              "give node ids as `invoke shards --list` prints them")
    return cases


def _untried(commits: list[str], low: int, high: int, skipped: dict[str, str]) -> int | None:
    """The commit nearest the middle of (low, high) that is not skipped; None if all are."""
    middle = (low + high) // 2
    order = sorted(range(low + 1, high), key=lambda i: (abs(i - middle), i))
    return next((i for i in order if commits[i] not in skipped), None)


def scan_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """What a scan found: each commit that changed outputs, each case in one line."""
    from .report import changed_detail

    verb = "changes" if len(result.changes) == 1 else "change"
    lines = [f"{len(result.changes)} of {_count(len(result.commits), 'commit')} after good "
             f"{short(result.good)} {verb} outputs of the {_count(len(result.cases), 'case')} "
             "judged:"]
    for sha, changed in result.changes:
        lines.append(f"  {short(sha)} {subject_line(sha)}")
        lines += [f"    {case}: {changed_detail(outputs)}" for case, outputs in changed.items()]
    lines += _skipped_lines(result, subject_line)
    lines.append(f"recorded at {_count(result.recorded, 'commit')}, the rest came from the "
                 "cache")
    return lines


def bisection_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """What a bisect found, for the terminal; `subject_line` gives a commit's first line."""
    from .report import changed_detail, mismatch_message

    good, bad = short(result.good), short(result.bad)
    if not result.cases:
        return [f"no case's outputs differ between good {good} and bad {bad}: nothing to "
                "bisect"]
    lines = []
    if result.first is not None:
        lines.append(f"first commit whose outputs differ from good {good}: "
                     f"{short(result.first)} {subject_line(result.first)}")
        for number, (case, changed) in enumerate(result.differences.items()):
            if number:  # the first case in full, the others in one line each
                lines.append(f"  {case}: {changed_detail(changed)}")
                continue
            lines.append(f"  {case}:")
            lines += [f"    {line}" for line in
                      mismatch_message(f"good {good}", changed, len(changed)).splitlines()]
    else:
        lines.append("the first commit whose outputs differ is one of these (the skipped "
                     "commits between them hide which):")
        lines += [f"  {short(sha)} {subject_line(sha)}" for sha in result.candidates]
    lines += _skipped_lines(result, subject_line)
    lines.append(f"{_count(len(result.cases), 'case')} judged; recorded at "
                 f"{_count(result.recorded, 'commit')}, the rest came from the cache")
    return lines


def _skipped_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    return [f"skipped {short(sha)} {subject_line(sha)}: {why}"
            for sha, why in result.skipped.items()]


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
