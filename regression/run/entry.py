"""pytest's entry point (pyproject's pytest11): loads the plugin's options and fixture
(regression.plugin), and registers this run's plugins as its mode needs them. Check mode's
plugins share one state, and are handed what records the references they need: that starts
processes, so it is handed in from here, above the plugin, which imports no launcher."""

from __future__ import annotations

import gc
import os

import pytest

from regression.errors import RegressionError
from regression.run.job import JOB_ENV, CheckJob, CollectJob, current_job

pytest_plugins = ("regression.plugin",)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    """Register this run's plugins, one per concern, as its mode needs them, before any
    conftest can import the subject; keep the environment as it is before then."""
    from regression.environment.start import keep_start_environment

    keep_start_environment()
    try:
        job = current_job()
    except RegressionError as exc:
        raise pytest.UsageError(f"torch-regression: {exc}") from None
    if job is None or isinstance(job, CheckJob):
        register_check(early_config, job)
    elif isinstance(job, CollectJob):
        from regression.plugin import collect

        collect.register(early_config, job)
    else:
        from regression.plugin import MODE_PLUGIN, recording_mode

        recording_mode.register(early_config, job, MODE_PLUGIN)


@pytest.hookimpl(trylast=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """In a process of ours (one with a job), what is loaded before the session (torch, the
    subject, pytest, the plugins, conftests) is set aside from the garbage collector: each
    full collection of the run then walks what the run made since, not every object of
    torch's (about 0.1 s each on a 2,000-case suite), and a fork's collections leave the
    pages it shares with its parent unwritten. Nothing alive then is collected later; a
    user's own pytest process is left as it is, and so is a session run inside a session
    (pytester's): the first of a process freezes, once."""
    if os.environ.get(JOB_ENV) and os.getpid() not in _FROZE:
        _FROZE.append(os.getpid())
        gc.freeze()


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """The run has ended: its start environment is no longer what this process hands on."""
    from regression.environment.start import forget_start_environment

    forget_start_environment()


_FROZE: list[int] = []
"""The processes whose session froze (a fork's list is its parent's copy: its pid is new)."""


def pytest_cmdline_main(config: pytest.Config) -> None:
    """After xdist read -n N into N local worker specs (its hook runs first): in a run of
    ours that has a fork server, each worker is a fork of it, not a new Python."""
    specs = getattr(config.option, "tx", None)
    if specs and current_job() is not None:
        from regression.run.forkserver import forked_workers

        config.option.tx = forked_workers(list(specs))


def register_check(config: pytest.Config, job: CheckJob | None) -> None:
    """The plugins of a check run, one per concern, each handed the run's one state; the
    judge serves the fixture."""
    from regression.plugin import MODE_PLUGIN
    from regression.plugin.check import Check
    from regression.plugin.end_of_run import EndOfRun
    from regression.plugin.held_reports import HeldReports
    from regression.plugin.judge import Judge
    from regression.plugin.state import CheckState
    from regression.plugin.summary import Summary
    from regression.references.needed import NeededReferences

    state = CheckState(config, job, NeededReferences())
    check = Check(state)
    config.pluginmanager.register(check, "torch-regression-check")
    config.pluginmanager.register(HeldReports(state), "torch-regression-held-reports")
    config.pluginmanager.register(Judge(state), MODE_PLUGIN)
    config.pluginmanager.register(EndOfRun(state), "torch-regression-end-of-run")
    config.pluginmanager.register(Summary(config, state.ledger, job.declarations if job else ()),
                                  "torch-regression-summary")
    check.start()
