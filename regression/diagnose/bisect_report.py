"""The terminal lines that say what a bisect or scan found."""

from __future__ import annotations

from typing import Callable

from regression.diagnose.bisect import Bisection, Change, Differences, removal
from regression.repository.gitcmd import short
from regression.report import count


def scan_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """What a scan found: each commit that changed outputs, each case in one line."""
    verb = "changes" if len(result.changes) == 1 else "change"
    lines = [f"{len(result.changes)} of {count(len(result.commits), 'commit')} after good "
             f"{short(result.good)} {verb} outputs of the {count(len(result.cases), 'case')} "
             "judged:"]
    for change in result.changes:
        lines += _change_lines(result, change, subject_line)
    lines += _aside_lines(result) + _skipped_lines(result, subject_line)
    lines.append(f"recorded at {count(result.recorded, 'commit')}, the rest came from the "
                 "cache")
    return lines


def bisection_lines(result: Bisection, subject_line: Callable[[str], str]) -> list[str]:
    """What a bisect found, for the terminal; `subject_line` gives a commit's first line."""
    good, bad = short(result.good), short(result.bad)
    if not result.cases and not result.nondeterministic:
        return [f"no case's outputs differ between good {good} and bad {bad}: nothing to "
                "bisect", *_failed_at_good(result)]
    lines = []
    if len(result.changes) == 1 and not result.changes[0].hidden:
        lines += _first_commit_lines(result, result.changes[0], subject_line)
    elif result.changes:
        lines.append(f"first commits whose outputs differ from good {good}, each with the "
                     "cases it changed:")
        for change in result.changes:
            lines += _change_lines(result, change, subject_line)
    lines += _aside_lines(result) + _skipped_lines(result, subject_line)
    lines.append(f"{count(len(result.cases), 'case')} judged; recorded at "
                 f"{count(result.recorded, 'commit')}, the rest came from the cache")
    return lines


def _first_commit_lines(result: Bisection, change: Change,
                        subject_line: Callable[[str], str]) -> list[str]:
    """One commit changed every case: its first changed case in full (a removal has no
    more to say), then the others in one line each."""
    from regression.report import mismatch_message

    good = short(result.good)
    lines = [f"first commit whose outputs differ from good {good}: {short(change.sha)} "
             f"{subject_line(change.sha)}", *_merged_lines(change)]
    full = next((case for case, changed in change.cases.items() if not removal(changed)), "")
    if full:
        changed = change.cases[full]
        lines.append(f"  {full}:")
        lines += [f"    {line}" for line in
                  mismatch_message(f"good {good}", changed, len(changed)).splitlines()]
    lines += [f"  {case}: {_detail(changed)}" for case, changed in change.cases.items()
              if case != full]
    return lines


def _merged_lines(change: Change) -> list[str]:
    """Where the commit found is a merge: the change came with its branch, and how to find
    the commit on it."""
    if change.merged is None:
        return []
    base, tip = (short(sha) for sha in change.merged)
    return [f"  a merge: the change came with the branch it merged (the search follows the "
            f"main line); `invoke bisect --good {base} --bad {tip}` finds its commit there"]


def _change_lines(result: Bisection, change: Change,
                  subject_line: Callable[[str], str]) -> list[str]:
    """A commit and the cases it changed, one line each; or, where skipped commits hide
    which commit it was, the range and why."""
    cases = [f"    {case}: {_detail(changed)}" for case, changed in change.cases.items()]
    if not change.hidden:
        return [f"  {short(change.sha)} {subject_line(change.sha)}", *_merged_lines(change),
                *cases]
    whom = "this case" if len(change.cases) == 1 else "these cases"
    reasons = sorted({result.skipped[sha][case] for sha in change.hidden
                      for case in change.cases})
    could_be = ", ".join(short(sha) for sha in (*change.hidden, change.sha))
    return [f"  between {short(change.after)} and {short(change.sha)} "
            f"{subject_line(change.sha)}: {count(len(change.hidden), 'commit')} skipped for "
            f"{whom} because {'; '.join(_because(why, len(change.cases)) for why in reasons)}",
            f"    the first commit could be any of: {could_be}", *cases]


def _detail(changed: Differences) -> str:
    """A changed case in one line; a removed one as that."""
    from regression.report import changed_detail

    return changed[0][1][0].detail if removal(changed) else changed_detail(changed)


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
    lines = _failed_at_good(result)
    lines += [f"skipped {short(sha)} {subject_line(sha)} for every case: {why}"
              for sha, why in result.failed.items() if sha != result.good]
    together: dict[tuple[tuple[str, ...], str], list[str]] = {}
    ranges = {(sha, case) for change in result.changes for sha in change.hidden
              for case in change.cases}  # their reasons are given with the range
    for sha, cases in result.skipped.items():
        if sha in result.failed or sha == result.good:
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


def _failed_at_good(result: Bisection) -> list[str]:
    """Cases that fail at good itself: no commit can be judged against it for them."""
    good = short(result.good)
    if result.good in result.failed:
        return [f"no case can be judged: every case fails at good {good}: "
                f"{result.failed[result.good]}"]
    by_reason: dict[str, list[str]] = {}
    for case, why in result.skipped.get(result.good, {}).items():
        by_reason.setdefault(why, []).append(case)
    return [f"cannot be judged, since {'it fails' if len(cases) == 1 else 'they fail'} at good "
            f"{good} itself: {', '.join(sorted(cases))}: {why}"
            for why, cases in by_reason.items()]
