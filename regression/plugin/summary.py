"""The report of a check run: the terminal summary and GitHub's annotations (its step
summary: plugin/step_summary.py). Made from the ledger's small data (outcomes, errors) alone,
never from a reference."""

from __future__ import annotations

import os

import pytest

from regression.plugin.ledger import Ledger
from regression.plugin.relay import in_worker
from regression.report import github_annotations, summary_lines


class Summary:
    """A pytest plugin: the torch-regression section at the end of the terminal report."""

    def __init__(self, config: pytest.Config, ledger: Ledger) -> None:
        self.config = config
        self.ledger = ledger

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = self.summary()
        if lines:
            terminalreporter.section("torch-regression")
            for line in lines:
                terminalreporter.write_line(line)
        if os.environ.get("GITHUB_ACTIONS") == "true" and lines:
            for annotation in github_annotations(self.ledger.label,
                                                 self.ledger.outcomes.values()):
                terminalreporter.write_line(annotation)

    def summary(self) -> list[str]:
        """The section's lines; none in an xdist worker (its controller reports)."""
        if in_worker(self.config):
            return []
        ledger = self.ledger
        lines = summary_lines(ledger.label, ledger.outcomes.values()) if ledger.outcomes else []
        return [*lines, *(f"ERROR {error}" for error in ledger.errors)]
