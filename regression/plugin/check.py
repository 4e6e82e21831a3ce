"""Check mode: compares each case's outputs with the cached reference."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, NoReturn

import pytest

from regression import github
from regression.run.completion import END, FINISHED, START, Completion
from regression.errors import RegressionError, StoreError, error_from_data
from regression.run.job import GEN_ONLY, Job
from regression.report import CHANGED, ERROR, IDENTICAL, NEW, NONDETERMINISTIC, CaseOutcome, \
    generation_lines, github_annotations, markdown_summary, not_run_lines, summary_lines
from regression.report import largest_relative
from regression.chart import difference_chart
from regression.plugin.common import crash_reason, exception_reason, report_reason, traceback_frames, uses_fixture
from regression.plugin.relay import LINE, REFUSAL, attach, in_worker

if TYPE_CHECKING:  # the rest is imported once a run has regression cases: plain runs stay fast
    from regression.store.cache import CaseRecord
    from regression.config import Settings
    from regression.plugin.fixture import CheckSink, Regression
    from regression.plugin.prepare import Prepared

WORKER_KEY = "torch_regression"
CHECKED_NOTHING = ("the test called regression.check() zero times, so it checks nothing; "
                   "call regression.check(output) on what the case should keep stable")
OUTCOME = "torch_regression_outcome"
"""A regression case's report carries its outcome so far to xdist's controller."""


class Checker:
    """A pytest plugin: compares each case with the reference, and proves the run checked
    every case it was meant to."""

    def __init__(self, config: pytest.Config, job: Job | None) -> None:
        self.config = config
        self.job = job
        """Set when invoke started this run: the resolved reference, shard and gen policy."""
        self.outcomes: dict[str, CaseOutcome] = {}
        self.sinks: dict[str, CheckSink] = {}
        self.prepared: Prepared | None = None
        self.helper_digests: dict[Path, str] = {}
        """Each helper file's digest, read once per run for every case that uses it."""
        self.durations: dict[str, float] = {}
        self.collected: set[str] | None = None
        self.expected: set[str] | None = None
        """Driven runs: the cases that must run, or the run fails."""
        self.worker_label = ""
        self.loaded_settings: Settings | None = None
        self.deselected: dict[str, pytest.Item] = {}
        self.ran: set[str] = set()
        self.error_reasons: dict[str, str] = {}
        self.finish_errors: list[str] = []
        self.failed_on_outputs: set[str] = set()
        """Cases that pytest_runtest_call failed because their outputs differ."""
        self.items: dict[str, pytest.Item] = {}
        """Every item collected, also those a hook later drops without deselecting them."""
        self.dropped: set[str] = set()
        self.running = ""
        """The test under way: named if the run stops in it."""
        self.stopped = ""
        """Why the run stopped before its end (pytest.exit(), Ctrl-C), if it did."""
        self.stopped_in = ""
        """The test under way when it stopped."""
        self.session: pytest.Session | None = None
        self.finished = False
        """Whether this plugin's end of the run ran: the completion record needs it."""
        self.collect_skips: dict[str, str] = {}
        """Collectors (files, folders) skipped at collection, with the reason."""
        self.subject_root = Path(job.subject_root).resolve() if job and job.subject_root \
            else None
        self.refusal = ""
        """Why the run stopped before any case ran (in xdist's controller: a worker's)."""
        self.reported_cases: set[str] = set()
        """xdist's controller: the regression cases whose worker reported on them."""
        self.relay = attach(config, self._relayed)

    @property
    def label(self) -> str:
        return self.prepared.label if self.prepared else ""

    @property
    def gen_only(self) -> bool:
        return self.job is not None and self.job.gen == GEN_ONLY

    def start(self) -> None:
        """Before conftests load, in a run started by invoke: the determinism settings that
        record mode applies before importing the subject, and the subject's origin (compare)."""
        if self.job is None:
            return
        from regression import determinism
        from regression.plugin.importer import install_redirect

        if not self.gen_only:
            self._require_step_summary()

        settings = self._settings()
        try:
            determinism.prepare_process(settings.device)
            determinism.apply(settings.determinism)
            if self.subject_root:
                install_redirect(settings.subject_packages, self.subject_root, strict=True)
        except RegressionError as exc:
            self._refuse(exc)

    @pytest.hookimpl(trylast=True)
    def pytest_configure(self, config: pytest.Config) -> None:
        """`invoke gen` runs no test: pytest's own report would only say so; ours remains."""
        if self.gen_only:
            reporter = config.pluginmanager.get_plugin("terminalreporter")
            if reporter is not None:
                config.pluginmanager.unregister(reporter)

    def _settings(self) -> Settings:
        """config.yaml, read once per run."""
        if self.loaded_settings is not None:
            return self.loaded_settings
        from regression.config import find_config, load_settings

        try:
            path = Path(self.job.config) if self.job else find_config(self.config.rootpath)
            self.loaded_settings = load_settings(path)
            return self.loaded_settings
        except RegressionError as exc:
            self._refuse(exc)

    def _settings_if_any(self) -> Settings | None:
        """config.yaml's settings, or None where there is no usable one (plain pytest in a
        project without it): for hints, never an error."""
        if self.loaded_settings is None and self.job is None:
            from regression.config import find_config, load_settings

            try:
                self.loaded_settings = load_settings(find_config(self.config.rootpath))
            except RegressionError:
                return None
        return self.loaded_settings

    def _refuse(self, error: RegressionError) -> NoReturn:
        """Stop the run with `error`: data for the invoke task, a usage error for pytest;
        an xdist worker's goes to its controller, which stops the run."""
        if self.job is not None:
            self.job.write_error(error)
        self.refusal = f"torch-regression: {error}"
        if in_worker(self.config):
            self.relay.send(REFUSAL, self.refusal)
        raise self._refusal_error()

    def _refusal_error(self) -> pytest.UsageError:
        """No traceback; where invoke drives the run, the task says why (from the job's
        result), so pytest does not say it a second time."""
        return pytest.UsageError() if self.job is not None else pytest.UsageError(self.refusal)

    def _relayed(self, kind: str, text: str) -> None:
        """xdist's controller: a worker's line is shown; its refusal stops the run."""
        if kind == REFUSAL:
            self.refusal = self.refusal or text
        elif kind == LINE:
            self._echo(text)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, object, object]:
        """xdist's controller: once the workers are down, a refusal ends the run as it would
        without xdist (no case ran: the worker that refused collected none)."""
        result = yield
        if self.refusal and not in_worker(self.config):
            raise self._refusal_error()
        return result

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """`invoke gen` has no terminal report: say which files failed to collect, and why;
        and when the subject itself is what could not be imported, say how to fix that."""
        if report.skipped:
            self.collect_skips[report.nodeid] = report_reason(report)
        if not report.failed:
            return
        if self.gen_only:
            self._echo(f"error collecting {report.nodeid or 'the tests'}:\n"
                       f"{report.longreprtext.rstrip()}")
        settings = self._settings_if_any()
        hint = subject_not_importable(report.longreprtext,
                                      settings.subject_packages if settings else (),
                                      settings.root if settings else None)
        if hint and hint not in self.finish_errors:
            self.finish_errors.append(hint)
            if self.gen_only:
                self._echo(hint)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update((i.nodeid, i) for i in items)

    def pytest_itemcollected(self, item: pytest.Item) -> None:
        self.items[item.nodeid] = item

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        """Narrow to the shard and record what is missing, before the first case runs. An
        xdist worker that refuses runs nothing: its controller stops the run."""
        try:
            self._select(config, items)
        except pytest.UsageError:
            if not in_worker(config) or not self.refusal:
                raise
            config.hook.pytest_deselected(items=list(items))
            items[:] = []

    def _select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        kept = {i.nodeid for i in items}
        self.dropped = {n for n in self.items if n not in kept and n not in self.deselected}
        everything = [*items, *self.deselected.values(), *(self.items[n] for n in self.dropped)]
        self.collected = {i.nodeid for i in everything}
        if self.job is not None:
            self.expected = self._expected(everything)
            if self.job.selection:  # what the user left out is not missed
                self.expected -= set(self.deselected)
        if not any(uses_fixture(i) for i in everything):
            self._write_result()
            return
        if config.option.collectonly and not self.gen_only:
            return
        try:
            self.prepared = self._prepare_in_turn(everything, {i.nodeid for i in items})
        except RegressionError as exc:
            self._refuse(exc)
        keep = [i for i in items if (i.nodeid in self.prepared.chosen if uses_fixture(i)
                                     else self.prepared.others) and not self.gen_only]
        dropped = [i for i in items if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep
        if self.job is None:  # plain pytest: the cases it selected must each end judged
            self.expected = {i.nodeid for i in keep if uses_fixture(i)}
        self._judge_collect_skips()
        self._write_result()

    def _judge_collect_skips(self) -> None:
        """A file or folder skipped as it was collected (importorskip or skip at module
        level) whose cases the reference recorded: each such case is an error, not absent."""
        if not self.collect_skips or self.prepared is None or self._user_selected() \
                or self.gen_only:
            return
        for nodeid, skipped in self._recorded_under(self.collect_skips):
            message = (f"skipped as {skipped} was collected, but the reference {self.label} "
                       f"recorded this case: {self.collect_skips[skipped]}")
            self.outcomes[nodeid] = CaseOutcome(nodeid, ERROR, message)

    def _user_selected(self) -> bool:
        """Whether the user chose cases (-k, -m, node ids): the rest are not missed."""
        option = self.config.option
        return bool(option.keyword or option.markexpr or (self.job and self.job.selection))

    def _recorded_under(self, collectors: dict[str, str]) -> list[tuple[str, str]]:
        """(case, collector) for each case the entry holds as recorded, under one of
        `collectors`, with the harness its test file has now: it exists, and it did run."""
        from regression.store.cache import RECORDED
        from regression.store.files import load_verified

        assert self.prepared is not None
        found = []
        for path in self.prepared.entry.stored_cases():
            try:
                body = load_verified(path)
            except RegressionError:
                continue
            nodeid = str(body.get("nodeid"))
            under = [c for c in collectors if nodeid.startswith((f"{c}::", f"{c}/"))
                     or not c]
            file = self.config.rootpath / nodeid.split("::")[0]
            if under and body.get("status") == RECORDED and file.is_file() \
                    and body.get("harness") == self.prepared.harness.of(file):
                found.append((nodeid, under[0] or "the rootdir"))
        return sorted(found)

    def _expected(self, everything: list[pytest.Item]) -> set[str]:
        """The regression cases this driven run must run: its shard's, or all of them."""
        from regression.plugin.prepare import shard_cases

        try:
            return shard_cases(self._settings(), self.job, everything)
        except RegressionError as exc:
            self._refuse(exc)

    def _prepare_in_turn(self, everything: list[pytest.Item], selected: set[str]) -> Prepared:
        """xdist's workers of a driven run prepare one at a time: the first records what is
        missing and says so; the others find it recorded, or refuse with its error at once
        instead of recording again."""
        if self.job is None or not in_worker(self.config):
            return self._prepare(everything, selected)
        from filelock import FileLock

        with FileLock(Path(self.job.result).with_name("prepare.lock")):
            earlier = self.job.read_result() or {}
            if "error" in earlier:
                self._refuse(error_from_data(earlier))
            return self._prepare(everything, selected, quiet="generation" in earlier)

    def _prepare(self, everything: list[pytest.Item], selected: set[str],
                 quiet: bool = False) -> Prepared:
        from regression import determinism
        from regression.plugin.prepare import prepare, resolve

        settings = self._settings()
        self.settings: Settings = settings
        determinism.prepare_process(settings.device)  # its variables are part of the key
        reference = resolve(settings, self.job, self.config.getoption("regression_reference"))
        # `invoke gen` records whatever addopts says: recording is all it is asked to do.
        no_gen = bool(self.config.getoption("regression_no_gen")) and not self.gen_only
        prepared = prepare(reference, self.job, everything, selected, self.config.rootpath,
                           self._echo, record=not no_gen)
        generation = prepared.generation
        if generation is not None and not self.gen_only and \
                not (quiet and not generation.recorded and not generation.absent):
            for line in generation_lines(generation):
                self._echo(line)
        determinism.prepare_process(settings.device)
        determinism.apply(settings.determinism)  # once here: the first call takes seconds
        return prepared

    def _echo(self, line: str) -> None:
        """A line for the user; an xdist worker's is shown by its controller."""
        if in_worker(self.config):
            self.relay.send(LINE, line)
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:  # invoke gen runs pytest without its terminal output
            print(line, flush=True)
        else:
            reporter.ensure_newline()
            reporter.write_line(line)

    def _write_result(self) -> None:
        if self.job is not None:
            prepared = self.prepared
            self.job.write_result({
                "generation": prepared.generation_data() if prepared else {},
            })

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """Note the test in the journal: if the process ends in it, the parent names it."""
        self.running = nodeid
        if self.job is not None and not self.gen_only:
            self.job.note(f"{START}{nodeid}")

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.running = ""
        if self.job is not None and not self.gen_only:
            self.job.note(f"{END}{nodeid}")

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """pytest.exit() or Ctrl-C: the cases it cut short are named with the reason."""
        error = excinfo.value
        if isinstance(error, pytest.exit.Exception):
            self.stopped = f"pytest.exit({error.msg!r}) was called"
        else:
            self.stopped = "it was interrupted (KeyboardInterrupt: Ctrl-C, or raised by code)"
        self.stopped_in = self.running

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if uses_fixture(item) and self.prepared is not None:
            from regression import determinism

            determinism.apply(self.settings.determinism)

    def fixture(self, item: pytest.Item) -> Regression:
        from regression.plugin.fixture import CheckSink, Regression

        if self.prepared is None:
            pytest.fail("the regression fixture found no reference in this run", pytrace=False)
        record = self._record(item)
        sink = self.sinks[item.nodeid] = CheckSink(record, self.label)
        return Regression(item.nodeid, self.settings.determinism, sink, self.settings.device)

    def _record(self, item: pytest.Item) -> CaseRecord:
        assert self.prepared is not None
        entry = self.prepared.entry
        fix = "run `invoke gen` to record it"
        problem = ""
        record = None
        if not entry.exists():
            problem = f"no reference {self.label} is recorded for this environment; {fix}"
        else:
            try:
                entry.verify_identity()
                record = entry.load_case(item.nodeid)
            except StoreError as exc:
                problem = f"the stored reference cannot be trusted ({exc}); {fix} again"
            except RegressionError as exc:
                problem = f"{exc}; {fix} again"
            if record is None and not problem:
                problem = f"no reference is recorded for this case at {self.label}; {fix}"
            elif record:
                problem = self._stale(record, item, fix)
        if problem:
            self.outcomes[item.nodeid] = CaseOutcome(item.nodeid, ERROR, problem)
            pytest.fail(problem, pytrace=False)
        assert record is not None
        from regression.store.cache import NONDETERMINISTIC as UNREPRODUCED

        if record.status == UNREPRODUCED:
            self._nondeterministic(item, record)
        return record

    def _stale(self, record: CaseRecord, item: pytest.Item, fix: str) -> str:
        """Why a stored case no longer matches the test code that runs now; "" if it does."""
        assert self.prepared is not None
        if record.harness != self.prepared.harness.of(item.path):
            return ("the test file or a conftest.py changed since the reference was recorded; "
                    f"{fix} again")
        from regression.harness import changed_helpers  # config and hashing: not in plain runs

        changed = changed_helpers(self.prepared.suite.reference.settings.root, record.helpers,
                                  self.helper_digests)
        if changed:
            return (f"test code it uses changed since the reference was recorded "
                    f"({', '.join(changed)}); {fix} again")
        return ""

    def _nondeterministic(self, item: pytest.Item, record: CaseRecord) -> NoReturn:
        """A case the reference does not reproduce is never compared: skipped with the
        reason (failed with --regression-strict), never reported as changed."""
        message = f"nondeterministic at the reference {self.label}: {record.reason}"
        self.outcomes[item.nodeid] = CaseOutcome(item.nodeid, NONDETERMINISTIC, record.reason)
        if self.config.getoption("regression_strict"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """A case whose outputs differ fails once, after its body ran: every output it
        checks is compared, so the first difference does not hide the others."""
        result = yield
        sink = self.sinks.get(item.nodeid)
        failure = sink.failure() if sink is not None else None
        if failure:
            self.failed_on_outputs.add(item.nodeid)
            pytest.fail(failure, pytrace=False)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: after xfail and skip marks
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if uses_fixture(item):
            self.durations[item.nodeid] = self.durations.get(item.nodeid, 0.0) + report.duration
        if call.excinfo is not None:
            roots = (self.config.rootpath.resolve(),)
            error = call.excinfo.value
            self.error_reasons[item.nodeid] = exception_reason(error, traceback_frames(error),
                                                               roots)
        if uses_fixture(item) and self.prepared is not None:
            self._judge_report(item, report)
        if uses_fixture(item) and in_worker(self.config):
            outcome = self.outcomes.get(item.nodeid)
            setattr(report, OUTCOME, asdict(outcome) if outcome else {})
        return report

    def _judge_report(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """Give each phase's report of a case its verdict: a case ends identical, changed,
        error, not in reference or nondeterministic, whatever marks and fixtures say."""
        sink = self.sinks.get(item.nodeid)
        if report.when == "call" and sink is not None:
            self._judge(item, sink, report)
        elif report.when == "call":
            self._judge_foreign_fixture(item, report)
        elif report.skipped and report.when == "setup":
            self._judge_setup_skip(item, sink, report)
        elif report.failed:
            self._judge_error(item, report)

    def _judge_setup_skip(self, item: pytest.Item, sink: CheckSink | None,
                          report: pytest.TestReport) -> None:
        """A case skipped before its body ran (a skipif, xfail(run=False), a fixture that
        skips, before or after `regression`) fails when the reference recorded it: it would
        otherwise pass unchecked."""
        if item.nodeid in self.outcomes:  # skipped by this plugin: nondeterministic
            return
        from regression.store.cache import ABSENT, NONDETERMINISTIC as UNREPRODUCED

        record, problem = (sink.record, "") if sink is not None else self._stored(item.nodeid)
        if record is not None and record.status == ABSENT:
            self._set(item, report, CaseOutcome(item.nodeid, NEW, record.reason),
                      self._strict_failure(item, record.reason))
        elif record is not None and record.status == UNREPRODUCED:
            self.outcomes[item.nodeid] = CaseOutcome(item.nodeid, NONDETERMINISTIC, record.reason)
        elif record is not None:
            message = self._skipped_message(report)
            self._set(item, report, CaseOutcome(item.nodeid, ERROR, message), message)
        else:
            message = (f"skipped, and no trusted reference says whether {self.label} ran this "
                       f"case ({problem}): {self._reason(report)}; run `invoke gen`")
            self._set(item, report, CaseOutcome(item.nodeid, ERROR, message), message)

    def _stored(self, nodeid: str) -> tuple[CaseRecord | None, str]:
        """The case's stored record, or None and why there is none that can be trusted."""
        assert self.prepared is not None
        try:
            record = self.prepared.entry.load_case(nodeid)
        except RegressionError as exc:
            return None, str(exc)
        return record, "" if record else "none is stored"

    def _judge_foreign_fixture(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """The body ran without this plugin's fixture: a conftest or plugin defines its own
        `regression`, so nothing was compared."""
        message = ("the test's `regression` fixture is not torch-regression's (a conftest.py "
                   "or plugin defines its own), so nothing was compared; rename that fixture")
        self._set(item, report, CaseOutcome(item.nodeid, ERROR, message), message)

    def _judge_error(self, item: pytest.Item, report: pytest.TestReport) -> None:
        """A setup or teardown error makes the case an error, unless it already has a verdict
        that says more (changed, an error, nondeterministic)."""
        current = self.outcomes.get(item.nodeid)
        if current is None or current.outcome in (IDENTICAL, NEW):
            detail = f"error in {report.when}: {self._reason(report)}"
            self.outcomes[item.nodeid] = CaseOutcome(item.nodeid, ERROR, detail)

    def _set(self, item: pytest.Item, report: pytest.TestReport, outcome: CaseOutcome,
             failure: str | None) -> None:
        """The case's verdict, and its report failed with `failure` when one is given."""
        self.outcomes[item.nodeid] = outcome
        if failure is not None:
            fail_report(report, failure)

    def _strict_failure(self, item: pytest.Item, reason: str) -> str | None:
        """With --regression-strict, a case not in the reference fails, with the reason."""
        if not self.config.getoption("regression_strict"):
            return None
        return f"not in reference {self.label}: {reason}"

    def _judge(self, item: pytest.Item, sink: CheckSink, report: pytest.TestReport) -> None:
        """Set the case's outcome, and fail a report that passed where the case did not."""
        self.outcomes[item.nodeid] = self._outcome(item.nodeid, sink, report)
        strict = bool(self.config.getoption("regression_strict"))
        failure = sink.failure()
        if failure and not report.failed:  # a skip or xfail after a differing check
            fail_report(report, failure)
        elif failure and item.nodeid not in self.failed_on_outputs:  # it failed on its own
            report.sections.append(("torch-regression: outputs that differ", failure))
        elif report.skipped and sink.in_reference:  # an xfail or skip in the body
            fail_report(report, self._skipped_message(report))
        elif report.skipped and strict:
            fail_report(report, f"not in reference {self.label}: {sink.record.reason}")
        elif report.passed and not sink.checked:
            fail_report(report, CHECKED_NOTHING)
        elif report.passed and not sink.in_reference:
            message = f"not in reference {self.label}: {sink.record.reason}"
            report.outcome = "failed" if strict else "skipped"
            report.longrepr = message if strict else (str(item.path), 0, message)
        elif report.passed and sink.unchecked():
            fail_report(report, self._unchecked_message(sink))

    def _skipped_message(self, report: pytest.TestReport) -> str:
        return (f"skipped, but the reference {self.label} recorded this case: "
                f"{self._reason(report)}")

    def _reason(self, report: pytest.TestReport) -> str:
        return self.error_reasons.get(report.nodeid) or report_reason(report)

    def _unchecked_message(self, sink: CheckSink) -> str:
        names = ", ".join(map(repr, sink.unchecked()))
        return f"the reference {self.label} has outputs this test did not check: {names}"

    def _outcome(self, nodeid: str, sink: CheckSink, report: pytest.TestReport) -> CaseOutcome:
        if sink.changed:
            path, line, _ = report.location
            return CaseOutcome(nodeid, CHANGED, sink.detail(),
                               tuple(str(d) for d in sink.differences), path,
                               (line or 0) + 1, largest_relative(sink.differences))
        if report.skipped and sink.in_reference:
            return CaseOutcome(nodeid, ERROR, self._skipped_message(report))
        if report.failed:
            return CaseOutcome(nodeid, ERROR, self._reason(report))
        if not sink.in_reference and report.skipped:
            return CaseOutcome(nodeid, NEW, sink.record.reason)
        if not sink.checked:
            return CaseOutcome(nodeid, ERROR, CHECKED_NOTHING)
        if not sink.in_reference:
            return CaseOutcome(nodeid, NEW, sink.record.reason)
        if sink.unchecked():
            return CaseOutcome(nodeid, ERROR, self._unchecked_message(sink))
        return CaseOutcome(nodeid, IDENTICAL)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Which tests ran (also in the xdist controller, which sees every worker's), and
        there each case's outcome as its worker reports it: kept if that worker dies."""
        if report.when == "call" or not report.passed:
            self.ran.add(report.nodeid)
        fields = getattr(report, OUTCOME, None)
        if fields is not None and not in_worker(self.config):
            self.reported_cases.add(report.nodeid)
            if fields:
                self._merge_outcome(fields)

    def _merge_outcome(self, fields: dict[str, Any]) -> None:
        outcome = CaseOutcome(**{**fields, "outputs": tuple(fields["outputs"])})
        self.outcomes[outcome.nodeid] = outcome

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a regression case whose worker died is an error naming it."""
        if crashitem in self.reported_cases:  # a regression case: its setup was reported
            message = (f"{crash_reason(report)}, so it was not judged; `pytest -n 0 "
                       f"'{crashitem}'` runs it alone and shows why")
            self.outcomes[crashitem] = CaseOutcome(crashitem, ERROR, message)

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker sends its output
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Prove the subject's origin and the run complete; store durations; summaries.
        An xdist worker hands what it knows to the controller, which judges and reports."""
        self.session = session
        worker_output = getattr(self.config, "workeroutput", None)
        if self.refusal:
            return  # no case ran: the refusal says why, and nothing else is to be said
        if self.gen_only and worker_output is None:
            if session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
                session.exitstatus = pytest.ExitCode.OK
            self.finished = True
            return
        self._verify_origins(session)
        if worker_output is not None:
            worker_output[WORKER_KEY] = self._worker_data()
            return
        self._require_all_ran(session)
        self._require_verdicts_passed(session)
        self._store_durations()
        if self.finish_errors and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR  # a worker's, merged here
        self.write_step_summary()
        self.finished = True

    def _require_verdicts_passed(self, session: pytest.Session) -> None:
        """Fail a run whose pytest counted no failure where a case did not pass: a case
        skipped at collection that the reference recorded, or a report a hook changed."""
        failing = self._failing()
        if failing and session.exitstatus in (pytest.ExitCode.OK,
                                              pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            self.finish_errors.append(f"{len(failing)} regression cases did not pass, which "
                                      "pytest's own count does not show: " +
                                      ", ".join(failing[:5]) + (" ..." if len(failing) > 5
                                                                else ""))

    def _failing(self) -> list[str]:
        """`OUTCOME nodeid` of each case that does not pass: changed or error, and with
        --regression-strict not in reference or nondeterministic."""
        bad = {CHANGED, ERROR}
        if self.config.getoption("regression_strict"):
            bad |= {NEW, NONDETERMINISTIC}
        return [f"{o.outcome.upper()} {o.nodeid}" for o in self.outcomes.values()
                if o.outcome in bad]

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The very end of the run: the last word on its exit status, and in a run invoke
        started, the record without which it does not pass."""
        if hasattr(config, "workerinput") or not self.finished or self.session is None:
            return
        unjudged = [] if self.gen_only else self._unjudged()
        failing = [] if self.gen_only else self._failing()
        self._keep_failed(self.session, [*failing, *(f"NO VERDICT {n}" for n in unjudged)])
        if self.job is not None:
            completion = Completion(int(self.session.exitstatus), len(self.expected or ()),
                                    [f"{n}: {self._why_not_run(n)}" for n in unjudged],
                                    failing)
            self.job.write_result({**(self.job.read_result() or {}),
                                   FINISHED: completion.data()})

    @staticmethod
    def _keep_failed(session: pytest.Session, failing: list[str]) -> None:
        """A run judged failed stays failed: a hook that set its exit status to 0 after this
        plugin judged it (a conftest's pytest_unconfigure?) is overruled, and named."""
        if session.exitstatus == pytest.ExitCode.OK and failing:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
            listed = ", ".join(failing[:5]) + (" ..." if len(failing) > 5 else "")
            print(f"torch-regression: the exit status was set to 0 after the run was judged "
                  f"(by a hook?), but {len(failing)} regression cases did not pass: {listed}",
                  file=sys.stderr, flush=True)

    def _unjudged(self) -> list[str]:
        """The cases this run was handed that ended in no verdict."""
        return sorted((self.expected or set()) - set(self.outcomes))

    def _store_durations(self) -> None:
        durations_path = self.config.getoption("regression_durations")
        if durations_path and self.durations:
            from regression.durations import store_durations

            try:
                store_durations(Path(durations_path), self.durations)
            except RegressionError as exc:
                self.finish_errors.append(f"the durations were not stored: {exc}")

    def _verify_origins(self, session: pytest.Session) -> None:
        """Regression cases ran here: the candidate must be the working tree (or the
        candidate's worktree), not an installed copy."""
        if self.prepared is None or not self.sinks:
            return
        from regression.plugin.importer import verify_origins

        root = self.subject_root or self.settings.root / self.settings.subject_path
        try:
            verify_origins(self.settings.subject_packages, root)
        except RegressionError as exc:
            self.finish_errors.append(str(exc))
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def _worker_data(self) -> dict[str, object]:
        return {"expected": sorted(self.expected or ()), "label": self.label,
                "outcomes": [asdict(o) for o in self.outcomes.values()],
                "errors": self.finish_errors, "durations": self.durations}

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """xdist's controller: merge what a worker expected, saw and reported."""
        data = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        if not data:
            return
        self.expected = (self.expected or set()) | set(data["expected"])
        self.worker_label = self.worker_label or data["label"]
        for fields in data["outcomes"]:
            self._merge_outcome(fields)
        self.finish_errors += [e for e in data["errors"] if e not in self.finish_errors]
        self.durations.update(data["durations"])

    def _require_all_ran(self, session: pytest.Session) -> None:
        """A run fails unless every case it was handed (invoke's, or those plain pytest
        selected) ended in a verdict; a shard that is empty by assignment passes."""
        if self.expected is None:
            return
        missing = self._unjudged()
        if missing:
            lines = not_run_lines(missing, len(self.expected), self._why_not_run)
            self.finish_errors.append("\n".join(lines))
            if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        elif not self.expected and self.job and self.job.shard and \
                session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
            session.exitstatus = pytest.ExitCode.OK

    def _why_not_run(self, nodeid: str) -> str:
        if nodeid in self.deselected:
            return "deselected by -k, -m or --deselect (PYTEST_ADDOPTS or addopts?)"
        if self.config.option.collectonly:
            return "--collect-only: nothing ran"
        if nodeid in self.dropped:
            return ("removed from the run by a pytest_collection_modifyitems hook (a "
                    "conftest.py?) without deselecting it")
        if self.collected is not None and nodeid not in self.collected:
            return "not collected (an error, --ignore, or a renamed test?)"
        if self.stopped and nodeid == self.stopped_in:
            return f"the run stopped in this case: {self.stopped}"
        if self.stopped:
            where = f" in {self.stopped_in}" if self.stopped_in else ""
            return f"the run stopped before it: {self.stopped}{where}"
        if self.config.option.maxfail:
            return "the run stopped early (-x or --maxfail)"
        if nodeid in self.ran:
            return ("it ran, but its verdict never reached the end of the run (its xdist "
                    "worker crashed?)")
        return "did not run"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = self.summary()
        if lines:
            terminalreporter.section("torch-regression")
            for line in lines:
                terminalreporter.write_line(line)
        if os.environ.get("GITHUB_ACTIONS") == "true" and lines:
            for annotation in github_annotations(self.label or self.worker_label,
                                                 self.outcomes.values()):
                terminalreporter.write_line(annotation)

    def summary(self) -> list[str]:
        if hasattr(self.config, "workerinput"):
            return []
        label = self.label or self.worker_label
        lines = summary_lines(label, self.outcomes.values()) if self.outcomes else []
        return [*lines, *(f"ERROR {error}" for error in self.finish_errors)]

    def _require_step_summary(self) -> None:
        """Refuse a $GITHUB_STEP_SUMMARY that cannot be written before anything runs: at the
        end of the run it could only be reported."""
        if os.environ.get(github.STEP_SUMMARY):
            try:
                github.append(github.STEP_SUMMARY, "")
            except RegressionError as exc:
                self._refuse(exc)

    def write_step_summary(self) -> None:
        if os.environ.get(github.STEP_SUMMARY) and self.outcomes:
            try:
                github.append(github.STEP_SUMMARY, markdown_summary(
                    self.label or self.worker_label, self.outcomes.values())
                    + difference_chart(self.outcomes.values()))
            except RegressionError as exc:
                self.finish_errors.append(f"the step summary was not written: {exc}")


_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def subject_not_importable(text: str, packages: tuple[str, ...], root: Path | None = None
                           ) -> str:
    """What to do when a collection error is a module missing from this environment: the
    subject, or another package the tests import; "" when `text` is another error, or the
    module is a file of the project (then pytest's own message says more)."""
    for name in _NO_MODULE.findall(text):
        top = name.split(".")[0]
        if top in packages:
            return (f"the subject package {top!r} cannot be imported in this environment (No "
                    f"module named {name!r}). Your tests import it from here, as they would "
                    "under plain pytest: install your project into this environment (`pip "
                    "install -e .`) or add its folder to pytest's `pythonpath` setting. "
                    "config.yaml's `subject.path` only says where it lives in the reference's "
                    "worktree.")
        if root is None or not _in_project(top, root):
            return (f"the tests import {top!r}, which this environment ({sys.executable}) "
                    f"cannot import (No module named {name!r}): install it there (`"
                    f"{sys.executable} -m pip install {top}`; its name on PyPI may differ), "
                    "then run again")
    return ""


def _in_project(module: str, root: Path, depth: int = 4) -> bool:
    """Whether a module or package of that name is a file or folder of the project (hidden
    folders, such as a .venv, and site-packages not searched)."""
    for folder, folders, files in os.walk(root):
        if module in folders or f"{module}.py" in files:
            return True
        too_deep = len(Path(folder).relative_to(root).parts) >= depth
        folders[:] = [] if too_deep else [
            f for f in folders if not f.startswith(".") and f not in _NOT_SEARCHED]
    return False


_NOT_SEARCHED = {"site-packages", "node_modules", "__pycache__", "build", "dist"}


def fail_report(report: pytest.TestReport, longrepr: str) -> None:
    """Turn `report` into a failure with `longrepr`; an xfail mark no longer excuses it."""
    report.outcome = "failed"
    report.longrepr = longrepr
    if hasattr(report, "wasxfail"):
        del report.wasxfail
