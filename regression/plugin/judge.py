"""The judge of a check run: serves each case the fixture that compares its outputs with
the reference, and gives every phase's report its verdict (regression.plugin.verdict).

A case's reference is held while the case runs and let go when it ends: what the end of
the run needs of it (its outcome, in a few lines) is in the ledger.
"""

from __future__ import annotations

import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Generator

import pytest

from regression.errors import RegressionError, StoreError
from regression.plugin.common import exception_reason, report_reason, traceback_frames, \
    uses_fixture
from regression.plugin.relay import in_worker
from regression.report import largest_relative
from regression.plugin.verdict import FAIL, NOTE, SKIP, Case, Verdict, changes_nothing, \
    fixture_verdict, verdict

if TYPE_CHECKING:
    from regression.plugin.check import Check
    from regression.plugin.fixture import CheckSink, Regression
    from regression.store.record import CaseRecord

OUTCOME = "torch_regression_outcome"
"""A regression case's report carries its outcome so far to xdist's controller."""
FIX = "run `invoke gen` to record it"


class Judge:
    """A pytest plugin: compares each case with the reference and judges its reports."""

    def __init__(self, check: Check) -> None:
        self.check = check
        self.ledger = check.ledger
        self.sinks: dict[str, CheckSink] = {}
        """The cases under way (one, but a plugin may nest runs): each with its reference."""
        self.compared = False
        """Whether a case of this process got the fixture: the subject's origin matters."""
        self.helper_digests: dict[Path, str] = {}
        """Each helper file's digest, read once per run for every case that uses it."""
        self.error_reasons: dict[str, str] = {}
        self.waited: dict[str, float] = {}
        """Seconds a case waited for its reference from the recording beside the run: not
        the case's own time, which shards are balanced by."""
        self.failed_on_outputs: set[str] = set()
        """Cases under way that pytest_runtest_call failed because their outputs differ."""
        from regression.declarations import by_case

        self.declarations = by_case(check.job.declarations if check.job else ())
        """regression-changes.yaml's entries, by case, as the job hands them over."""

    def fixture(self, item: pytest.Item) -> Regression:
        from regression.plugin.fixture import CheckSink, Regression

        if self.check.prepared is None:
            pytest.fail("the regression fixture found no reference in this run", pytrace=False)
        record = self._record(item)
        sink = self.sinks[item.nodeid] = CheckSink(record, self.check.label)
        self.compared = True
        settings = self.check.settings
        return Regression(item.nodeid, settings.determinism, sink, settings.device)

    def _record(self, item: pytest.Item) -> CaseRecord:
        """The case's trusted reference; the case ends here (error or skip) without one."""
        record, problem = self._loaded(item)
        found = fixture_verdict(item.nodeid, self.check.label, problem,
                                record.status if record else "",
                                record.reason if record else "", self.check.strict)
        if found is not None and found.outcome is not None:
            self.ledger.judge(found.outcome)
            if found.action == SKIP:
                pytest.skip(found.message)
            pytest.fail(found.message, pytrace=False)
        assert record is not None
        return record

    def _loaded(self, item: pytest.Item) -> tuple[CaseRecord | None, str]:
        """The case's stored record, or why it cannot be used."""
        prepared = self.check.prepared
        assert prepared is not None
        entry, label = prepared.entry, self.check.label
        underway = prepared.underway
        if underway is not None and underway.covers(item.nodeid):
            began = time.perf_counter()
            try:
                record = underway.record_of(item.nodeid, self._say)
            except RegressionError:  # said once, at the end of the run
                self._stop(item, f"the recording at {label} failed")
                return None, (f"no reference: the recording at {label} failed (its error "
                              "ends this run's output)")
            finally:
                self.waited[item.nodeid] = time.perf_counter() - began
            if record is not None:
                return record, self._stale(record, item)
        if not entry.exists():
            return None, f"no reference {label} is recorded for this environment; {FIX}"
        try:
            entry.verify_identity()
            record = entry.load_case(item.nodeid)
        except StoreError as exc:
            return None, f"the stored reference cannot be trusted ({exc}); {FIX} again"
        except RegressionError as exc:
            return None, f"{exc}; {FIX} again"
        if record is None:
            return None, f"no reference is recorded for this case at {label}; {FIX}"
        return record, self._stale(record, item)

    def _say(self, line: str) -> None:
        """A line for the user while a case runs: past pytest's capture, to the terminal."""
        config = self.check.config
        capture = config.pluginmanager.get_plugin("capturemanager")
        if capture is None:
            self.check.relay.echo(line)
            return
        with capture.global_and_fixture_disabled():
            self.check.relay.echo(line)

    def _stop(self, item: pytest.Item, why: str) -> None:
        """No case after this one can be checked: the run stops, and says why."""
        item.session.shouldstop = why
        self.ledger.stop(why)

    def _stale(self, record: CaseRecord, item: pytest.Item) -> str:
        """Why a stored case no longer matches the test code that runs now; "" if it does."""
        prepared = self.check.prepared
        assert prepared is not None
        if record.harness != prepared.harness.of(item.path):
            return ("the test file or a conftest.py changed since the reference was recorded; "
                    f"{FIX} again")
        from regression.environment.harness import changed_helpers  # config and hashing: not in plain runs

        changed = changed_helpers(prepared.suite.reference.settings.root, record.helpers,
                                  self.helper_digests)
        if changed:
            return (f"test code it uses changed since the reference was recorded "
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
        from regression.declarations import size_of, uncovered

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
        case = uses_fixture(item)
        if case:
            durations = self.ledger.durations  # not the wait for the recording beside it
            durations[item.nodeid] = durations.get(item.nodeid, 0.0) + max(
                0.0, report.duration - self.waited.pop(item.nodeid, 0.0))
        if call.excinfo is not None:
            roots = (self.check.config.rootpath.resolve(),)
            error = call.excinfo.value
            self.error_reasons[item.nodeid] = exception_reason(error, traceback_frames(error),
                                                               roots)
        if case and self.check.prepared is not None:
            self._judge(item, report)
        if case and in_worker(self.check.config):
            outcome = self.ledger.outcomes.get(item.nodeid)
            setattr(report, OUTCOME, asdict(outcome) if outcome else {})
        if report.when == "teardown":
            self._let_go(item.nodeid)
        return report

    def _let_go(self, nodeid: str) -> None:
        """The case has ended: its reference and what was known of its phases go."""
        self.sinks.pop(nodeid, None)
        self.error_reasons.pop(nodeid, None)
        self.failed_on_outputs.discard(nodeid)

    def _judge(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """Give a phase's report of a case its verdict: a case ends identical, changed,
        error, not in reference or nondeterministic, whatever marks and fixtures say."""
        if changes_nothing(report.when, report.outcome):
            return  # a setup or teardown that passed: its verdict keeps it as it is
        found = verdict(self._case(item, report))
        if found.outcome is not None:
            self.ledger.judge(found.outcome)
        apply(found, report, str(item.path))

    def _case(self, item: pytest.Item, report: pytest.TestReport) -> Case:
        """What is known of the case as this phase of it is reported."""
        nodeid, sink = item.nodeid, self.sinks.get(item.nodeid)
        reason = "" if report.passed else \
            self.error_reasons.get(nodeid) or report_reason(report)  # only a failure's is told
        base = Case(nodeid, report.when, report.outcome, self.check.label, reason,
                    self.check.strict, self.ledger.outcome_of(nodeid), sink is not None)
        if sink is None:
            if report.when == "setup" and report.skipped and not base.judged:
                return self._with_stored(base)
            return base
        path, line, _ = report.location
        failure = sink.failure() or ""
        declared, undeclared = self._declared(nodeid)
        from regression.declarations import size_of

        return replace(base, names=tuple(name for name, _ in sink.changed),
                       size=size_of(d.rounding for d in sink.differences) if failure else "",
                       declared=declared, undeclared=undeclared, status=sink.record.status, stored_reason=sink.record.reason,
                       checked=bool(sink.checked), failure=failure,
                       detail=sink.detail() if failure else "",
                       differences=tuple(str(d) for d in sink.differences),
                       unchecked=tuple(sink.unchecked()),
                       failed_on_outputs=nodeid in self.failed_on_outputs,
                       path=path, line=(line or 0) + 1,
                       relative=largest_relative(sink.differences) if failure else None)

    def _with_stored(self, case: Case) -> Case:
        """A case skipped before the fixture: what its stored record says, or why none can
        be trusted."""
        prepared = self.check.prepared
        assert prepared is not None
        underway = prepared.underway
        try:
            record = underway.record_of(case.nodeid, self._say) if underway else None
            record = record or prepared.entry.load_case(case.nodeid)
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
