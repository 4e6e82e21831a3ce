"""Storing references (a record job): each case the reference runs is stored as it ends,
and let go; beside a check run, handed over to it too."""

from __future__ import annotations

import os
from typing import Any, Mapping

import pytest

from regression.errors import RegressionError
from regression.plugin.recording_run import NOT_COLLECTABLE, RecordingRun
from regression.run.handoff import hand_over
from regression.run.job import RecordJob
from regression.run.overlap import shared_reason
from regression.store.cache import Entry
from regression.store.record import ABSENT, CaseRecord, Output, StagedCase


class CaseStorer:
    """A pytest plugin: writes each case's tensors as the case ends, and its record, which
    makes it valid, once the whole recording is proven the reference's."""

    def __init__(self, run: RecordingRun, job: RecordJob) -> None:
        self.run = run
        self.digests = not job.full_values
        self.staged: dict[str, StagedCase] = {}
        """Cases whose tensors are written: each one's record, as small data."""
        self.problem: RegressionError | None = None
        """Why a case could not be staged: the recording fails with it at its end."""
        self.created = False
        self.beside = job.beside is not None
        """Whether a check run beside this recording checks each case meanwhile."""
        self.handoff = job.beside.handoff if job.beside else -1
        """The pipe each stored case is handed over on; -1: none (or its reader is gone)."""
        if self.handoff >= 0:
            try:
                os.set_inheritable(self.handoff, False)  # not the tests' own child processes
            except OSError:
                self.handoff = -1

    def case_done(self, nodeid: str, outputs: tuple[Output, ...]) -> None:
        run = self.run
        if self.problem:
            return
        if nodeid in run.absent:
            self._hand_over_absent(nodeid, run.absent[nodeid])
            return
        if nodeid not in run.ran:
            return
        try:
            entry = self._created()
            staged = self.staged[nodeid] = entry.stage_case(
                CaseRecord(nodeid, run.cases[nodeid], outputs=outputs))
        except RegressionError as exc:
            self.problem = exc  # nothing is handed over: the check run waits for the end
            return
        self._hand_over(staged.body)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The wanted cases that do not exist at the reference are handed over at once."""
        for nodeid in self.run.cases:
            reason = self.run.not_collected(nodeid)
            if reason:
                self._hand_over_absent(nodeid, reason)

    def _hand_over_absent(self, nodeid: str, reason: str) -> None:
        if self.handoff >= 0 and not self.problem:
            record = CaseRecord(nodeid, self.run.cases[nodeid], status=ABSENT,
                                reason=reason)
            try:
                body = self.run.entry().stage_case(record).body
            except RegressionError as exc:
                self.problem = exc
                return
            self._hand_over(body)

    def _hand_over(self, body: Mapping[str, object]) -> None:
        """Record and check at once: the check run may check the case now."""
        if self.handoff >= 0 and not hand_over(self.handoff, body):
            self.handoff = -1  # the check run, which holds the entry's lock, is gone
            self.problem = RegressionError(
                "the check run that started this recording ended before it: nothing is "
                "stored, as the entry's lock went with it")
            self.run.stopping = str(self.problem)

    def _created(self) -> Entry:
        """The recording's entry, made once (the parent made it: this only proves it)."""
        entry = self.run.entry()
        if not self.created:
            entry.create()
            self.created = True
        return entry

    def result(self) -> dict[str, Any]:
        """Every wanted case stored: recorded, or not in the reference and why."""
        if self.problem is not None:
            raise self.problem
        run = self.run
        entry = self._created()
        recorded, absent, doubtful = [], {}, {}
        shared = run.ask_shared()
        for nodeid, harness in run.cases.items():
            # Every xdist worker collects every case; the first one alone stores those
            # that do not exist at the reference.
            known = run.worker in ("", "gw0")
            failed = run.absent.get(nodeid, "")
            reason = failed or (run.not_collected(nodeid) if known else "")
            if self.beside and (failed or reason.startswith(NOT_COLLECTABLE)):
                doubtful[nodeid] = reason  # the check run beside it may be why
            elif shared and (reason or nodeid in self.staged):
                # its value may be the check run's: not stored (the check run may still read
                # its tensors; an orphan tensor file is never read, and goes when the case
                # is stored)
                doubtful[nodeid] = shared_reason(shared)
            elif reason:
                entry.save_case(CaseRecord(nodeid, harness, status=ABSENT, reason=reason,
                                           helpers=run.helpers))
                absent[nodeid] = reason
            elif nodeid in self.staged:
                entry.commit_case(self.staged.pop(nodeid), run.helpers)
                recorded.append(nodeid)
            # else: collected but never run (-x, --maxfail, -k in addopts): store nothing
        collected = self._collected() if run.worker in ("", "gw0") and not shared else None
        return {"recorded": recorded, "absent": absent, "doubtful": doubtful,
                "collected": collected, "helpers": dict(run.helpers)}

    def _collected(self) -> dict[str, list[str]]:
        """The regression cases each test file collected here (one that collected without
        error), wanted or not: the check run stores them (Collection) for the runs to come,
        which fail a case the working tree no longer collects."""
        run = self.run
        by_file: dict[str, list[str]] = {}
        for nodeid in sorted(run.collected_cases):
            file = nodeid.split("::", 1)[0]
            if not run.collect_error_over(file):
                by_file.setdefault(file, []).append(nodeid)
        return by_file

    def discard(self) -> None:
        if self.staged:
            entry = self.run.entry()
            for staged in self.staged.values():
                entry.drop_staged(staged)
            self.staged.clear()

    def merged(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        recorded = sorted({n for d in results for n in d["recorded"]})
        absent = {k: v for d in results for k, v in d["absent"].items()}
        collected = next((d["collected"] for d in results if d.get("collected") is not None),
                         None)
        helpers = {k: v for d in results for k, v in d.get("helpers", {}).items()}
        return {"recorded": recorded, "absent": absent, "collected": collected,
                "helpers": helpers}
