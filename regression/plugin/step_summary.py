"""GitHub's step summary of a check run: refused before anything runs where it cannot be
written, and the run's report written into it at the end."""

from __future__ import annotations

import os

from regression import github
from regression.plugin.chart import difference_chart
from regression.errors import RegressionError
from regression.plugin.ledger import Ledger
from regression.report import markdown_summary


def require_step_summary() -> None:
    """Refuse a $GITHUB_STEP_SUMMARY that cannot be written before anything runs: at the
    end of the run it could only be reported."""
    if os.environ.get(github.STEP_SUMMARY):
        github.append(github.STEP_SUMMARY, "")


def write_step_summary(ledger: Ledger) -> None:
    """The run's report as Markdown in $GITHUB_STEP_SUMMARY, where GitHub shows it."""
    if os.environ.get(github.STEP_SUMMARY) and ledger.outcomes:
        try:
            github.append(github.STEP_SUMMARY, markdown_summary(
                ledger.label, ledger.outcomes.values())
                + difference_chart(ledger.outcomes.values()))
        except RegressionError as exc:
            ledger.errors.append(f"the step summary was not written: {exc}")
