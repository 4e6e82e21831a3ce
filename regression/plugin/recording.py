"""A recording process: runs the wanted cases against the subject imported from the
worktree, and hands each case, as it ends, to the plugin of its job (record, verify or
trace), which keeps only what the end of the run needs of it."""

from __future__ import annotations

import atexit
import importlib
import json
import os
import sys
import traceback
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generator, Protocol, Sequence

import pytest

from regression.environment import determinism
from regression.errors import DeterminismError, RegressionError, SubjectImportError, error_data, \
    error_from_data
from regression.environment.fingerprint import environment_parts, packages_in
from regression.environment.harness import extra_harness_files, helper_digests
from regression.plugin.common import crash_reason, exception_reason, report_reason, \
    traceback_frames, uses_fixture
from regression.plugin.importer import install_redirect, verify_origins
from regression.plugin.strays import require_own_files, stray_modules
from regression.plugin.tree_watch import TreeWatch, own_reads, stop_watching, watch_tree
from regression.plugin.relay import CONTROLLER, ERROR, SOLO, Relay, attach, role
from regression.run import overlap
from regression.run.handoff import ask_shared, receive_cases
from regression.run.job import PROGRESS, RecordJob, decode
from regression.run.types import RecordResult
from regression.store.cache import Entry
from regression.store.record import Output
from regression.repository.worktree import lay_working_harness

if TYPE_CHECKING:  # torch is imported only once a test uses the fixture
    from regression.plugin.fixture import RecordSink, Regression

WORKER_KEY = "torch_regression_recorded"
NOT_COLLECTABLE = "could not be collected at the reference: "
"""The start of why a case that failed to collect at the reference is not in it."""
_PYTEST_SETTINGS = ("pyproject.toml", "pytest.ini", ".pytest.ini", "tox.ini", "setup.cfg")


class Keeper(Protocol):
    """What a recording does with each case: record it, verify it, or trace it."""

    def case_done(self, nodeid: str, outputs: tuple[Output, ...]) -> None:
        """A wanted case ended, with what it checked (the recording's `ran` and `absent`
        say how it ended)."""

    def result(self) -> dict[str, Any]:
        """Once the recording is proven the reference's: the job's result."""

    def discard(self) -> None:
        """The recording failed: nothing of it may be kept."""

    def merged(self, results: list[dict[str, Any]]) -> dict[str, Any]:
        """xdist's controller: the job's result from its workers' results."""


def register(config: pytest.Config, job: RecordJob) -> None:
    """The plugins of a recording: the shared one serves the fixture; the job's keeper."""
    from regression.plugin import MODE_PLUGIN

    recording = Recording(job)
    keeper: Keeper
    if job.trace:
        from regression.plugin.trace import Trace

        keeper = Trace(recording)
    elif job.verify:
        from regression.plugin.verify import Verify

        keeper = Verify(recording)
    else:
        from regression.plugin.record import Record

        keeper = Record(recording)
    recording.keeper = keeper
    config.pluginmanager.register(recording, MODE_PLUGIN)
    config.pluginmanager.register(keeper, "torch-regression-keeper")
    recording.start()


