"""pytest glue: options, the `regression` fixture, and the one mode plugin of this run.

Inert for tests that do not use the fixture: nothing heavy is loaded until one does.
"""

from __future__ import annotations

import pytest

from regression.errors import RegressionError
from regression.run.job import CheckJob, CollectJob, current_job

MODE_PLUGIN = "torch-regression-mode"
"""The plugin of this run that serves the `regression` fixture (each mode registers it)."""


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("regression", "bit-exact regression against a git revision")
    group.addoption("--regression-reference", default=None, metavar="REV",
                    help="reference revision or name from config.yaml (default: config.yaml)")
    group.addoption("--regression-strict", action="store_true", default=False,
                    help="fail cases that are not in the reference instead of skipping them")
    group.addoption("--regression-no-gen", action="store_true", default=False,
                    help="never record: a case without a valid reference fails with the reason")
    group.addoption("--regression-durations", default=None, metavar="FILE",
                    help="merge the seconds each regression case took into this JSON file")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Register this run's plugins, one per concern, as its mode needs them, before any
    conftest can import the subject."""
    try:
        job = current_job()
    except RegressionError as exc:
        raise pytest.UsageError(f"torch-regression: {exc}") from None
    if job is None or isinstance(job, CheckJob):
        from regression.plugin import check

        check.register(early_config, job)
    elif isinstance(job, CollectJob):
        from regression.plugin import collect

        collect.register(early_config, job)
    else:
        from regression.plugin import recording_mode

        recording_mode.register(early_config, job, MODE_PLUGIN)


@pytest.fixture
def regression(request: pytest.FixtureRequest) -> object:
    """Inputs from the case's own generator, and check() against the reference revision."""
    mode = request.config.pluginmanager.get_plugin(MODE_PLUGIN)
    if mode is None:
        pytest.fail("the regression fixture is not available in this run", pytrace=False)
    return mode.fixture(request.node)
