"""The ledger of a check run: which cases it was handed, which ran, and each one's verdict;
it proves every assigned case was judged, and says why one was not.

Plain data, nothing of pytest: the check plugins write into it as the run goes, and an
xdist controller merges its workers' ledgers into its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from regression.outcomes import CaseOutcome


@dataclass(frozen=True)
class RunFacts:
    """How pytest was asked to run: what explains a case that did not run."""

    collect_only: bool = False
    maxfail: int = 0


@dataclass
class CaseAccounts:
    """Every case a check run is accountable for, and what became of it."""

    expected: set[str] | None = None
    """The cases that must end judged, or the run fails; None: none are known (yet)."""
    collected: set[str] | None = None
    modules: set[str] = field(default_factory=set)
    """The test files collected, those that yield no test too (a file whose every case the
    subject removed)."""
    deselected: set[str] = field(default_factory=set)
    dropped: set[str] = field(default_factory=set)
    """Removed by a hook that did not deselect them."""
    ran: set[str] = field(default_factory=set)
    outcomes: dict[str, CaseOutcome] = field(default_factory=dict)
    running: str = ""
    """The test under way: named if the run stops in it."""
    stopped: str = ""
    """Why the run stopped before its end (pytest.exit(), Ctrl-C), if it did."""
    stopped_in: str = ""
    reported: set[str] = field(default_factory=set)
    """xdist's controller: the regression cases whose worker reported on them."""
    label: str = ""
    """The reference the verdicts are against, as messages name it."""
    errors: list[str] = field(default_factory=list)
    """What went wrong besides the cases' verdicts: reported at the end, and the run fails."""
    durations: dict[str, float] = field(default_factory=dict)
    """The seconds each regression case took (all its phases)."""
    notes: list[str] = field(default_factory=list)
    """What the run could not judge, said at its end without failing it."""
    gone: set[str] = field(default_factory=set)
    """Cases declared removed that neither this run nor the reference collects: the
    reference holds the removal, and the declaration is stale."""

    def error(self, text: str) -> None:
        """An error for the end of the run, said once however often it is found."""
        if text not in self.errors:
            self.errors.append(text)

    def judge(self, outcome: CaseOutcome) -> None:
        """The case's verdict (a later one replaces an earlier one)."""
        self.outcomes[outcome.nodeid] = outcome

    def outcome_of(self, nodeid: str) -> str:
        """The case's outcome so far; "" when it has none."""
        found = self.outcomes.get(nodeid)
        return found.outcome if found else ""

    def expect(self, cases: set[str]) -> None:
        """More cases this run must judge (an xdist worker's, merged in its controller)."""
        self.expected = (self.expected or set()) | cases

    def stop(self, why: str) -> None:
        self.stopped = why
        self.stopped_in = self.running

    def unjudged(self) -> list[str]:
        """The cases this run was handed that ended in no verdict."""
        return sorted((self.expected or set()) - set(self.outcomes))

    def failing(self, strict: bool) -> list[CaseOutcome]:
        """The outcome of each case that does not pass (see CaseOutcome.fails)."""
        return [o for o in self.outcomes.values() if o.fails(strict)]

    def why_not_run(self, nodeid: str, facts: RunFacts) -> str:
        """Why a case this run was handed ended without a verdict."""
        if nodeid in self.deselected:
            return "deselected by -k, -m or --deselect (PYTEST_ADDOPTS or addopts?)"
        if facts.collect_only:
            return "--collect-only: nothing ran"
        if nodeid in self.dropped:
            return ("removed from the run by a pytest_collection_modifyitems hook (a "
                    "conftest.py?) without deselecting it")
        if self.collected is not None and nodeid not in self.collected:
            return "not collected (an error, --ignore, or a renamed test?)"
        return self._cut_short(nodeid, facts) or "did not run"

    def _cut_short(self, nodeid: str, facts: RunFacts) -> str:
        """Why a case that was in the run never ended judged; "" when nothing says."""
        if self.stopped and nodeid == self.stopped_in:
            return f"the run stopped in this case: {self.stopped}"
        if self.stopped:
            where = f" in {self.stopped_in}" if self.stopped_in else ""
            return f"the run stopped before it: {self.stopped}{where}"
        if facts.maxfail:
            return "the run stopped early (-x or --maxfail)"
        if nodeid in self.ran:
            return ("it ran, but its verdict never reached the end of the run (its xdist "
                    "worker crashed?)")
        return ""

    def data(self) -> dict[str, Any]:
        """What an xdist worker hands its controller: JSON-able."""
        return {"expected": sorted(self.expected or ()), "label": self.label,
                "outcomes": [outcome_data(o) for o in self.outcomes.values()],
                "errors": self.errors, "durations": self.durations, "gone": sorted(self.gone),
                "notes": self.notes}

    def merge(self, data: dict[str, Any]) -> None:
        """A worker's ledger, merged into its controller's."""
        self.expect(set(data["expected"]))
        self.label = self.label or data["label"]
        for found in data["outcomes"]:
            self.judge(outcome_from(found))
        for text in data["errors"]:
            self.error(text)
        self.durations.update(data["durations"])
        self.gone.update(data.get("gone", ()))
        self.notes += [note for note in data.get("notes", ()) if note not in self.notes]


def outcome_data(outcome: CaseOutcome) -> dict[str, Any]:
    """A case's outcome as JSON-able fields: its fields are strings, numbers and tuples of
    strings, so a shallow dict is the whole of it (asdict's deep copy cost more than the
    rest of a case's accounts)."""
    return {name: getattr(outcome, name) for name in _OUTCOME_FIELDS}


_OUTCOME_FIELDS = tuple(f.name for f in fields(CaseOutcome))


def outcome_from(fields: dict[str, Any]) -> CaseOutcome:
    return CaseOutcome(**{**fields, "outputs": tuple(fields["outputs"]),
                          "names": tuple(fields.get("names", ()))})