class Recording:
    """A pytest plugin: runs each wanted case at the reference, and says why one is not in
    the reference."""

    def __init__(self, job: RecordJob) -> None:
        self.job = job
        self.settings = job.settings
        self.subject_root = Path(job.subject_root)
        self.roots = (self.subject_root.resolve(), self.settings.root.resolve())
        self.keeper: Keeper | None = None
        self.sinks: dict[str, RecordSink] = {}
        """The cases under way, with what they checked so far."""
        self.absent: dict[str, str] = {}
        self.collect_errors: dict[str, str] = {}
        self.error_reasons: dict[str, str] = {}
        self.collected: set[str] | None = None  # None: this process collected nothing
        self.ran: set[str] = set()
        self.failed = False
        self.stopping = ""
        """Why the recording stops after the case under way (its check run is gone)."""
        self.wrote_result = False
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "")
        """Under pytest-xdist: this worker's id; it stores the cases it ran."""
        self.from_workers: list[dict[str, Any]] = []
        self.finished = 0
        self.config: pytest.Config | None = None
        self.relay: Relay | None = None
        self.watch: TreeWatch | None = None
        """What this process reads from the user's repository, when recording a worktree."""
        self.test_modules: set[Path] = set()
        self.helpers: dict[str, str] = {}
        self.touches: overlap.Touches | None = None
        """Beside a check run: what this process touches outside its own folders."""
        self.answers = job.wanted
        """Beside a check run: the pipe its cases came on, and the answer to `shared` comes."""
        self._entry: Entry | None = None

    @property
    def keeps(self) -> Keeper:
        assert self.keeper is not None
        return self.keeper

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config
        self.relay = attach(config, self._relayed)
        self.relay.on_worker_done(WORKER_KEY, self._worker_done)

    def _relayed(self, kind: str, text: str) -> None:
        """xdist's controller: the first error a worker reports stops the recording."""
        if kind == ERROR and not self.failed:
            self.fail(error_from_data(json.loads(text)))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        """xdist's controller: a case whose worker died stops the recording, named."""
        if not self.failed:
            self.fail(RegressionError(f"{crashitem} stopped the recording at the reference: "
                      f"{crash_reason(report)}. The cases other workers finished are stored; "
                      "`invoke gen --workers 1` records in one process, whose output shows "
                                      "why."))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Under xdist the controller counts the cases its workers finished."""
        if report.when == "teardown" and self.config is not None \
                and role(self.config) == CONTROLLER:
            self._progress(report.nodeid)

    def _progress(self, nodeid: str) -> None:
        """A line per wanted case as it finishes, for the parent to show: pytest's own
        progress stays in the captured output. In one process the line comes once the case
        is stored, so a case counted is a case kept if the run is interrupted."""
        if nodeid not in self.job.cases or self.config is None:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        self.finished += 1
        reporter.ensure_newline()
        reporter.write_line(f"{PROGRESS}[{self.finished}/{len(self.job.cases)}] "
                            f"{nodeid}", flush=True)

    def start(self) -> None:
        """Before conftests load: kernel settings, then the import redirect; recording a
        worktree, its project folder becomes the working folder and the user's repository
        is watched."""
        try:
            determinism.prepare_process(self.settings.device)
            install_redirect(self.settings.subject_packages, self.subject_root, strict=True)
        except RegressionError as exc:
            self.fail(exc)
            raise pytest.UsageError(str(exc)) from None
        if self.job.handoff >= 0:  # beside a check run: before any of the user's code runs
            self.touches = overlap.Touches([*overlap.tool_folders(self.settings.cache_dir),
                                            self.settings.path])
            overlap.watch(self.touches)
        if self.job.workdir:
            if not self.worker:  # the controller of xdist's workers lays it for them
                self._lay_working_harness()
            os.chdir(self.job.workdir)  # arguments resolve against where pytest started
            self.watch = self._tree_watch()
            watch_tree(self.watch)

    def shared(self) -> list[str]:
        """Beside a check run, once the cases have ended: what this recording used that the
        check run wrote meanwhile (files, ports), as the check run says."""
        touches, self.touches = self.touches, None
        if touches is None:
            return []
        overlap.stop(touches)
        shared = ask_shared(self.job.handoff, self.answers, touches.data()) \
            if self.answers >= 0 else None
        if shared is None:
            raise RegressionError(
                "the check run that started this recording ended before it: nothing is "
                "stored, as the entry's lock went with it")
        return shared

    def _lay_working_harness(self) -> None:
        """The worktree's test folders and `harness` files become the working tree's."""
        root = self.settings.root
        lay_working_harness(Path(self.job.workdir), root, self.settings.tests,
                            extra_harness_files(root, self.settings.harness),
                            [root / self.settings.subject_path / p
                             for p in self.settings.subject_packages])

    def _tree_watch(self) -> TreeWatch:
        """A watch of the user's repository: free are the worktree, the cache, git's
        folder, config.yaml and pytest's settings, and `harness` files; test folders are
        hashed; the subject's folders are named as such."""
        root = self.settings.root
        free = [Path(self.job.workdir), self.subject_root, self.settings.cache_dir, root / ".git"]
        files = [self.settings.path, *(root / n for n in _PYTEST_SETTINGS),
                 *extra_harness_files(root, self.settings.harness)]
        subject = [root / self.settings.subject_path / p for p in self.settings.subject_packages]
        return TreeWatch(root, free, files, subject, [root / t for t in self.settings.tests],
                         Path(self.job.workdir), keyed_paths(self.subject_root,
                                                             self.settings.subject_packages))

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if role(session.config) == CONTROLLER:
            return  # pytest-xdist's controller runs no case: its workers import torch
        determinism.apply(self.settings.determinism)  # once here: the first call takes seconds
        if self.touches is not None:
            overlap.note_native_readers()  # torch is loaded now
        for package in self.settings.subject_packages:
            try:
                importlib.import_module(package)
            except BaseException:  # noqa: B036 - any failure at import is reported as data
                self.fail(SubjectImportError(traceback.format_exc(limit=-8)))
                if self.worker:
                    return  # it runs nothing; the relay has told its controller
                pytest.exit(f"the subject {package!r} failed to import at the reference",
                            returncode=3)

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        if self.job.wanted >= 0:  # started early: the check run says now what it needs
            cases, parts = receive_cases(self.job.wanted)
            self.job = replace(self.job, cases=cases, parts=parts, wanted=-1)
        self.collected = (self.collected or set()) | {i.nodeid for i in items}
        self.test_modules |= {i.path for i in items}
        wanted = [i for i in items if i.nodeid in self.job.cases and uses_fixture(i)
                  and not self.failed]
        chosen = set(wanted)  # a list would cost time in the square of the items
        unwanted = [i for i in items if i not in chosen]
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
            self.fail(DeterminismError(f"{item.nodeid}: {call.excinfo.value}"))
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

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        """Once a case has ended, its keeper takes what it checked, and the case lets go."""
        result = yield
        sink = self.sinks.pop(item.nodeid, None)
        if item.nodeid in self.job.cases and uses_fixture(item):
            self.keeps.case_done(item.nodeid, tuple(sink.outputs) if sink else ())
        if self.stopping:
            item.session.shouldstop = self.stopping
        if role(item.config) == SOLO:
            self._progress(item.nodeid)
        return result

    def _reason(self, report: pytest.TestReport | pytest.CollectReport) -> str:
        return self.error_reasons.get(report.nodeid) or report_reason(report)

    def entry(self) -> Entry:
        """The cache entry of the environment the parent planned for, which must be ours.
        The key's packages are the job's: this process reads none of the project's files."""
        if self._entry is None:
            with own_reads():
                parts = environment_parts(self.settings, self.job.resolved.code,
                                          packages_in(self.job.parts))
            entry = Entry(self.settings.cache_dir, parts, reference=self.job.reference)
            if entry.parts != self.job.parts:
                raise RegressionError(
                    "the recording process sees another environment than the one that "
                    "started it: "
                    f"{sorted(k for k in entry.parts if entry.parts[k] != self.job.parts.get(k))}"
                )
            self._entry = entry
        return self._entry

    @pytest.hookimpl(tryfirst=True)  # before xdist's worker sends its output
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if role(session.config) == CONTROLLER:
            self._finish_from_workers(session)
            return
        if not self.failed:
            try:
                verify_origins(self.settings.subject_packages, self.subject_root)
                self._require_own_files()
                self._done(self.keeps.result(), session)
            except RegressionError as exc:
                self.fail(exc)
        if self.failed:
            self.keeps.discard()
        session.exitstatus = 3 if self.failed else 0

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """A recording that wrote its result ends its process here: Python's own teardown
        of torch's modules takes most of a second and serves nothing, and the check run may
        be waiting. The user's atexit functions run first; what is skipped is the rest of
        Python's teardown: joining threads that are not daemons, `__del__` of what is left,
        buffers of files never closed. A recording that failed, or wrote no result, ends as
        any process does, its output whole for the parent to quote."""
        if self.failed or not self.wrote_result or role(config) != SOLO:
            return
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        os._exit(0)

    def _done(self, result: dict[str, Any], session: pytest.Session) -> None:
        """The result goes to the job file, or from an xdist worker to its controller."""
        if self.relay is None or not self.relay.hand_over(WORKER_KEY, result):
            self._write(result)

    def _write(self, data: dict[str, Any]) -> None:
        """A keeper's result, or its error (a trace that stopped), as the job's."""
        if "error" in data:
            self.fail(error_from_data(data))
        else:
            self.job.write_result(decode(RecordResult, data))
            self.wrote_result = True

    def _worker_done(self, data: Any, error: object) -> None:
        """xdist's controller: keep what each worker recorded, or its error."""
        self.from_workers.append(data or error_data(RegressionError(
            f"an xdist worker stopped: {error}")))

    def _finish_from_workers(self, session: pytest.Session) -> None:
        errors = [d for d in self.from_workers if "error" in d]
        if self.failed or errors:
            if errors and not self.failed:
                self.fail(error_from_data(errors[0]))
            session.exitstatus = 3
            return
        self._write(self.keeps.merged(self.from_workers))
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
        unkeyed: dict[str, str] = {}
        if self.watch is not None:
            self.watch.saw_modules()
            self.watch.saw_mappings()
            stop_watching()
            refused, helpers = self.watch.sorted_out(self.test_modules)
            self.helpers = helper_digests(root, helpers)
            unkeyed = self.watch.reference_reads()
        require_own_files(stray, refused, unkeyed, self.settings.subject_packages)

    def not_collected(self, nodeid: str) -> str:
        """Why a case that did not run is not in the reference; "" if it was collected."""
        if self.collected is None or nodeid in self.collected:
            return ""
        path = nodeid.split("::", 1)[0]
        for where, error in self.collect_errors.items():
            if path == where or path.startswith(where.rstrip("/") + "/") or not where:
                return f"{NOT_COLLECTABLE}{error}"
        return "does not exist at the reference"

    def fail(self, error: RegressionError) -> None:
        """Stop the recording with an error the parent raises; a worker's goes to its
        controller through the relay."""
        self.failed = True
        if not self.worker:
            self.job.write_error(error)
        elif self.relay is not None:
            self.relay.send(ERROR, json.dumps(error_data(error)))


def keyed_paths(subject_root: Path, packages: Sequence[str]) -> list[Path]:
    """The subject's code in the reference's worktree, as the key holds it
    (revision.subject_objects): each package's folder, else its module file, else the whole
    subject folder."""
    found = []
    for package in packages:
        folder, module = subject_root / package, subject_root / f"{package}.py"
        if folder.is_dir() and not folder.is_symlink():
            found.append(folder)
        elif module.is_file() and not module.is_symlink():
            found.append(module)
        else:
            found.append(subject_root)
    return found
