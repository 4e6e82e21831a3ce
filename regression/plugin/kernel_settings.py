"""A recording's kernel settings: config.yaml's determinism, set before the subject loads
and again before each case."""

from __future__ import annotations

import pytest

from regression.environment import determinism
from regression.plugin.common import uses_fixture
from regression.plugin.recording_run import RecordingRun
from regression.plugin.worker_messages import CONTROLLER, role


class KernelSettings:
    """A pytest plugin: the process's kernel settings, and the determinism settings before
    each case that uses the fixture."""

    def __init__(self, run: RecordingRun) -> None:
        self.run = run

    def prepare(self) -> None:
        """Before conftests load: what must be set before torch starts (RegressionError if
        it cannot be)."""
        determinism.prepare_process(self.run.settings.device)

    @pytest.hookimpl(tryfirst=True)  # before the subject is imported
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if role(session.config) == CONTROLLER:
            return  # pytest-xdist's controller runs no case: its workers import torch
        determinism.apply(self.run.settings.determinism)  # once here: the first call takes seconds

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if uses_fixture(item):
            determinism.apply(self.run.settings.determinism)
