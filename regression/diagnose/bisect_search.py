"""The binary searches over the commits, one per set of cases that agree so far."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from regression.diagnose.bisect_outputs import changed_cases
from regression.diagnose.bisection import Bisection, Change, Differences, Echo, Outputs
from regression.repository.gitcmd import short

if TYPE_CHECKING:
    from regression.diagnose.bisect_outputs import OutputsAtCommits


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
