"""pytest glue: options, and the `regression` fixture served by the one mode plugin of
this run (registered by run/entry.py, pytest's entry point, which loads this module).

Inert for tests that do not use the fixture: nothing heavy is loaded until one does.
"""

from __future__ import annotations

import pytest

MODE_PLUGIN = "torch-regression-mode"
"""The plugin of this run that serves the `regression` fixture (each mode registers it)."""
ENTRY = "regression.run.entry"
"""pytest's entry point (pyproject's pytest11), which registers the mode plugins."""


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


@pytest.fixture
def regression(request: pytest.FixtureRequest) -> object:
    """Inputs from the case's own generator, and check() against the reference revision."""
    manager = request.config.pluginmanager
    mode = manager.get_plugin(MODE_PLUGIN)
    if mode is None and getattr(manager.get_plugin("regression"), "__name__", "") != ENTRY:
        pytest.fail(f"the regression fixture is not available in this run: pytest loaded "
                    f"torch-regression without its entry point {ENTRY}, which registers it "
                    "(installed metadata older than the code?); run `pip install -e .` (or "
                    "install torch-regression) again", pytrace=False)
    if mode is None:
        pytest.fail("the regression fixture is not available in this run", pytrace=False)
    return mode.fixture(request.node)
