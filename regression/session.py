"""What the plugin does in each mode, kept out of the hooks so they stay one-liners."""

from __future__ import annotations

import importlib
import json
import os
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import determinism
from .cache import ABSENT, CaseRecord, Entry
from .config import Settings, find_config, load_settings
from .durations import store_durations
from .errors import RegressionError, StoreError
from .fingerprint import environment_parts
from .harness import HarnessDigests, extra_harness_files
from .importer import install_redirect, verify_origins
from .job import Job
from .report import CHANGED, ERROR, IDENTICAL, NEW, CaseOutcome, markdown_summary, \
    summary_lines
from .revision import describe, open_repo, resolve_revision

if TYPE_CHECKING:  # torch is imported only once a test uses the fixture
    from .fixture import CheckSink, RecordSink, Regression

FIXTURE = "regression"
FINISH_ERROR = pytest.StashKey[str]()


def uses_fixture(item: pytest.Item) -> bool:
    return FIXTURE in getattr(item, "fixturenames", ())


def _reason(report: pytest.TestReport) -> str:
    text = report.longreprtext.strip().splitlines()
    return (text[-1] if text else report.outcome)[:500]


class Collector:
    """Collect mode: writes the regression cases, their harness digests and the fingerprint."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.settings = load_settings(Path(job.config))

    def redirect_imports(self) -> None:
        if self.job.subject_root:
            try:
                install_redirect(self.settings.subject_packages, Path(self.job.subject_root),
                                 strict=True)
            except RegressionError as exc:
                self.job.write_result({"error": type(exc).__name__, "message": str(exc)})
                raise pytest.UsageError(str(exc)) from None

    def collected(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        if self.job.subject_root:
            try:
                verify_origins(self.settings.subject_packages, Path(self.job.subject_root))
            except RegressionError as exc:
                self.job.write_result({"error": type(exc).__name__, "message": str(exc)})
                return
        extra = extra_harness_files(self.settings.root, self.settings.harness)
        digests = HarnessDigests(config.rootpath, extra)
        cases = {i.nodeid: digests.of(i.path) for i in items if uses_fixture(i)}
        parts = environment_parts(self.settings, self.job.reference)
        self.job.write_result({"cases": cases, "parts": parts})


class Recorder:
    """Record mode: runs the wanted cases against the subject imported from the worktree."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.settings = load_settings(Path(job.config))
        self.subject_root = Path(job.subject_root)
        self.sinks: dict[str, RecordSink] = {}
        self.absent: dict[str, str] = {}
        self.collect_errors: dict[str, str] = {}
        self.collected: set[str] | None = None  # None: this process collected nothing
        self.ran: set[str] = set()
        self.failed = False

    def redirect_imports(self) -> None:
        determinism.prepare_process(self.settings.device)
        try:
            install_redirect(self.settings.subject_packages, self.subject_root, strict=True)
        except RegressionError as exc:
            self.fail(type(exc).__name__, str(exc))
            raise pytest.UsageError(str(exc)) from None

    def import_subject(self, session: pytest.Session) -> None:
        determinism.apply(self.settings.determinism)  # once here: the first call takes seconds
        for package in self.settings.subject_packages:
            try:
                importlib.import_module(package)
            except BaseException:  # noqa: B036 - any failure at import is reported as data
                self.fail("subject_import", traceback.format_exc(limit=-8))
                pytest.exit(f"the subject {package!r} failed to import at the reference",
                            returncode=3)

    def select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.collected = {i.nodeid for i in items}
        wanted = [i for i in items if i.nodeid in self.job.cases and uses_fixture(i)]
        unwanted = [i for i in items if i not in wanted]
        if unwanted:
            config.hook.pytest_deselected(items=unwanted)
        items[:] = wanted

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A hook: remember which files failed to collect at the reference, and why."""
        if report.failed:
            self.collect_errors[report.nodeid] = _reason(report)  # type: ignore[arg-type]

    def fixture(self, item: pytest.Item) -> Regression:
        from .fixture import RecordSink, Regression

        sink = self.sinks.setdefault(item.nodeid, RecordSink())
        return Regression(item.nodeid, self.settings.determinism.seed, sink)

    def report(self, report: pytest.TestReport) -> None:
        if report.when == "call" or not report.passed:
            self.ran.add(report.nodeid)
        if report.failed or report.skipped:
            verb = "skipped" if report.skipped else "failed"
            self.absent.setdefault(report.nodeid, f"{verb} at the reference: {_reason(report)}")

    def finish(self, session: pytest.Session) -> None:
        if self.failed:
            return
        try:
            verify_origins(self.settings.subject_packages, self.subject_root)
            recorded, absent = self._store()
        except RegressionError as exc:
            self.fail(type(exc).__name__, str(exc))
            session.exitstatus = 3
            return
        self.job.write_result({"recorded": recorded, "absent": absent})
        session.exitstatus = 0

    def _store(self) -> tuple[list[str], dict[str, str]]:
        entry = Entry(self.settings.cache_dir, environment_parts(self.settings,
                                                                 self.job.reference))
        if entry.parts != self.job.parts:
            raise RegressionError(
                "the recording process sees another environment than the one that started "
                f"it: {sorted(k for k in entry.parts if entry.parts[k] != self.job.parts.get(k))}"
            )
        entry.create()
        recorded, absent = [], {}
        for nodeid, harness in self.job.cases.items():
            reason = self.absent.get(nodeid) or self._not_collected(nodeid)
            if reason:
                entry.save_case(CaseRecord(nodeid, harness, status=ABSENT, reason=reason))
                absent[nodeid] = reason
            elif nodeid in self.ran:
                sink = self.sinks.get(nodeid)
                outputs = tuple(sink.outputs) if sink else ()
                entry.save_case(CaseRecord(nodeid, harness, outputs=outputs))
                recorded.append(nodeid)
            # else: collected but never run (-x, --maxfail, -k in addopts): store nothing
        return recorded, absent

    def _not_collected(self, nodeid: str) -> str:
        """Why a case that did not run is not in the reference; "" if it was collected."""
        if self.collected is None or nodeid in self.collected:
            return ""
        path = nodeid.split("::", 1)[0]
        for where, error in self.collect_errors.items():
            if path == where or path.startswith(where.rstrip("/") + "/") or not where:
                return f"could not be collected at the reference: {error}"
        return "does not exist at the reference"

    def fail(self, kind: str, message: str) -> None:
        self.failed = True
        self.job.write_result({"error": kind, "message": message})


class Checker:
    """Check mode: compares each case's outputs with the cached reference."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.outcomes: dict[str, CaseOutcome] = {}
        self.sinks: dict[str, CheckSink] = {}
        self.entry: Entry | None = None
        self.label = ""
        self.durations: dict[str, float] = {}
        root = getattr(config.known_args_namespace, "regression_subject_root", None)
        self.subject_root = Path(root).resolve() if root else None

    def redirect_imports(self) -> None:
        """Before conftests load: the subject's origin (compare), and, in a run started by
        invoke, the same determinism settings record mode applies before importing it."""
        driven = getattr(self.config.known_args_namespace, "regression_reference", None)
        if self.subject_root or driven:
            settings = self._settings()
            determinism.prepare_process(settings.device)
            determinism.apply(settings.determinism)
            if self.subject_root:
                try:
                    install_redirect(settings.subject_packages, self.subject_root, strict=True)
                except RegressionError as exc:
                    raise pytest.UsageError(f"torch-regression: {exc}") from None

    def _settings(self) -> Settings:
        try:
            return load_settings(find_config(self.config.rootpath))
        except RegressionError as exc:
            raise pytest.UsageError(f"torch-regression: {exc}") from None

    def select(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """With --regression-cases FILE (a shard), run only the regression cases it lists,
        and the tests that are no regression cases only if it says so (shard 1)."""
        path = config.getoption("regression_cases")
        if not path:
            return
        selection = json.loads(Path(path).read_text(encoding="utf-8"))
        wanted, others = set(selection["cases"]), bool(selection["others"])
        keep = [i for i in items if (i.nodeid in wanted if uses_fixture(i) else others)]
        dropped = [i for i in items if i not in keep]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def prepare(self) -> None:
        """Find the reference for this environment; raises UsageError when it can't."""
        settings = self._settings()
        try:
            revision = settings.revision_for(self.config.getoption("regression_reference"))
            sha = resolve_revision(open_repo(settings.root), revision)
            self.settings: Settings = settings
            self.label = describe(revision, sha)
            self.entry = Entry(settings.cache_dir, environment_parts(settings, sha))
            self.harness = HarnessDigests(self.config.rootpath,
                                          extra_harness_files(settings.root, settings.harness))
            determinism.prepare_process(settings.device)
            determinism.apply(settings.determinism)  # once here: the first call takes seconds
        except RegressionError as exc:
            raise pytest.UsageError(f"torch-regression: {exc}") from None

    def fixture(self, item: pytest.Item) -> Regression:
        from .fixture import CheckSink, Regression

        assert self.entry is not None
        record = self._record(item)
        sink = self.sinks[item.nodeid] = CheckSink(record, self.label)
        return Regression(item.nodeid, self.settings.determinism.seed, sink)

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

    def report(self, item: pytest.Item, report: pytest.TestReport) -> None:
        if uses_fixture(item):
            self.durations[item.nodeid] = self.durations.get(item.nodeid, 0.0) + report.duration
        sink = self.sinks.get(item.nodeid)
        if sink is None or report.when != "call":
            return
        self.outcomes[item.nodeid] = self._outcome(item.nodeid, sink, report)
        strict = bool(self.config.getoption("regression_strict"))
        if not report.failed and sink.differences:
            report.outcome = "failed"
            report.longrepr = (f"outputs differ from the reference {self.label} although the "
                               f"test did not fail: {sink.differences[0]}")
        elif report.skipped and sink.in_reference:
            report.outcome = "failed"
            report.longrepr = (f"skipped, but the reference {self.label} recorded this case: "
                               f"{_reason(report)}")
        elif report.passed and not sink.in_reference:
            message = f"not in reference {self.label}: {sink.record.reason}"
            report.outcome = "failed" if strict else "skipped"
            report.longrepr = message if strict else (str(item.path), 0, message)
        elif report.passed and sink.unchecked():
            report.outcome = "failed"
            report.longrepr = self._unchecked_message(sink)

    def _unchecked_message(self, sink: CheckSink) -> str:
        names = ", ".join(map(repr, sink.unchecked()))
        return f"the reference {self.label} has outputs this test did not check: {names}"

    def _outcome(self, nodeid: str, sink: CheckSink, report: pytest.TestReport) -> CaseOutcome:
        if sink.differences:
            return CaseOutcome(nodeid, CHANGED, str(sink.differences[0]))
        if report.failed or (report.skipped and sink.in_reference):
            return CaseOutcome(nodeid, ERROR, _reason(report))
        if not sink.in_reference:
            return CaseOutcome(nodeid, NEW, sink.record.reason)
        if sink.unchecked():
            return CaseOutcome(nodeid, ERROR, self._unchecked_message(sink))
        return CaseOutcome(nodeid, IDENTICAL)

    def finish(self, session: pytest.Session) -> None:
        """Prove where the subject came from, store durations, write summaries."""
        if self.entry is not None:  # regression cases ran: the candidate must be the tree
            root = self.subject_root or self.settings.root / self.settings.subject_path
            try:
                verify_origins(self.settings.subject_packages, root)
            except RegressionError as exc:
                session.config.stash[FINISH_ERROR] = str(exc)
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
        durations_path = self.config.getoption("regression_durations")
        if durations_path and self.durations:
            store_durations(Path(durations_path), self.durations)
        self.write_step_summary()

    def summary(self) -> list[str]:
        lines = summary_lines(self.label, self.outcomes.values()) if self.outcomes else []
        error = self.config.stash.get(FINISH_ERROR, "")
        return [*lines, f"ERROR {error}"] if error else lines

    def write_step_summary(self) -> None:
        path = os.environ.get("GITHUB_STEP_SUMMARY")
        if path and self.outcomes:
            with open(path, "a", encoding="utf-8") as stream:
                stream.write(markdown_summary(self.label, self.outcomes.values()))
