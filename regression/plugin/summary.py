"""The report of a check run: the terminal summary, GitHub's annotations and step summary.
Made from the ledger's small data (outcomes, errors) alone, never from a reference."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

import pytest

from regression import github
from regression.plugin.chart import difference_chart
from regression.errors import RegressionError
from regression.plugin.ledger import Ledger
from regression.plugin.relay import in_worker
from regression.report import github_annotations, markdown_summary, summary_lines

if TYPE_CHECKING:
    from regression.declarations import Declaration


class Summary:
    """A pytest plugin: the torch-regression section at the end of the terminal report."""

    def __init__(self, config: pytest.Config, ledger: Ledger,
                 declarations: Sequence[Declaration] = ()) -> None:
        self.config = config
        self.ledger = ledger
        self.declarations = declarations

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = self.summary()
        if lines:
            terminalreporter.section("torch-regression")
            for line in lines:
                terminalreporter.write_line(line)
        if os.environ.get("GITHUB_ACTIONS") == "true" and lines:
            for annotation in github_annotations(self.ledger.label,
                                                 self.ledger.outcomes.values(),
                                                 stale_of(self.ledger, self.declarations)):
                terminalreporter.write_line(annotation)

    def summary(self) -> list[str]:
        """The section's lines; none in an xdist worker (its controller reports)."""
        if in_worker(self.config):
            return []
        ledger = self.ledger
        lines = summary_lines(ledger.label, ledger.outcomes.values(),
                              stale_of(ledger, self.declarations)) if ledger.outcomes else []
        return [*lines, *(f"ERROR {error}" for error in ledger.errors)]


def require_step_summary() -> None:
    """Refuse a $GITHUB_STEP_SUMMARY that cannot be written before anything runs: at the
    end of the run it could only be reported."""
    if os.environ.get(github.STEP_SUMMARY):
        github.append(github.STEP_SUMMARY, "")


def stale_of(ledger: Ledger, declarations: Sequence[Declaration]) -> list[Declaration]:
    """The declarations of the cases this run found identical."""
    if not declarations:
        return []
    from regression.declarations import stale

    return stale(declarations, ledger.outcomes.values())


def write_step_summary(ledger: Ledger, declarations: Sequence[Declaration] = ()) -> None:
    """The run's report as Markdown in $GITHUB_STEP_SUMMARY, where GitHub shows it."""
    if os.environ.get(github.STEP_SUMMARY) and ledger.outcomes:
        try:
            github.append(github.STEP_SUMMARY, markdown_summary(
                ledger.label, ledger.outcomes.values(), stale_of(ledger, declarations))
                + difference_chart(ledger.outcomes.values()))
        except RegressionError as exc:
            ledger.errors.append(f"the step summary was not written: {exc}")
