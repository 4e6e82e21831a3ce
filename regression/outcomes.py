"""How a regression case ends in check mode, as plain data: the outcome names and one
case's outcome. The plugin judges into these, the check run hands them back to the invoke
process in its completion record, and the reports turn them into text at the edge; this
module imports nothing of the package."""

from __future__ import annotations

from dataclasses import dataclass

IDENTICAL = "identical"
CHANGED = "changed"
NEW = "not in reference"
ERROR = "error"
OUTCOMES = (IDENTICAL, CHANGED, NEW, ERROR)
"""The outcomes every summary counts, in its order."""
DECLARED = "declared"
"""Changed within what regression-changes.yaml declares for it: it passes, with its reason."""
NONDETERMINISTIC = "nondeterministic"
"""Its recordings at the reference differed: skipped, not compared; counted when it occurs."""
REMOVED = "removed"
"""Collected at the reference, not here, by unchanged test code: the subject's change removed
it (a model its library no longer lists). It fails; counted when it occurs."""


@dataclass(frozen=True)
class CaseOutcome:
    """How one regression case ended in check mode."""

    nodeid: str
    outcome: str
    detail: str = ""
    outputs: tuple[str, ...] = ()
    """A changed case: each differing output (or leaf of one) in one line."""
    path: str = ""
    """The test's file, relative to the rootdir, and its line (1-based): where CI points."""
    line: int = 0
    relative: float | None = None
    """A changed case: the largest relative difference of its float tensors (inf where a
    reference element is 0); None where none was measured."""
    names: tuple[str, ...] = ()
    """A changed or declared case: the names of the outputs that differ."""
    size: str = ""
    """A changed or declared case: rounding-level or behaviour, by the verdict; a declared
    removal: removed."""
    reason: str = ""
    """A declared case: why it changed, as its declaration says."""

    def fails(self, strict: bool) -> bool:
        """Whether the case does not pass: changed, removed or error, and with
        --regression-strict also not in reference or nondeterministic."""
        return self.outcome in (CHANGED, REMOVED, ERROR) or \
            (strict and self.outcome in (NEW, NONDETERMINISTIC))
