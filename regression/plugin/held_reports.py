"""Check mode: the end of the recording that runs beside the check run's cases (record and
check at once, references/beside.py), which is waited for at the end of the cases; one that
fails makes every case checked against it an error.

A case that runs while the recording does is judged for good only when the recording has
ended (proven, failed, or sharing a file with this run): its reports are held until then, so
that pytest's own count, its JUnit file and the tool's verdict agree, case by case."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Generator

import pytest

from regression.errors import RegressionError
from regression.plugin.common import uses_fixture
from regression.outcomes import ERROR, CaseOutcome
from regression.report import generation_lines
from regression.run.overlap import SHARED

if TYPE_CHECKING:
    from regression.plugin.state import CheckState
    from regression.run.types import Generation, Suite


class HeldReports:
    """A pytest plugin of the check run: holds the reports of the cases checked while the
    recording beside the run goes on, ends that recording, and tells them as it ended."""

    def __init__(self, state: CheckState) -> None:
        self.state = state
        self.lines: list[str] = []
        """What the recording did, for the terminal summary."""
        self.held: list[tuple[pytest.Item, list[pytest.TestReport], CaseOutcome | None]] = []
        """The cases that ran while the recording did, with their reports, not yet told,
        and their outcome as they ran."""
        self.failed_held = 0
        """How many of them failed: counted for -x and --maxfail as they ran."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None
                                ) -> bool | None:
        """While the recording runs, a case runs as pytest would run it, but its reports are
        held until the recording has ended and its verdict is final."""
        references = self.state.references
        if references is None or references.beside is None \
                or not references.beside.running() or not uses_fixture(item):
            return None
        from _pytest.runner import runtestprotocol

        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        self.held.append((item, reports, self.state.ledger.outcomes.get(item.nodeid)))
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        if any(r.failed for r in reports):  # -x and --maxfail stop the run as they would
            session = item.session
            self.failed_held += 1
            session.testsfailed += 1
            maxfail = int(item.config.getvalue("maxfail") or 0)
            if maxfail and session.testsfailed >= maxfail:
                session.shouldfail = f"stopping after {session.testsfailed} failures"
        return True

    def _tell_held(self) -> None:
        """The held reports, each case's as its final verdict says: a case the tool calls
        an error is one for pytest too (its setup fails with the reason), never a pass."""
        held, self.held = self.held, []
        if held:
            held[0][0].session.testsfailed -= self.failed_held  # counted again as told
            self.failed_held = 0
        outcomes = self.state.ledger.outcomes
        for item, reports, judged in held:
            outcome = outcomes.get(item.nodeid)
            if outcome is not None and outcome.outcome == ERROR and outcome != judged:
                reports = _as_error(reports, outcome.detail)  # an error only found later
            for report in reports:
                item.ihook.pytest_runtest_logreport(report=report)

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """Once the cases have run (or the run was cut short), the recording ends: outside
        the terminal's own wrapper, so that what it says comes after the progress line."""
        try:
            result = yield
        except KeyboardInterrupt as stop:  # Ctrl-C reached the recording too; not pytest's
            self._end(interrupted=not isinstance(stop, pytest.Session.Interrupted))
            raise
        except BaseException:
            self._end()  # cut short: this run's fixtures may still be set up
            raise
        self._end(ran_out=not (session.shouldstop or session.shouldfail))
        return result

    def pytest_unconfigure(self) -> None:
        """A recording ends with the run, however the run ended."""
        self._end(ran_out=False)
        self.state.recorder.cancel_early()

    def _end(self, interrupted: bool = False, ran_out: bool = False) -> None:
        """Wait for the recording to end and say what it did. `ran_out`: the run's cases
        all ran and its session's fixtures are torn down, so a case that failed at the
        reference beside them can be recorded again, alone."""
        state = self.state
        beside = state.take_beside()
        if beside is None:
            return
        try:
            generation = beside.finish(interrupted)
        except RegressionError as exc:
            self._unproven(beside.handed, exc)
            self._tell_held()
            return
        self._taken(beside.taken_from_recording())
        if generation.doubtful and beside.suite is not None:
            generation = self._record_alone(beside.suite, generation) if ran_out \
                else self._not_recorded(generation)
        state.recorded(generation)
        self._tell_held()
        self.lines = [*([beside.note] if beside.note else []), *generation_lines(generation)]
        if state.config.pluginmanager.get_plugin("terminalreporter") is None:
            for line in self.lines:
                state.relay.echo(line)
        state.write_result()

    def _record_alone(self, suite: Suite, generation: Generation) -> Generation:
        """Cases that failed or skipped at the reference while this run checked beside the
        recording are recorded again, alone, now that this run's cases (and its session's
        fixtures) have ended: the two runs may have clashed (a port, a lock, memory), which
        is no reason to call a case "not in reference". One that runs alone is stored, and
        this run, which judged it against no reference, calls it an error."""
        state, doubtful = self.state, generation.doubtful
        try:
            again = state.recorder.record_alone(
                replace(suite, cases={n: suite.cases[n] for n in doubtful}), state.relay.echo)
        except RegressionError as exc:
            for nodeid, reason in doubtful.items():
                state.ledger.judge(CaseOutcome(nodeid, ERROR, (
                    f"{reason} while this run checked beside the recording, and recording "
                    f"it again alone failed: {exc}")))
            return generation
        for nodeid in doubtful.keys() - again.absent.keys():  # recorded alone, or meanwhile
            state.ledger.judge(CaseOutcome(nodeid, ERROR, _alone(doubtful[nodeid])))
        return replace(generation, recorded=[*generation.recorded, *again.recorded],
                       absent={**generation.absent, **again.absent}, doubtful={})

    def _taken(self, taken: list[str]) -> None:
        """This run used what the recording beside it wrote (a file, a port): each case that
        ran meanwhile may have been judged on the reference's values, and is an error."""
        if not taken:
            return
        more = f" and {len(taken) - 3} more" if len(taken) > 3 else ""
        for item, _, _ in self.held:
            self.state.ledger.judge(CaseOutcome(item.nodeid, ERROR, (
                f"this run used {', '.join(taken[:3])}{more} while the recording beside it "
                "wrote it: its verdict may rest on the reference's values; run again to check "
                "it (`record_beside_check: false` in config.yaml records first)")))

    def _not_recorded(self, generation: Generation) -> Generation:
        """The run stopped early: its fixtures may still hold what the doubtful cases need,
        so they are not recorded alone now; each is an error, and nothing is stored."""
        for nodeid, reason in generation.doubtful.items():
            self.state.ledger.judge(CaseOutcome(nodeid, ERROR, (
                f"{reason} while this run checked beside the recording; the run stopped "
                "before it could be recorded alone, so nothing is stored: run again")))
        return replace(generation, doubtful={})

    def _unproven(self, checked: set[str], error: RegressionError) -> None:
        """The recording failed: each case checked against what it handed over is an error,
        and the run says why (the task, from the job's error)."""
        state = self.state
        for nodeid in sorted(checked):
            state.ledger.judge(CaseOutcome(nodeid, ERROR, (
                f"checked against a reference that the recording at {state.label} did not "
                "prove its own: the recording failed at its end, as said below")))
        if state.job is not None:
            state.job.write_error(error)
        else:
            state.ledger.error(f"the recording at {state.label} failed: {error}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """What the recording did, after the cases' progress."""
        for line in self.lines:
            terminalreporter.write_line(line)


def _alone(reason: str) -> str:
    """Why a case recorded again alone is an error in this run."""
    if reason.startswith(SHARED):
        return (f"{reason}, so the value it recorded may have been the check run's: recorded "
                "again alone, it is stored now: run again to check it "
                "(`record_beside_check: false` in config.yaml records first). If that file "
                "keeps what one run computed for the next (a cache outside the repository), "
                "no run tells the two revisions apart: keep it under the tests or in "
                "pytest's tmp_path (docs/limits.md)")
    return (f"{reason} while this run checked beside the recording, but recorded alone it "
            "ran, and is stored now: run again to check it (did the two runs clash over a "
            "port, a lock or memory? `record_beside_check: false` in config.yaml records "
            "first)")


def _as_error(reports: list[pytest.TestReport], reason: str) -> list[pytest.TestReport]:
    """A case's reports as pytest's for a case whose setup failed with `reason`: what it
    was judged as it ran no longer holds (its reference was not proven, or may have been
    this run's own value), and the error is the tool's."""
    setup = next((r for r in reports if r.when == "setup"), None)
    if setup is None:
        return reports
    setup.outcome = "failed"
    setup.longrepr = f"torch-regression: {reason}"
    if hasattr(setup, "wasxfail"):
        del setup.wasxfail
    return [setup, *(r for r in reports if r.when == "teardown")]
