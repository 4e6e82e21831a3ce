"""The report of a check run: the terminal summary and GitHub's annotations (its step
summary: plugin/step_summary.py). Made from the ledger's small data (outcomes, errors) alone,
never from a reference."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

import pytest

from regression.plugin.case_accounts import CaseAccounts
from regression.plugin.worker_messages import in_worker
from regression.plugin.step_summary import stale_of
from regression.report import github_annotations, summary_lines

if TYPE_CHECKING:
    from regression.declarations import Declaration


class Summary:
    """A pytest plugin: the torch-regression section at the end of the terminal report."""

    def __init__(self, config: pytest.Config, ledger: CaseAccounts,
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
        return [*lines, *(f"NOTE {note}" for note in ledger.notes),
                *(f"ERROR {error}" for error in ledger.errors)]
