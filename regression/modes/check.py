"""Check mode: compares each case's outputs with the cached reference."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Generator

import pytest

from ..errors import RegressionError, StoreError
from ..report import CHANGED, ERROR, IDENTICAL, NEW, CaseOutcome, markdown_summary, \
    not_run_lines, summary_lines
from .common import exception_reason, report_reason, traceback_frames, uses_fixture

if TYPE_CHECKING:  # the rest is imported once a run has regression cases: plain runs stay fast
    from ..cache import CaseRecord, Entry
    from ..config import Settings
    from ..fixture import CheckSink, Regression
    from ..harness import HarnessDigests

CHECKED_NOTHING = ("the test called regression.check() zero times, so it checks nothing; "
                   "call regression.check(output) on what the case should keep stable")


class Checker:
    """A pytest plugin: compares each case with the reference, and proves the run checked
    every case it was meant to."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.outcomes: dict[str, CaseOutcome] = {}
        self.sinks: dict[str, CheckSink] = {}
        self.entry: Entry | None = None
        self.label = ""
        self.durations: dict[str, float] = {}
        self.collected: set[str] | None = None
        self.deselected: set[str] = set()
        self.ran: set[str] = set()
        self.error_reasons: dict[str, str] = {}
        self.finish_errors: list[str] = []
        root = getattr(config.known_args_namespace, "regression_subject_root", None)
        self.subject_root = Path(root).resolve() if root else None

    def start(self) -> None:
        """Before conftests load: the subject's origin (compare), and, in a run started by
        invoke, the same determinism settings record mode applies before importing it."""
        driven = getattr(self.config.known_args_namespace, "regression_reference", None)
        if self.subject_root or driven:
            from .. import determinism
            from ..importer import install_redirect

            settings = self._settings()
            determinism.prepare_process(settings.device)
            determinism.apply(settings.determinism)
            if self.subject_root:
                try:
                    install_redirect(settings.subject_packages, self.subject_root, strict=True)
                except RegressionError as exc:
                    raise pytest.UsageError(f"torch-regression: {exc}") from None

    def _settings(self) -> Settings:
        from ..config import find_config, load_settings

        try:
            return load_settings(find_config(self.config.rootpath))
        except RegressionError as exc:
            raise pytest.UsageError(f"torch-regression: {exc}") from None

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected.update(i.nodeid for i in items)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        self.collected = {i.nodeid for i in items} | self.deselected
        self._select(config, items)
        if not config.option.collectonly and any(uses_fixture(i) for i in items):
            self._prepare()

    def _select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """With --regression-cases FILE, run only the regression cases it lists, and the
        tests that are no regression cases only if it says so (shard 1); each listed case
        must then run."""
        selection = self._selection()
        if selection is None:
            return
        expected, others = selection
        keep = [i for i in items if (i.nodeid in expected if uses_fixture(i) else others)]
        dropped = [i for i in items if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def _selection(self) -> tuple[set[str], bool] | None:
        """The cases of --regression-cases, and whether other tests run too; None without."""
        path = self.config.getoption("regression_cases")
        if not path:
            return None
        selection = json.loads(Path(path).read_text(encoding="utf-8"))
        return set(selection["cases"]), bool(selection["others"])

    def _prepare(self) -> None:
        """Find the reference for this environment; raises UsageError when it can't."""
        from .. import determinism
        from ..cache import Entry
        from ..fingerprint import environment_parts
        from ..harness import HarnessDigests, extra_harness_files
        from ..revision import describe, open_repo, resolve_revision

        settings = self._settings()
        try:
            revision = settings.revision_for(self.config.getoption("regression_reference"))
            sha = resolve_revision(open_repo(settings.root), revision)
            self.settings: Settings = settings
            self.label = describe(revision, sha)
            self.entry = Entry(settings.cache_dir, environment_parts(settings, sha))
            self.harness: HarnessDigests = HarnessDigests(self.config.rootpath,
                                          extra_harness_files(settings.root, settings.harness))
            determinism.prepare_process(settings.device)
            determinism.apply(settings.determinism)  # once here: the first call takes seconds
        except RegressionError as exc:
            raise pytest.UsageError(f"torch-regression: {exc}") from None

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if uses_fixture(item) and self.entry is not None:
            from .. import determinism

            determinism.apply(self.settings.determinism)

    def fixture(self, item: pytest.Item) -> Regression:
        from ..fixture import CheckSink, Regression

        if self.entry is None:
            pytest.fail("the regression fixture found no reference in this run", pytrace=False)
        record = self._record(item)
        sink = self.sinks[item.nodeid] = CheckSink(record, self.label)
        return Regression(item.nodeid, self.settings.determinism, sink)

    def _record(self, item: pytest.Item) -> CaseRecord:
        assert self.entry is not None
        fix = "run `invoke gen` to record it"
        problem = ""
        record = None
        if not self.entry.exists():
            problem = f"no reference {self.label} is recorded for this environment; {fix}"
        else:
            try:
                self.entry.verify_identity()
                record = self.entry.load_case(item.nodeid)
            except StoreError as exc:
                problem = f"the stored reference cannot be trusted ({exc}); {fix} again"
            except RegressionError as exc:
                problem = f"{exc}; {fix} again"
            if record is None and not problem:
                problem = f"no reference is recorded for this case at {self.label}; {fix}"
            elif record and record.harness != self.harness.of(item.path):
                problem = ("the test file or a conftest.py changed since the reference was "
                           f"recorded; {fix} again")
        if problem:
            self.outcomes[item.nodeid] = CaseOutcome(item.nodeid, ERROR, problem)
            pytest.fail(problem, pytrace=False)
        assert record is not None
        return record

    @pytest.hookimpl(wrapper=True)
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
        sink = self.sinks.get(item.nodeid)
        if sink is not None and report.when == "call":
            self._judge(item, sink, report)
        return report

    def _judge(self, item: pytest.Item, sink: CheckSink, report: pytest.TestReport) -> None:
        """Set the case's outcome, and fail a report that passed where the case did not."""
        self.outcomes[item.nodeid] = self._outcome(item.nodeid, sink, report)
        strict = bool(self.config.getoption("regression_strict"))
        if not report.failed and sink.differences:
            report.outcome = "failed"
            report.longrepr = (f"outputs differ from the reference {self.label} although the "
                               f"test did not fail: {sink.differences[0]}")
        elif report.skipped and sink.in_reference:
            report.outcome = "failed"
            report.longrepr = (f"skipped, but the reference {self.label} recorded this case: "
                               f"{self._reason(report)}")
        elif report.passed and not sink.checked:
            report.outcome = "failed"
            report.longrepr = CHECKED_NOTHING
        elif report.passed and not sink.in_reference:
            message = f"not in reference {self.label}: {sink.record.reason}"
            report.outcome = "failed" if strict else "skipped"
            report.longrepr = message if strict else (str(item.path), 0, message)
        elif report.passed and sink.unchecked():
            report.outcome = "failed"
            report.longrepr = self._unchecked_message(sink)

    def _reason(self, report: pytest.TestReport) -> str:
        return self.error_reasons.get(report.nodeid) or report_reason(report)

    def _unchecked_message(self, sink: CheckSink) -> str:
        names = ", ".join(map(repr, sink.unchecked()))
        return f"the reference {self.label} has outputs this test did not check: {names}"

    def _outcome(self, nodeid: str, sink: CheckSink, report: pytest.TestReport) -> CaseOutcome:
        if sink.differences:
            return CaseOutcome(nodeid, CHANGED, str(sink.differences[0]))
        if report.failed or (report.skipped and sink.in_reference):
            return CaseOutcome(nodeid, ERROR, self._reason(report))
        if not sink.checked:
            return CaseOutcome(nodeid, ERROR, CHECKED_NOTHING)
        if not sink.in_reference:
            return CaseOutcome(nodeid, NEW, sink.record.reason)
        if sink.unchecked():
            return CaseOutcome(nodeid, ERROR, self._unchecked_message(sink))
        return CaseOutcome(nodeid, IDENTICAL)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Which tests ran (also in the xdist controller, which sees every worker's)."""
        if report.when == "call" or not report.passed:
            self.ran.add(report.nodeid)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Prove the run complete and the subject's origin; store durations; summaries."""
        self._require_all_ran(session)
        if self.entry is not None:  # regression cases ran: the candidate must be the tree
            from ..importer import verify_origins

            root = self.subject_root or self.settings.root / self.settings.subject_path
            try:
                verify_origins(self.settings.subject_packages, root)
            except RegressionError as exc:
                self.finish_errors.append(str(exc))
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        durations_path = self.config.getoption("regression_durations")
        if durations_path and self.durations:
            from ..durations import store_durations

            store_durations(Path(durations_path), self.durations)
        self.write_step_summary()

    def _require_all_ran(self, session: pytest.Session) -> None:
        """A run that was handed its cases fails unless every one of them ran."""
        selection = self._selection()
        if selection is None or hasattr(self.config, "workerinput"):  # xdist: the controller
            return
        expected = selection[0]
        missing = sorted(expected - self.ran)
        if missing:
            lines = not_run_lines(missing, len(expected), self._why_not_run)
            self.finish_errors.append("\n".join(lines))
            if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _why_not_run(self, nodeid: str) -> str:
        if nodeid in self.deselected:
            return "deselected by -k, -m or --deselect (PYTEST_ADDOPTS or addopts?)"
        if self.config.option.collectonly:
            return "--collect-only: nothing ran"
        if self.collected is not None and nodeid not in self.collected:
            return "not collected (an error, --ignore, or a renamed test?)"
        if self.config.option.maxfail:
            return "the run stopped early (-x or --maxfail)"
        return "did not run"

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        lines = self.summary()
        if lines:
            terminalreporter.section("torch-regression")
            for line in lines:
                terminalreporter.write_line(line)

    def summary(self) -> list[str]:
        lines = summary_lines(self.label, self.outcomes.values()) if self.outcomes else []
        return [*lines, *(f"ERROR {error}" for error in self.finish_errors)]

    def write_step_summary(self) -> None:
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if path and self.outcomes:
            with open(path, "a", encoding="utf-8") as stream:
                stream.write(markdown_summary(self.label, self.outcomes.values()))
