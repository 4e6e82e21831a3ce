"""The state of a recording process that its plugins share: the job, the settings read once
from it, the cases wanted, how each ended, and the cache entry being written. The plugins
(plugin/recording_mode.py) each own one concern and import none of each other: they meet
here."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Protocol

import pytest

from regression.errors import RegressionError, error_data
from regression.environment.fingerprint import environment_parts, packages_in
from regression.plugin.common import report_reason
from regression.plugin.worker_messages import ERROR, WorkerMessages
from regression.plugin.tree_watch import own_reads
from regression.run.job import RecordingJob, TraceJob
from regression.store.cache import Entry
from regression.store.record import UNCOLLECTED, Output

if TYPE_CHECKING:
    from regression.config.settings import Settings

NOT_COLLECTABLE = "could not be collected at the reference: "
"""The start of why a case that failed to collect at the reference is not in it."""


class CaseHandler(Protocol):
    """What a recording does with each case, as its job's kind says: store it, compare it
    with the stored one, or trace it."""

    digests: bool
    """Whether large tensors are kept as their digests (False: their values)."""

    def case_done(self, nodeid: str, outputs: tuple[Output, ...]) -> None:
        """A wanted case ended, with what it checked (the run's `ran` and `absent` say how
        it ended)."""

    def result(self) -> dict[str, Any]:
        """Once the recording is proven the reference's: the job's result."""

    def discard(self) -> None:
        """The recording failed: nothing of it may be kept."""

    def merged(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        """xdist's controller: the job's result from its workers' results."""


class RecordingRun:
    """What the plugins of one recording process share."""

    def __init__(self, job: RecordingJob) -> None:
        self.job = job
        self.settings: Settings = job.settings
        """config.yaml as the parent read it: this process reads it no other way."""
        self.subject_root = Path(job.subject_root)
        self.roots = (self.subject_root.resolve(), self.settings.root.resolve())
        """Where frames of a failure's traceback are the project's own."""
        self.cases = job.cases
        """The wanted cases, node id -> harness digest (beside a check run: once it sent
        them)."""
        self.parts = job.parts
        """The key's parts the parent computed (beside a check run: once it sent them)."""
        self.where = "" if isinstance(job, TraceJob) else " at the reference"
        """Where the cases run, for why one is absent (explain says where itself)."""
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        """Under pytest-xdist: this worker's id; it stores the cases it ran."""
        self.keeper: CaseHandler | None = None
        self.relay: WorkerMessages | None = None
        self.absent: dict[str, str] = {}
        """The wanted cases that failed or skipped, and why."""
        self.collect_errors: dict[str, str] = {}
        self.error_reasons: dict[str, str] = {}
        self.collected: set[str] | None = None  # None: this process collected nothing
        self.collected_cases: set[str] = set()
        """The regression cases collected (deselected ones too), wanted or not."""
        self.ran: set[str] = set()
        self.test_modules: set[Path] = set()
        self.helpers: dict[str, str] = {}
        """The test code besides the test modules the cases used, with its digests."""
        self.ask_shared: Callable[[], list[str]] = list
        """Once the cases have ended: what this recording used that the check run beside
        it wrote meanwhile (files, ports), as the check run says; none without one."""
        self.failed = False
        self.stopping = ""
        """Why the recording stops after the case under way (its check run is gone)."""
        self.at_end: list[Callable[[], None]] = []
        """What proves the recording the reference's once its cases have ended, in order,
        before the keeper's result is taken; each raises RegressionError if it cannot."""
        self._entry: Entry | None = None

    @property
    def keeps(self) -> CaseHandler:
        assert self.keeper is not None
        return self.keeper

    def entry(self) -> Entry:
        """The cache entry of the environment the parent planned for, which must be ours.
        The key's packages are the job's: this process reads none of the project's files."""
        if self._entry is None:
            with own_reads():
                parts = environment_parts(self.settings, self.job.resolved.code,
                                          packages_in(self.parts))
            entry = Entry(self.settings.cache_dir, parts, reference=self.job.reference)
            if entry.parts != self.parts:
                raise RegressionError(
                    "the recording process sees another environment than the one that "
                    "started it: "
                    f"{sorted(k for k in entry.parts if entry.parts[k] != self.parts.get(k))}"
                )
            self._entry = entry
        return self._entry

    def reason(self, report: pytest.TestReport | pytest.CollectReport) -> str:
        """Why a case or a file failed or skipped, in one line."""
        return self.error_reasons.get(report.nodeid) or report_reason(report)

    def not_collected(self, nodeid: str) -> str:
        """Why a case that did not run is not in the reference; "" if it was collected."""
        if self.collected is None or nodeid in self.collected:
            return ""
        error = self.collect_error_over(nodeid.split("::", 1)[0])
        return f"{NOT_COLLECTABLE}{error}" if error else UNCOLLECTED

    def collect_error_over(self, path: str) -> str:
        """Why the test file `path`, or a folder above it, failed to collect; "" if neither
        did."""
        for where, error in self.collect_errors.items():
            if path == where or path.startswith(where.rstrip("/") + "/") or not where:
                return error
        return ""

    def fail(self, error: RegressionError) -> None:
        """Stop the recording with an error the parent raises; a worker's goes to its
        controller through the relay."""
        self.failed = True
        if not self.worker:
            self.job.write_error(error)
        elif self.relay is not None:
            self.relay.send(ERROR, json.dumps(error_data(error)))
