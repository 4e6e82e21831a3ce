"""What a bisect or scan found: the changes, the skips, the cases set aside, and what it cost."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from regression.compare.outputs import Difference

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



def count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"
