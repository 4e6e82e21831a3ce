"""Record mode: the plugins of a recording process, one per concern, each registered for
the kinds of job it serves; they share one RecordingRun and import none of each other."""

from __future__ import annotations

import pytest

from regression.errors import RegressionError
from regression.plugin.beside_check import BesideCheckRun
from regression.plugin.kernel_settings import KernelSettings
from regression.plugin.recording_run import CaseHandler, RecordingRun
from regression.plugin.reproduce import Reproducer
from regression.plugin.result_writer import ResultWriter
from regression.plugin.store_cases import CaseStorer
from regression.plugin.subject_guard import SubjectGuard
from regression.plugin.trace_case import CaseTracer
from regression.plugin.wanted_cases import WantedCases
from regression.run.job import RecordingJob, RecordJob, ReproduceJob


def register(config: pytest.Config, job: RecordingJob, mode_plugin: str) -> None:
    """Register the plugins of a recording before conftests load, the one that serves the
    fixture as `mode_plugin`, and ready the process: kernel settings, the import redirect,
    beside a check run the watch of what it touches, and recording a worktree, its project
    folder as the working folder."""
    run = RecordingRun(job)
    run.keeper = keeper_for(run, job)
    kernel, guard = KernelSettings(run), SubjectGuard(run)
    beside = BesideCheckRun(run, job.beside) \
        if isinstance(job, RecordJob) and job.beside is not None else None
    plugins = config.pluginmanager
    plugins.register(kernel, "torch-regression-kernel-settings")
    plugins.register(guard, "torch-regression-subject-guard")
    if beside is not None:
        plugins.register(beside, "torch-regression-beside-check-run")
    plugins.register(WantedCases(run), mode_plugin)
    plugins.register(run.keeper, "torch-regression-keeper")
    plugins.register(ResultWriter(run), "torch-regression-result-writer")
    try:
        kernel.prepare()
        guard.redirect()
    except RegressionError as exc:
        run.fail(exc)
        raise pytest.UsageError(str(exc)) from None
    if beside is not None:  # before any of the user's code runs
        beside.start()
    guard.enter_workdir()


def keeper_for(run: RecordingRun, job: RecordingJob) -> CaseHandler:
    """The plugin that keeps what the job's kind wants of each case."""
    if isinstance(job, RecordJob):
        return CaseStorer(run, job)
    if isinstance(job, ReproduceJob):
        return Reproducer(run)
    return CaseTracer(run, job)
