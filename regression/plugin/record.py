"""Record mode: runs the wanted cases against the subject imported from the worktree."""

from __future__ import annotations

import importlib
import json
import os
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator

import pytest

from regression import determinism
from regression.store.cache import ABSENT, CaseRecord, Entry
from regression.config import load_settings
from regression.errors import DeterminismError, RegressionError
from regression.fingerprint import environment_parts
from regression.harness import extra_harness_files, helper_digests
from regression.plugin.importer import TreeWatch, install_redirect, require_own_files, stop_watching, \
    stray_modules, verify_origins, watch_tree
from regression.run.job import PROGRESS, Job
from regression.plugin.common import crash_reason, exception_reason, report_reason, traceback_frames, \
    uses_fixture
from regression.plugin.relay import ERROR, Relay, attach

if TYPE_CHECKING:  # torch is imported only once a test uses the fixture
    from regression.plugin.fixture import RecordSink, Regression

WORKER_KEY = "torch_regression_recorded"
_PYTEST_SETTINGS = ("pyproject.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")


class Recorder:
    """A pytest plugin: records each wanted case's outputs, or says why it is not in the
    reference."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self.settings = load_settings(Path(job.config))
        self.subject_root = Path(job.subject_root)
        self.roots = (self.subject_root.resolve(), self.settings.root.resolve())
        self.sinks: dict[str, RecordSink] = {}
        self.absent: dict[str, str] = {}
        self.collect_errors: dict[str, str] = {}
        self.error_reasons: dict[str, str] = {}
        self.collected: set[str] | None = None  # None: this process collected nothing
        self.ran: set[str] = set()
        self.failed = False
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        """Under pytest-xdist: this worker's id; it stores the cases it ran."""
        self.from_workers: list[dict[str, Any]] = []
        self.finished = 0
        self.config: pytest.Config | None = None
        self.trace_problem = ""
        """Trace mode: why the trace of the case stopped, if it did."""
        self.relay: Relay | None = None
        self.watch: TreeWatch | None = None
        """What this process reads from the user's repository, when recording a worktree."""
        self.test_modules: set[Path] = set()
        self.helpers: dict[str, str] = {}

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config
        self.relay = attach(config, self._relayed)

    def _relayed(self, kind: str, text: str) -> None:
        """xdist's controller: the first error a worker reports stops the recording."""
        if kind == ERROR and not self.failed:
            data = json.loads(text)
            self.fail(str(data["error"]), str(data["message"]))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a case whose worker died stops the recording, named."""
        if not self.failed:
            self.fail("WorkerCrash", f"{crashitem} stopped the recording at the reference: "
                      f"{crash_reason(report)}. The cases other workers finished are stored; "
                      "`invoke gen --workers 1` records in one process, whose output shows why.")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A line per wanted case as it finishes, for the parent to show: pytest's own
        progress stays in the captured output. Under xdist the controller counts."""
        if report.when != "teardown" or report.nodeid not in self.job.cases or self.worker \
                or self.config is None:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        self.finished += 1
        reporter.ensure_newline()
        reporter.write_line(f"{PROGRESS}[{self.finished}/{len(self.job.cases)}] "
                                 f"{report.nodeid}", flush=True)

    def start(self) -> None:
        """Before conftests load: kernel settings, then the import redirect; recording a
        worktree, its project folder becomes the working folder and the user's repository
        is watched."""
        try:
            determinism.prepare_process(self.settings.device)
            install_redirect(self.settings.subject_packages, self.subject_root, strict=True)
        except RegressionError as exc:
            self.fail(type(exc).__name__, str(exc))
            raise pytest.UsageError(str(exc)) from None
        if self.job.workdir:
            os.chdir(self.job.workdir)  # arguments resolve against where pytest started
            self.watch = self._tree_watch()
            watch_tree(self.watch)

    def _tree_watch(self) -> TreeWatch:
        """A watch of the user's repository: free are the worktree, the cache, git's
        folder, config.yaml and pytest's settings, and `harness` files; test folders are
        hashed; the subject's folders are named as such."""
        root = self.settings.root
        free = [Path(self.job.workdir), self.subject_root, self.settings.cache_dir, root / ".git"]
        files = [self.settings.path, *(root / n for n in _PYTEST_SETTINGS),
                 *extra_harness_files(root, self.settings.harness)]
        subject = [root / self.settings.subject_path / p for p in self.settings.subject_packages]
        return TreeWatch(root, free, files, subject, [root / t for t in self.settings.tests])

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if session.config.pluginmanager.has_plugin("dsession"):
            return  # pytest-xdist's controller runs no case: its workers import torch
        determinism.apply(self.settings.determinism)  # once here: the first call takes seconds
        for package in self.settings.subject_packages:
            try:
                importlib.import_module(package)
            except BaseException:  # noqa: B036 - any failure at import is reported as data
                self.fail("subject_import", traceback.format_exc(limit=-8))
                if self.worker:
                    return  # it runs nothing; the relay has told its controller
                pytest.exit(f"the subject {package!r} failed to import at the reference",
                            returncode=3)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        self.collected = (self.collected or set()) | {i.nodeid for i in items}
        self.test_modules |= {i.path for i in items}
        wanted = [i for i in items if i.nodeid in self.job.cases and uses_fixture(i)
                  and not self.failed]
        unwanted = [i for i in items if i not in wanted]
        if unwanted:
            config.hook.pytest_deselected(items=unwanted)
        items[:] = wanted

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Cases deselected by -k or -m were collected: they exist at the reference."""
        self.collected = (self.collected or set()) | {i.nodeid for i in items}
        self.test_modules |= {i.path for i in items}

    def pytest_exception_interact(self, node: pytest.Item | pytest.Collector,
                                  call: pytest.CallInfo[object],
                                  report: pytest.TestReport | pytest.CollectReport) -> None:
        if call.excinfo is not None:
            error = call.excinfo.value
            self.error_reasons[report.nodeid] = exception_reason(
                error, traceback_frames(error), self.roots)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember which files failed to collect at the reference, and why."""
        if report.failed:
            self.collect_errors[report.nodeid] = self._reason(report)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if uses_fixture(item):
            determinism.apply(self.settings.determinism)

    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """Files that native code mapped (safetensors) raise no audit event: look now."""
        if self.watch is not None:
            self.watch.saw_mappings()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        """`invoke explain`: every module call of the case's body goes into its trace."""
        if not self.job.trace:
            return (yield)
        from regression.diagnose.trace import Tracer

        with Tracer(Path(self.job.trace), test=getattr(item, "obj", None)) as tracer:
            try:
                return (yield)
            finally:
                self.trace_problem = tracer.problem

    def fixture(self, item: pytest.Item) -> Regression:
        from regression.plugin.fixture import RecordSink, Regression

        sink = self.sinks.setdefault(item.nodeid, RecordSink(
            self.settings.digest_above, digests=not (self.job.trace or self.job.full_values)))
        return Regression(item.nodeid, self.settings.determinism, sink, self.settings.device)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        if call.excinfo is not None and isinstance(call.excinfo.value, DeterminismError):
            self.fail("DeterminismError", f"{item.nodeid}: {call.excinfo.value}")
            item.session.shouldstop = "the determinism settings changed during a case"
        elif call.excinfo is not None:
            error = call.excinfo.value
            self.error_reasons[report.nodeid] = exception_reason(
                error, traceback_frames(error), self.roots)
        if report.when == "call" or not report.passed:
            self.ran.add(report.nodeid)
        if report.failed or report.skipped:
            verb = "skipped" if report.skipped else "failed"
            where = "" if self.job.trace else " at the reference"  # explain says where
            self.absent.setdefault(report.nodeid, f"{verb}{where}: {self._reason(report)}")
        return report

    def _reason(self, report: pytest.TestReport | pytest.CollectReport) -> str:
        return self.error_reasons.get(report.nodeid) or report_reason(report)

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker sends its output
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if session.config.pluginmanager.hasplugin("dsession"):  # xdist's controller
            self._finish_from_workers(session)
            return
        if not self.failed:
            try:
                verify_origins(self.settings.subject_packages, self.subject_root)
                self._require_own_files()
                if self.job.trace:
                    self._done(self._traced(), session)
                elif self.job.verify:
                    self._done({"differ": self._differing()}, session)
                else:
                    recorded, absent = self._store()
                    self._done({"recorded": recorded, "absent": absent}, session)
            except RegressionError as exc:
                self.fail(type(exc).__name__, str(exc))
        session.exitstatus = 3 if self.failed else 0

    def _done(self, result: dict[str, Any], session: pytest.Session) -> None:
        """The result goes to the job file, or from an xdist worker to its controller."""
        output = getattr(session.config, "workeroutput", None)
        if output is not None:
            output[WORKER_KEY] = result
        else:
            self.job.write_result(result)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: object, error: object) -> None:
        """xdist's controller: keep what each worker recorded, or its error."""
        data = getattr(node, "workeroutput", {}).get(WORKER_KEY)
        self.from_workers.append(data or {"error": "worker",
                                          "message": f"an xdist worker stopped: {error}"})

    def _finish_from_workers(self, session: pytest.Session) -> None:
        errors = [d for d in self.from_workers if "error" in d]
        if self.failed or errors:
            if errors and not self.failed:
                self.fail(str(errors[0]["error"]), str(errors[0]["message"]))
            session.exitstatus = 3
            return
        if self.job.verify:
            self.job.write_result({"differ": {k: v for d in self.from_workers
                                              for k, v in d["differ"].items()}})
            session.exitstatus = 0
            return
        recorded = sorted({n for d in self.from_workers for n in d["recorded"]})
        absent = {k: v for d in self.from_workers for k, v in d["absent"].items()}
        self.job.write_result({"recorded": recorded, "absent": absent})
        session.exitstatus = 0

    def _require_own_files(self) -> None:
        """Every module from the user's repository must be subject (from the worktree),
        test code or harness, and so must every file read or run from it: anything else
        would be the candidate posing as reference. What the tests used in the test folders
        besides the test modules becomes the cases' helpers."""
        root = self.settings.root
        tests = [root / t for t in self.settings.tests]
        harness = extra_harness_files(root, self.settings.harness)
        stray = stray_modules(root, [self.subject_root, *tests], harness)
        refused: dict[str, str] = {}
        if self.watch is not None:
            self.watch.saw_modules()
            self.watch.saw_mappings()
            stop_watching()
            refused, helpers = self.watch.sorted_out(self.test_modules)
            self.helpers = helper_digests(root, helpers)
        require_own_files(stray, refused)

    def _entry(self) -> Entry:
        """The cache entry of the environment the parent planned for, which must be ours."""
        entry = Entry(self.settings.cache_dir, environment_parts(self.settings,
                                                                 self.job.reference))
        if entry.parts != self.job.parts:
            raise RegressionError(
                "the recording process sees another environment than the one that started "
                f"it: {sorted(k for k in entry.parts if entry.parts[k] != self.job.parts.get(k))}"
            )
        return entry

    def _store(self) -> tuple[list[str], dict[str, str]]:
        entry = self._entry()
        entry.create()
        recorded, absent = [], {}
        for nodeid, harness in self.job.cases.items():
            # Every xdist worker collects every case; the first one alone stores those
            # that do not exist at the reference.
            known = self.worker in ("", "gw0")
            reason = self.absent.get(nodeid) or (self._not_collected(nodeid) if known else "")
            if reason:
                entry.save_case(CaseRecord(nodeid, harness, status=ABSENT, reason=reason,
                                           helpers=self.helpers))
                absent[nodeid] = reason
            elif nodeid in self.ran:
                sink = self.sinks.get(nodeid)
                outputs = tuple(sink.outputs) if sink else ()
                entry.save_case(CaseRecord(nodeid, harness, outputs=outputs,
                                           helpers=self.helpers))
                recorded.append(nodeid)
            # else: collected but never run (-x, --maxfail, -k in addopts): store nothing
        return recorded, absent

    def _traced(self) -> dict[str, Any]:
        """Trace mode: the case's checked outputs go next to its trace, not to the cache."""
        from regression.diagnose.trace import write_outputs

        if self.trace_problem:
            disk = ("; a trace needs room for every module output of the case in the "
                    "temporary folder: point TMPDIR at a disk with more room"
                    if self.trace_problem.startswith("OSError") else "")
            return {"error": "TraceError", "message": "the trace of the case stopped, so it "
                    f"cannot be explained: {self.trace_problem}{disk}"}
        for nodeid in self.job.cases:
            sink = self.sinks.get(nodeid)
            if nodeid in self.ran and nodeid not in self.absent:
                outputs = {o.name: o.value for o in sink.outputs} if sink else {}
                write_outputs(Path(self.job.trace), outputs)
                return {"recorded": [nodeid], "absent": {}}
        return {"recorded": [], "absent": {
            n: self.absent.get(n) or self._not_collected(n) or "it did not run"
            for n in self.job.cases}}

    def _differing(self) -> dict[str, list[str]]:
        """Verify mode: the cases whose outputs differ from what the first recording stored,
        each with the names of those outputs (all of them if it no longer ran)."""
        from regression.compare import compare_outputs

        entry = self._entry()
        differ = {}
        for nodeid in self.job.cases:
            stored = entry.load_case(nodeid)
            if stored is None or stored.status == ABSENT:
                continue
            before = {o.name: o.value for o in stored.outputs}
            sink = self.sinks.get(nodeid)
            now = {o.name: o.value for o in sink.outputs} if sink and nodeid in self.ran else {}
            names = sorted(name for name, _ in compare_outputs(before, now))
            if names:
                differ[nodeid] = names
        return differ

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
        """Stop the recording with an error the parent raises; a worker's goes to its
        controller through the relay."""
        self.failed = True
        self.error: dict[str, Any] = {"error": kind, "message": message}
        if not self.worker:
            self.job.write_result(self.error)
        elif self.relay is not None:
            self.relay.send(ERROR, json.dumps(self.error))
