"""GitHub's step summary of a check run: refused before anything runs where it cannot be
written, and the run's report written into it at the end."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from regression import github
from regression.plugin.chart import difference_chart
from regression.errors import RegressionError
from regression.plugin.case_accounts import CaseAccounts
from regression.report import markdown_summary

if TYPE_CHECKING:
    from regression.declarations import Declaration


def require_step_summary() -> None:
    """Refuse a $GITHUB_STEP_SUMMARY that cannot be written before anything runs: at the
    end of the run it could only be reported."""
    if os.environ.get(github.STEP_SUMMARY):
        github.append(github.STEP_SUMMARY, "")


def stale_of(ledger: CaseAccounts, declarations: Sequence[Declaration]) -> list[Declaration]:
    """The declarations of the cases this run found identical, and of those declared
    removed that the reference no longer has either."""
    if not declarations:
        return []
    from regression.declarations import stale

    return [*stale(declarations, ledger.outcomes.values()),
            *(d for d in declarations if d.case in ledger.gone)]


def write_step_summary(ledger: CaseAccounts, declarations: Sequence[Declaration] = ()) -> None:
    """The run's report as Markdown in $GITHUB_STEP_SUMMARY, where GitHub shows it."""
    if os.environ.get(github.STEP_SUMMARY) and ledger.outcomes:
        try:
            github.append(github.STEP_SUMMARY, markdown_summary(
                ledger.label, ledger.outcomes.values(), stale_of(ledger, declarations))
                + difference_chart(ledger.outcomes.values()))
        except RegressionError as exc:
            ledger.errors.append(f"the step summary was not written: {exc}")
