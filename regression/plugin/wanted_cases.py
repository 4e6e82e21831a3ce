"""A recording's cases: only the wanted ones run; each one's outputs are kept while it runs,
and handed to the job's keeper once it has ended; why a case failed, skipped or does not
exist at the reference is noted."""

from __future__ import annotations

from typing import TYPE_CHECKING, Generator

import pytest

from regression.errors import DeterminismError
from regression.plugin.common import exception_reason, traceback_frames, uses_fixture
from regression.plugin.recording_run import RecordingRun
from regression.plugin.worker_messages import CONTROLLER, SOLO, role
from regression.run.job import PROGRESS

if TYPE_CHECKING:  # torch is imported only once a test uses the fixture
    from regression.plugin.fixture import RecordSink, Regression


class WantedCases:
    """A pytest plugin: runs each wanted case, serves it the fixture, and says why one is not
    in the reference."""

    def __init__(self, run: RecordingRun) -> None:
        self.run = run
        self.sinks: dict[str, RecordSink] = {}
        """The cases under way, with what they checked so far."""
        self.finished = 0
        self.config: pytest.Config | None = None

    def pytest_configure(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        run = self.run
        run.collected = (run.collected or set()) | {i.nodeid for i in items}
        run.collected_cases |= {i.nodeid for i in items if uses_fixture(i)}
        run.test_modules |= {i.path for i in items}
        wanted = [i for i in items if i.nodeid in run.cases and uses_fixture(i)
                  and not run.failed]
        chosen = set(wanted)  # a list would cost time in the square of the items
        unwanted = [i for i in items if i not in chosen]
        if unwanted:
            config.hook.pytest_deselected(items=unwanted)
        items[:] = wanted

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Cases deselected by -k or -m were collected: they exist at the reference."""
        run = self.run
        run.collected = (run.collected or set()) | {i.nodeid for i in items}
        run.collected_cases |= {i.nodeid for i in items if uses_fixture(i)}
        run.test_modules |= {i.path for i in items}

    def pytest_exception_interact(self, node: pytest.Item | pytest.Collector,
                                  call: pytest.CallInfo[object],
                                  report: pytest.TestReport | pytest.CollectReport) -> None:
        if call.excinfo is not None:
            error = call.excinfo.value
            self.run.error_reasons[report.nodeid] = exception_reason(
                error, traceback_frames(error), self.run.roots)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Remember which files failed to collect at the reference, and why."""
        if report.failed:
            self.run.collect_errors[report.nodeid] = self.run.reason(report)

    def fixture(self, item: pytest.Item) -> Regression:
        from regression.plugin.fixture import RecordSink, Regression

        settings = self.run.settings
        sink = self.sinks.setdefault(item.nodeid, RecordSink(
            settings.digest_above, digests=self.run.keeps.digests))
        return Regression(item.nodeid, settings.determinism, sink, settings.device)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]
                                  ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        report = yield
        run = self.run
        if call.excinfo is not None and isinstance(call.excinfo.value, DeterminismError):
            run.fail(DeterminismError(f"{item.nodeid}: {call.excinfo.value}"))
            item.session.shouldstop = "the determinism settings changed during a case"
        elif call.excinfo is not None:
            error = call.excinfo.value
            run.error_reasons[report.nodeid] = exception_reason(
                error, traceback_frames(error), run.roots)
        if report.when == "call" or not report.passed:
            run.ran.add(report.nodeid)
        if report.failed or report.skipped:
            verb = "skipped" if report.skipped else "failed"
            run.absent.setdefault(report.nodeid, f"{verb}{run.where}: {run.reason(report)}")
        return report

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        """Once a case has ended, the keeper takes what it checked, and the case lets go."""
        result = yield
        run = self.run
        sink = self.sinks.pop(item.nodeid, None)
        if item.nodeid in run.cases and uses_fixture(item):
            run.keeps.case_done(item.nodeid, tuple(sink.outputs) if sink else ())
        if run.stopping:
            item.session.shouldstop = run.stopping
        if role(item.config) == SOLO:
            self._progress(item.nodeid)
        return result

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Under xdist the controller counts the cases its workers finished."""
        if report.when == "teardown" and self.config is not None \
                and role(self.config) == CONTROLLER:
            self._progress(report.nodeid)

    def _progress(self, nodeid: str) -> None:
        """A line per wanted case as it finishes, for the parent to show: pytest's own
        progress stays in the captured output. In one process the line comes once the case
        is stored, so a case counted is a case kept if the run is interrupted."""
        if nodeid not in self.run.cases or self.config is None:
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        self.finished += 1
        reporter.ensure_newline()
        reporter.write_line(f"{PROGRESS}[{self.finished}/{len(self.run.cases)}] "
                            f"{nodeid}", flush=True)

