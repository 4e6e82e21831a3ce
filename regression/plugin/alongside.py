"""Check mode: the recording that runs beside the check run's cases (record and check at
once, regression/run/underway.py). It starts before conftests load where the run will record
every case, is handed its cases once they are known, and is waited for at the end of the
cases; one that fails makes every case checked against it an error."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Generator

import pytest

from regression.errors import RegressionError
from regression.report import ERROR, CaseOutcome, generation_lines
from regression.run.job import GEN_AUTO

if TYPE_CHECKING:
    from regression.config import Settings
    from regression.plugin.check import Check
    from regression.run.types import Generation, Suite
    from regression.run.underway import Underway


class Alongside:
    """A pytest plugin of the check run: starts, hands over and ends its recording."""

    def __init__(self, check: Check) -> None:
        self.check = check
        self.early: Underway | None = None
        """A recording started before collection, until the run's preparation takes it."""
        self.lines: list[str] = []
        """What the recording did, for the terminal summary."""

    def start_early(self, settings: Settings) -> None:
        """A run that will record every case (the cache has no entry for its reference: a
        CI runner's first run) starts the recording before conftests load, so that both
        processes start Python, torch and the subject at once; it is told its cases, and
        the environment's key, once they are known. Not where the run has xdist workers, or
        would record in workers or several times."""
        job, known = self.check.job, self.check.config.known_args_namespace
        if job is None or not settings.record_beside_check or job.gen != GEN_AUTO \
                or job.repeat > 1 \
                or settings.determinism.repeat > 1 or getattr(known, "numprocesses", None) \
                or getattr(known, "tx", None) or getattr(known, "collectonly", False) \
                or getattr(known, "regression_no_gen", False):
            return
        from regression.run.underway import Underway
        from regression.store.cache import names_reference

        try:
            if not names_reference(settings.cache_dir, job.reference):
                self.early = Underway(job.resolved)
        except RegressionError:
            pass  # the run records as it would have, and says then what is wrong

    def take_early(self) -> Underway | None:
        """The recording started early, now the preparation's to use or cancel."""
        early, self.early = self.early, None
        return early

    def cancel_early(self) -> None:
        """A recording started early that the run did not use ends, told no case."""
        if self.early is not None:
            self.early.cancel()
            self.early = None

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
        self.cancel_early()

    def _end(self, interrupted: bool = False, ran_out: bool = False) -> None:
        """Wait for the recording to end and say what it did. `ran_out`: the run's cases
        all ran and its session's fixtures are torn down, so a case that failed at the
        reference beside them can be recorded again, alone."""
        check = self.check
        if check.prepared is None or check.prepared.underway is None:
            return
        underway = check.prepared.underway
        check.prepared = replace(check.prepared, underway=None)
        try:
            generation = underway.finish(interrupted)
        except RegressionError as exc:
            self._unproven(underway.handed, exc)
            return
        if generation.doubtful and underway.suite is not None:
            generation = self._record_alone(underway.suite, generation) if ran_out \
                else self._not_recorded(generation)
        check.prepared = replace(check.prepared, generation=generation)
        self.lines = [*([underway.note] if underway.note else []),
                      *generation_lines(generation)]
        if check.config.pluginmanager.get_plugin("terminalreporter") is None:
            for line in self.lines:
                check.relay.echo(line)
        check.write_result()

    def _record_alone(self, suite: Suite, generation: Generation) -> Generation:
        """Cases that failed or skipped at the reference while this run checked beside the
        recording are recorded again, alone, now that this run's cases (and its session's
        fixtures) have ended: the two runs may have clashed (a port, a lock, memory), which
        is no reason to call a case "not in reference". One that runs alone is stored, and
        this run, which judged it against no reference, calls it an error."""
        from regression.run.generation import generate

        check, doubtful = self.check, generation.doubtful
        try:
            again = generate(replace(suite, cases={n: suite.cases[n] for n in doubtful}),
                             echo=check.relay.echo)
        except RegressionError as exc:
            for nodeid, reason in doubtful.items():
                check.ledger.judge(CaseOutcome(nodeid, ERROR, (
                    f"{reason} while this run checked beside the recording, and recording "
                    f"it again alone failed: {exc}")))
            return generation
        for nodeid in doubtful.keys() - again.absent.keys():  # recorded alone, or meanwhile
            check.ledger.judge(CaseOutcome(nodeid, ERROR, (
                f"{doubtful[nodeid]} while this run checked beside the recording, but "
                "recorded alone it ran, and is stored now: run again to check it (did the "
                "two runs clash over a port, a lock or memory? `record_beside_check: false` "
                "in config.yaml records first)")))
        return replace(generation, recorded=[*generation.recorded, *again.recorded],
                       absent={**generation.absent, **again.absent}, doubtful={})

    def _not_recorded(self, generation: Generation) -> Generation:
        """The run stopped early: its fixtures may still hold what the doubtful cases need,
        so they are not recorded alone now; each is an error, and nothing is stored."""
        for nodeid, reason in generation.doubtful.items():
            self.check.ledger.judge(CaseOutcome(nodeid, ERROR, (
                f"{reason} while this run checked beside the recording; the run stopped "
                "before it could be recorded alone, so nothing is stored: run again")))
        return replace(generation, doubtful={})

    def _unproven(self, checked: set[str], error: RegressionError) -> None:
        """The recording failed: each case checked against what it handed over is an error,
        and the run says why (the task, from the job's error)."""
        check = self.check
        for nodeid in sorted(checked):
            check.ledger.judge(CaseOutcome(nodeid, ERROR, (
                f"checked against a reference that the recording at {check.label} did not "
                "prove its own: the recording failed at its end, as said below")))
        if check.job is not None:
            check.job.write_error(error)
        else:
            check.ledger.error(f"the recording at {check.label} failed: {error}")

    @pytest.hookimpl(tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        """What the recording did, after the cases' progress."""
        for line in self.lines:
            terminalreporter.write_line(line)
