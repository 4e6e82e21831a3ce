"""A recording's end: its result, or its error, goes to the job file for the parent; under
pytest-xdist each worker's goes to the controller, which merges them."""

from __future__ import annotations

import atexit
import json
import os
import sys
from typing import Any

import pytest

from regression.errors import RegressionError, error_data, error_from_data
from regression.plugin.common import crash_reason
from regression.plugin.recording_run import RecordingRun
from regression.plugin.worker_messages import CONTROLLER, ERROR, SOLO, attach, role
from regression.run.job import decode
from regression.run.types import RecordResult

WORKER_KEY = "torch_regression_recorded"


class ResultWriter:
    """A pytest plugin: once the cases have ended and the recording is proven the
    reference's, writes the keeper's result; a recording that failed keeps nothing."""

    def __init__(self, run: RecordingRun) -> None:
        self.run = run
        self.wrote_result = False
        self.from_workers: list[dict[str, Any]] = []

    def pytest_configure(self, config: pytest.Config) -> None:
        self.run.relay = attach(config, self._relayed)
        self.run.relay.on_worker_done(WORKER_KEY, self._worker_done)

    def _relayed(self, kind: str, text: str) -> None:
        """xdist's controller: the first error a worker reports stops the recording."""
        if kind == ERROR and not self.run.failed:
            self.run.fail(error_from_data(json.loads(text)))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a case whose worker died stops the recording, named."""
        if not self.run.failed:
            self.run.fail(RegressionError(
                f"{crashitem} stopped the recording at the reference: "
                f"{crash_reason(report)}. The cases other workers finished are stored; "
                "`invoke gen --workers 1` records in one process, whose output shows why."))

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker sends its output
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        run = self.run
        if role(session.config) == CONTROLLER:
            self._finish_from_workers(session)
            return
        if not run.failed:
            try:
                for prove in run.at_end:
                    prove()
                self._done(run.keeps.result())
            except RegressionError as exc:
                run.fail(exc)
        if run.failed:
            run.keeps.discard()
        session.exitstatus = 3 if run.failed else 0

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """A recording that wrote its result ends its process here: Python's own teardown
        of torch's modules takes most of a second and serves nothing, and the check run may
        be waiting. The user's atexit functions run first; what is skipped is the rest of
        Python's teardown: joining threads that are not daemons, `__del__` of what is left,
        buffers of files never closed. A recording that failed, or wrote no result, ends as
        any process does, its output whole for the parent to quote."""
        if self.run.failed or not self.wrote_result or role(config) != SOLO:
            return
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)

    def _done(self, result: dict[str, Any]) -> None:
        """The result goes to the job file, or from an xdist worker to its controller."""
        if self.run.relay is None or not self.run.relay.hand_over(WORKER_KEY, result):
            self._write(result)

    def _write(self, data: dict[str, Any]) -> None:
        """A keeper's result, or its error (a trace that stopped), as the job's."""
        if "error" in data:
            self.run.fail(error_from_data(data))
        else:
            self.run.job.write_result(decode(RecordResult, data))
            self.wrote_result = True

    def _worker_done(self, data: Any, error: object) -> None:
        """xdist's controller: keep what each worker recorded, or its error."""
        self.from_workers.append(data or error_data(RegressionError(
            f"an xdist worker stopped: {error}")))

    def _finish_from_workers(self, session: pytest.Session) -> None:
        errors = [d for d in self.from_workers if "error" in d]
        if self.run.failed or errors:
            if errors and not self.run.failed:
                self.run.fail(error_from_data(errors[0]))
            session.exitstatus = 3
            return
        self._write(self.run.keeps.merged(self.from_workers))
        session.exitstatus = 0
