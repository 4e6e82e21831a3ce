"""The judge of a check run: serves each case the fixture that compares its outputs with
the reference, and gives every phase's report its verdict (regression.plugin.verdict).

A case's reference is held while the case runs and let go when it ends: what the end of
the run needs of it (its outcome, in a few lines) is in the ledger.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Generator

import pytest

from regression.declarations import by_case, size_of, uncovered
from regression.errors import RegressionError, StoreError
from regression.plugin.common import exception_reason, report_reason, traceback_frames, \
    uses_fixture
from regression.plugin.case_accounts import outcome_data
from regression.plugin.worker_messages import in_worker
from regression.plugin.state import OUTCOME
from regression.report import largest_relative
from regression.plugin.verdict import FAIL, NOTE, SKIP, Case, Verdict, changes_nothing, \
    fixture_verdict, verdict

if TYPE_CHECKING:
    from regression.plugin.state import CheckState
    from regression.plugin.fixture import CheckSink, Regression
    from regression.store.record import CaseRecord

FIX = "run `invoke gen` to record it"


class _NoEntry(Exception):
    """The run's cache entry is not there (any more)."""


class Judge:
    """A pytest plugin: compares each case with the reference and judges its reports."""

    def __init__(self, state: CheckState) -> None:
        self.state = state
        self.ledger = state.ledger
        self.sinks: dict[str, CheckSink] = {}
        """The cases under way (one, but a plugin may nest runs): each with its reference."""
        self.helper_digests: dict[Path, str] = {}
        """Each helper file's digest, read once per run for every case that uses it."""
        self.error_reasons: dict[str, str] = {}
        self.waited: dict[str, float] = {}
        """Seconds a case waited for its reference from the recording beside the run: not
        the case's own time, which shards are balanced by."""
        self._entry_verified = False
        """Whether the entry's identity was verified in this run: once is enough, as every
        record names the entry's key (a record of another entry is refused)."""
        self.failed_on_outputs: set[str] = set()
        """Cases under way that pytest_runtest_call failed because their outputs differ."""
        self.declarations = by_case(state.job.declarations if state.job else ())
        """regression-changes.yaml's entries, by case, as the job hands them over."""

    def fixture(self, item: pytest.Item) -> Regression:
        from regression.plugin.fixture import CheckSink, Regression

        if self.state.references is None:
            pytest.fail("the regression fixture found no reference in this run", pytrace=False)
        record = self._record(item)
        sink = self.sinks[item.nodeid] = CheckSink(record, self.state.label)
        self.state.compared = True
        settings = self.state.settings
        return Regression(item.nodeid, settings.determinism, sink, settings.device)

    def _record(self, item: pytest.Item) -> CaseRecord:
        """The case's trusted reference; the case ends here (error or skip) without one."""
        record, problem = self._loaded(item)
        found = fixture_verdict(item.nodeid, self.state.label, problem,
                                record.status if record else "",
                                record.reason if record else "", self.state.strict)
        if found is not None and found.outcome is not None:
            self.ledger.judge(found.outcome)
            if found.action == SKIP:
                pytest.skip(found.message)
            pytest.fail(found.message, pytrace=False)
        assert record is not None
        return record

    def _loaded(self, item: pytest.Item) -> tuple[CaseRecord | None, str]:
        """The case's stored record, or why it cannot be used."""
        references = self.state.references
        assert references is not None
        entry, label = references.entry, self.state.label
        beside = references.beside
        if beside is not None and beside.covers(item.nodeid):
            began = time.perf_counter()
            try:
                record = beside.record_of(item.nodeid, self._say)
            except RegressionError:  # said once, at the end of the run
                self._stop(item, f"the recording at {label} failed")
                return None, (f"no reference: the recording at {label} failed (its error "
                              "ends this run's output)")
            finally:
                self.waited[item.nodeid] = time.perf_counter() - began
            if record is not None:
                return record, self._stale(record, item)
        try:
            if not self._entry_verified:  # once a run: each record names the entry's key
                self._require_entry()
                self._entry_verified = True
            record = entry.load_case(item.nodeid)
            if record is None:
                self._require_entry()  # an entry removed while the run ran: say so
        except _NoEntry:
            return None, f"no reference {label} is recorded for this environment; {FIX}"
        except StoreError as exc:
            return None, f"the stored reference cannot be trusted ({exc}); {FIX} again"
        except RegressionError as exc:
            return None, f"{exc}; {FIX} again"
        if record is None:
            return None, f"no reference is recorded for this case at {label}; {FIX}"
        return record, self._stale(record, item)

    def _require_entry(self) -> None:
        """Raise _NoEntry when the run's cache entry is missing, CacheError when it is not
        this environment's."""
        references = self.state.references
        assert references is not None
        if not references.entry.exists():
            raise _NoEntry()
        references.entry.verify_identity()

    def _say(self, line: str) -> None:
        """A line for the user while a case runs: past pytest's capture, to the terminal."""
        config = self.state.config
        capture = config.pluginmanager.get_plugin("capturemanager")
        if capture is None:
            self.state.relay.echo(line)
            return
        with capture.global_and_fixture_disabled():
            self.state.relay.echo(line)

    def _stop(self, item: pytest.Item, why: str) -> None:
        """No case after this one can be checked: the run stops, and says why."""
        item.session.shouldstop = why
        self.ledger.stop(why)

    def _stale(self, record: CaseRecord, item: pytest.Item) -> str:
        """Why a stored case no longer matches the test code that runs now; "" if it does."""
        references = self.state.references
        assert references is not None
        if record.harness != references.harness.of(item.path):
            return ("the test file, a conftest.py or pytest's settings changed since the "
                    "reference was recorded; "
                    f"{FIX} again")
        # config and hashing: not imported in plain runs
        from regression.environment.harness import changed_helpers

        changed = changed_helpers(references.suite.reference.settings.root, record.helpers,
                                  self.helper_digests)
        if changed:
            return (f"test code or environment it uses changed since the reference was recorded "
                    f"({', '.join(changed)}); {FIX} again")
        return ""

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """A case whose outputs differ fails once, after its body ran: every output it
        checks is compared, so the first difference does not hide the others."""
        result = yield
        failure = self._failure(item.nodeid)  # no frame of the failure holds the reference
        declared, undeclared = self._declared(item.nodeid)
        if failure and not declared:
            self.failed_on_outputs.add(item.nodeid)
            pytest.fail(f"{failure}\n{undeclared}" if undeclared else failure, pytrace=False)
        return result

    def _declared(self, nodeid: str) -> tuple[str, str]:
        """(the reason of the declaration that covers the case's change, why its declaration
        does not cover it); ("", "") for a case with no change or no declaration."""
        sink, declaration = self.sinks.get(nodeid), self.declarations.get(nodeid)
        if sink is None or declaration is None or not sink.changed:
            return "", ""
        why = uncovered(declaration, [name for name, _ in sink.changed],
                        size_of(d.rounding for d in sink.differences))
        return ("", why) if why else (declaration.reason, "")

    def _failure(self, nodeid: str) -> str | None:
        sink = self.sinks.get(nodeid)
        return sink.failure() if sink is not None else None

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after xfail and skip marks
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        nodeid = item.nodeid  # read once: a property, asked for often
        case = uses_fixture(item)
        if case:
            durations = self.ledger.durations  # not the wait for the recording beside it
            durations[nodeid] = durations.get(nodeid, 0.0) + max(
                0.0, report.duration - self.waited.pop(nodeid, 0.0))
        if call.excinfo is not None:
            roots = (self.state.config.rootpath.resolve(),)
            error = call.excinfo.value
            self.error_reasons[nodeid] = exception_reason(error, traceback_frames(error), roots)
        if case and self.state.references is not None:
            self._judge(item, nodeid, report)
        if case and in_worker(self.state.config):
            outcome = self.ledger.outcomes.get(nodeid)
            setattr(report, OUTCOME, outcome_data(outcome) if outcome else {})
        if report.when == "teardown":
            self._let_go(nodeid)
        return report

    def _let_go(self, nodeid: str) -> None:
        """The case has ended: its reference and what was known of its phases go."""
        self.sinks.pop(nodeid, None)
        self.error_reasons.pop(nodeid, None)
        self.failed_on_outputs.discard(nodeid)

    def _judge(self, item: pytest.Item, nodeid: str, report: pytest.TestReport) -> None:
        """Give a phase's report of a case its verdict: a case ends identical, changed,
        error, not in reference or nondeterministic, whatever marks and fixtures say."""
        if changes_nothing(report.when, report.outcome):
            return  # a setup or teardown that passed: its verdict keeps it as it is
        found = verdict(self._case(item, nodeid, report))
        if found.outcome is not None:
            self.ledger.judge(found.outcome)
        apply(found, report, str(item.path))

    def _case(self, item: pytest.Item, nodeid: str, report: pytest.TestReport) -> Case:
        """What is known of the case as this phase of it is reported."""
        sink = self.sinks.get(nodeid)
        reason = "" if report.passed else \
            self.error_reasons.get(nodeid) or report_reason(report)  # only a failure's is told
        label, strict, judged = self.state.label, self.state.strict, \
            self.ledger.outcome_of(nodeid)
        if sink is None:
            base = Case(nodeid, report.when, report.outcome, label, reason, strict, judged)
            if report.when == "setup" and report.skipped and not base.judged:
                return self._with_stored(base)
            return base
        path, line, _ = report.location
        failure = sink.failure() or ""
        declared, undeclared = self._declared(nodeid)
        differences = sink.differences if sink.changed else []
        return Case(nodeid, report.when, report.outcome, label, reason, strict, judged, True,
                    names=tuple(name for name, _ in sink.changed),
                    size=size_of(d.rounding for d in differences) if failure else "",
                    declared=declared, undeclared=undeclared, status=sink.record.status,
                    stored_reason=sink.record.reason,
                    checked=bool(sink.checked), failure=failure,
                    detail=sink.detail() if failure else "",
                    differences=tuple(str(d) for d in differences),
                    unchecked=tuple(sink.unchecked()),
                    failed_on_outputs=nodeid in self.failed_on_outputs,
                    path=path, line=(line or 0) + 1,
                    relative=largest_relative(differences) if failure else None)

    def _with_stored(self, case: Case) -> Case:
        """A case skipped before the fixture: what its stored record says, or why none can
        be trusted."""
        references = self.state.references
        assert references is not None
        beside = references.beside
        try:
            record = beside.record_of(case.nodeid, self._say) if beside else None
            record = record or references.entry.load_case(case.nodeid)
        except RegressionError as exc:
            return replace(case, stored_reason=str(exc))
        if record is None:
            return replace(case, stored_reason="none is stored")
        return replace(case, status=record.status, stored_reason=record.reason)


def apply(found: Verdict, report: pytest.TestReport, path: str) -> None:
    """Make the report say what the verdict says."""
    if found.action == FAIL:
        fail_report(report, found.message)
    elif found.action == SKIP:
        report.outcome = "skipped"
        report.longrepr = (path, 0, found.message)
    elif found.action == NOTE:
        report.sections.append(("torch-regression: outputs that differ", found.message))


def fail_report(report: pytest.TestReport, longrepr: str) -> None:
    """Turn `report` into a failure with `longrepr`; an xfail mark no longer excuses it."""
    report.outcome = "failed"
    report.longrepr = longrepr
    if hasattr(report, "wasxfail"):
        del report.wasxfail
