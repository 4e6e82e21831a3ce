"""Recording beside a check run: the wanted cases come from the check run once it has
collected them, and what this process touches outside its own folders is told to it at the
end, so that nothing the check run may have written meanwhile is stored."""

from __future__ import annotations

import pytest

from regression.errors import RegressionError
from regression.plugin.recording_run import RecordingRun
from regression.plugin.worker_messages import CONTROLLER, role
from regression.run import overlap
from regression.run.handoff import ask_shared, receive_cases
from regression.run.job import Beside


class BesideCheckRun:
    """A pytest plugin: receives the wanted cases, and watches what the recording touches."""

    def __init__(self, run: RecordingRun, beside: Beside) -> None:
        self.run = run
        self.beside = beside
        self.received = False
        self.touches: overlap.Touches | None = None
        run.ask_shared = self.shared

    def start(self) -> None:
        """Before any of the user's code runs: watch what this process touches."""
        settings = self.run.settings
        self.touches = overlap.Touches([*overlap.tool_folders(settings.cache_dir),
                                        settings.path])
        overlap.watch(self.touches)

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if role(session.config) != CONTROLLER:
            overlap.note_native_readers()  # torch is loaded now

    def pytest_collection_modifyitems(self) -> None:
        """Started early: the check run says now what it needs (before the wanted cases are
        chosen, trylast)."""
        if not self.received:
            self.run.cases, self.run.parts = receive_cases(self.beside.cases)
            self.received = True

    def shared(self) -> list[str]:
        """Once the cases have ended: what this recording used that the check run wrote
        meanwhile (files, ports), as the check run says."""
        touches, self.touches = self.touches, None
        if touches is None:
            return []
        overlap.stop(touches)
        shared = ask_shared(self.beside.handoff, self.beside.cases, touches.data())
        if shared is None:
            raise RegressionError(
                "the check run that started this recording ended before it: nothing is "
                "stored, as the entry's lock went with it")
        return shared
