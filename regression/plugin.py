"""pytest glue: options, the `regression` fixture and hooks, each handing off to a session.

Inert for tests that do not use the fixture: nothing is loaded until one does.
"""

from __future__ import annotations

from typing import Generator

import pytest

from .job import RECORD, current_job
from .session import Checker, Collector, Recorder, uses_fixture

_STATE = pytest.StashKey[object]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("regression", "bit-exact regression against a git revision")
    group.addoption("--regression-reference", default=None, metavar="REV",
                    help="reference revision or name from config.yaml (default: config.yaml)")
    group.addoption("--regression-strict", action="store_true", default=False,
                    help="fail cases that are not in the reference instead of skipping them")
    group.addoption("--regression-cases", default=None, metavar="FILE",
                    help="run only the regression cases listed in this JSON file (a shard)")
    group.addoption("--regression-durations", default=None, metavar="FILE",
                    help="merge the seconds each regression case took into this JSON file")
    group.addoption("--regression-subject-root", default=None, metavar="DIR",
                    help="import the subject packages from DIR, and prove it (invoke compare)")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    job = current_job()
    state: Checker | Recorder | Collector
    if job is None:
        state = Checker(early_config)
    elif job.mode == RECORD:
        state = Recorder(job)
    else:
        state = Collector(job)
    if isinstance(state, Recorder):  # its pytest_collectreport hears collection errors
        early_config.pluginmanager.register(state, "torch-regression-recorder")
    state.redirect_imports()
    early_config.stash[_STATE] = state


def _state(config: pytest.Config) -> object:
    return config.stash.get(_STATE, None)


def pytest_sessionstart(session: pytest.Session) -> None:
    state = _state(session.config)
    if isinstance(state, Recorder):
        state.import_subject(session)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    state = _state(config)
    if isinstance(state, Collector):
        state.collected(config, items)
    elif isinstance(state, Recorder):
        state.select(config, items)
    elif isinstance(state, Checker):
        state.select(config, items)
        if not config.option.collectonly and any(uses_fixture(i) for i in items):
            state.prepare()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    state = _state(item.config)
    if uses_fixture(item) and isinstance(state, (Recorder, Checker)):
        from . import determinism

        determinism.apply(state.settings.determinism)


@pytest.fixture
def regression(request: pytest.FixtureRequest) -> object:
    """Inputs from the case's own generator, and check() against the reference revision."""
    state = _state(request.config)
    if not isinstance(state, (Recorder, Checker)):
        pytest.fail("the regression fixture is not available in this run", pytrace=False)
    return state.fixture(request.node)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item) -> Generator[None, object, None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    state = _state(item.config)
    if isinstance(state, Recorder):
        state.report(report)
    elif isinstance(state, Checker):
        state.report(item, report)


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = _state(session.config)
    if isinstance(state, Recorder):
        state.finish(session)
    elif isinstance(state, Checker):
        state.finish(session)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    state = _state(terminalreporter.config)
    if isinstance(state, Checker):
        lines = state.summary()
        if lines:
            terminalreporter.section("torch-regression")
            for line in lines:
                terminalreporter.write_line(line)
